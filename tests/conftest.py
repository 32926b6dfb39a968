"""Shared fixtures: small embedded data, tiny federations."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from fl_gym import FederationConfig, partition_scheme
from fl_gym.data import load_dataset


def pytest_addoption(parser):
    parser.addoption("--shuffle", type=int, default=None, metavar="SEED",
                     help="run the tests in an order shuffled by SEED: a test that passes only after "
                     "another one has run fails then")


def pytest_collection_modifyitems(config, items):
    seed = config.getoption("--shuffle")
    if seed is not None:
        random.Random(seed).shuffle(items)


@pytest.fixture(scope="session")
def digits():
    return load_dataset("digits")


@pytest.fixture(scope="session")
def digits_parts(digits):
    from fl_gym.data import partition

    return partition(digits.y_train.numpy(), 10, partition_scheme("dirichlet", alpha=0.5),
                     np.random.default_rng(0))


@pytest.fixture
def tiny_config():
    return FederationConfig(num_clients=4, partition=partition_scheme("dirichlet", alpha=1.0),
                            models=("mlp-small",))


@pytest.fixture(autouse=True)
def _seed_guard():
    """Tests must not depend on global RNG state: scramble it before each test."""
    torch.manual_seed(12345)
    np.random.seed(54321)


import toy_family  # noqa: E402  (tests/ is on sys.path: the toy family of docs/extending.md)

toy_family.register()  # the generic tests then run over it too
