"""The stand-alone side of the env/loop equivalence tests: a federation reset as an env resets it."""

from __future__ import annotations

from gymnasium.utils.seeding import np_random

from fl_gym import Federation
from fl_gym.envs.scenario import EnvConfig


def standalone(config: EnvConfig, seed: int) -> tuple[Federation, object]:
    """The federation of ``config`` after ``env.reset(seed=seed)``'s draws, and the env's generator.

    ``FLEnv.reset`` seeds its ``np_random`` with ``seed``, draws the federation's episode seed
    from it and hands it over as the candidate sampler; the generator is returned so a test can
    make the env's later draws (e.g. a participation schedule) in the same order.
    """
    fed = Federation(config.federation_config(), scenario_seed=0)
    rng, _ = np_random(seed)
    fed.reset(seed=int(rng.integers(2**63 - 1)), sampler=rng)
    return fed, rng
