from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fl_gym.aggregation import ServerConfig, ServerOptimizer, aggregation_weights, weighted_average


def test_weights_sum_to_one_and_reduce_to_mean():
    sizes = np.array([10, 30, 60])
    np.testing.assert_allclose(aggregation_weights("datasize", sizes), [0.1, 0.3, 0.6])
    np.testing.assert_allclose(aggregation_weights("uniform", sizes), [1 / 3] * 3)
    w = aggregation_weights("entropy_acc", sizes, np.full(3, 2.0), np.full(3, 0.7))
    np.testing.assert_allclose(w, [1 / 3] * 3)
    w = aggregation_weights("entropy_acc", sizes, np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.9, 0.1]))
    assert w.sum() == pytest.approx(1.0)


def test_entropy_acc_by_hand_and_monotone():
    h, acc = np.array([0.0, 1.0]), np.array([0.5, 1.0])
    sm = lambda v: np.exp(v) / np.exp(v).sum()  # noqa: E731
    w = aggregation_weights("entropy_acc", np.ones(2), h, acc)
    np.testing.assert_allclose(w, 0.5 * (sm(h) + sm(acc)))
    assert w[1] > w[0]  # higher entropy and accuracy never get less weight
    rng = np.random.default_rng(0)
    for _ in range(50):
        h, acc = rng.uniform(0, 3.3, 5), rng.uniform(0, 1, 5)
        w = aggregation_weights("entropy_acc", np.ones(5), h, acc)
        for i in range(5):
            for j in range(5):
                if h[i] >= h[j] and acc[i] >= acc[j]:
                    assert w[i] >= w[j] - 1e-15


def test_weighted_average_stays_within_inputs():
    rows = torch.randn(4, 100, generator=torch.Generator().manual_seed(0))
    h, acc = np.array([0.1, 2, 3, 1.0]), np.array([0.3, 0.5, 0.9, 0.2])
    w = torch.tensor(aggregation_weights("entropy_acc", np.ones(4), h, acc))
    avg = weighted_average(rows, w)
    assert torch.all(avg <= rows.max(0).values + 1e-6) and torch.all(avg >= rows.min(0).values - 1e-6)


def test_fedadam_by_hand():
    cfg = ServerConfig("fedadam", lr=0.1, betas=(0.9, 0.99), tau=1e-3)
    server = ServerOptimizer(cfg)
    w0, avg = torch.tensor([1.0, -1.0]), torch.tensor([1.5, -1.0])
    delta = avg - w0
    m = 0.1 * delta
    v = 0.99 * 1e-6 + 0.01 * delta ** 2
    expected = w0 + 0.1 * m / (v.sqrt() + 1e-3)
    torch.testing.assert_close(server.apply(w0, avg), expected)


def test_fedavgm_by_hand_over_two_rounds():
    server = ServerOptimizer(ServerConfig("fedavgm", lr=0.5, momentum=0.9))
    w0 = torch.tensor([1.0, 2.0])
    w1 = server.apply(w0, torch.tensor([2.0, 2.0]))  # delta (1, 0): v = (1, 0), w = w0 + 0.5 v
    torch.testing.assert_close(w1, torch.tensor([1.5, 2.0]))
    w2 = server.apply(w1, torch.tensor([1.5, 3.0]))  # delta (0, 1): v = (0.9, 1)
    torch.testing.assert_close(w2, torch.tensor([1.95, 2.5]))


def test_fedavgm_without_momentum_at_rate_one_is_the_average():
    server = ServerOptimizer(ServerConfig("fedavgm", momentum=0.0))
    avg = torch.tensor([0.3, -0.7])
    for _ in range(2):
        torch.testing.assert_close(server.apply(torch.zeros(2), avg), avg)


def test_pfedme_mixing():
    server = ServerOptimizer(ServerConfig(), mix=0.5)
    torch.testing.assert_close(server.apply(torch.zeros(3), torch.ones(3)), torch.full((3,), 0.5))


@pytest.mark.parametrize("kwargs,param", [(dict(name="sgd"), "server"), (dict(lr=-1), "server_lr"),
                                          (dict(tau=math.nan), "tau"),
                                          (dict(momentum=1.0), "server_momentum")])
def test_bad_server_config(kwargs, param):
    with pytest.raises(ValueError, match=f"{param}="):
        ServerConfig(**kwargs)
