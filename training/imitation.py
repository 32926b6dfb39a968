"""A warm start by imitation: a fresh agent copies a fixed policy before reinforcement learning.

Where PPO from a random start never finds what a simple rule does (five keep-or-drop decisions
share one noisy reward, so the credit for the one that mattered is hard to assign), behaviour
cloning starts it at the rule: the policy's log-likelihood of the rule's actions is maximised on
the rule's own episodes (Pomerleau's behaviour cloning, as DQfD and AlphaStar start their agents),
and the value head is regressed on the discounted returns those episodes earned, so that PPO's
first advantages are not the noise of an untrained critic. A Gaussian policy's exploration
noise (``log_std``) is left as the block sets it: the likelihood of a deterministic rule's
actions would shrink it to nothing, and PPO could no longer move from its start. Whether PPO
then improves on its start is the test of learning: each run keeps the imitated model
(``imitated.zip``) to be scored beside the trained one.

A ``ppo.yml`` block asks for it with ``imitate`` (a fixed policy of the env by name, as in
``fl-gym compare``), ``imitate_episodes`` (the rule's episodes on the training federations),
``imitate_epochs`` (passes over them) and ``imitate_lr`` (the optimiser's rate meanwhile);
:data:`DEFAULTS` holds the values a block leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm

from fl_gym.training.compare import PolicySpec, policy_spec
from fl_gym.training.evaluation import demonstrate
from fl_gym.validation import require

DEFAULTS = {"imitate_episodes": 64, "imitate_epochs": 60, "imitate_lr": 1e-3}


@dataclass(frozen=True)
class Demonstrations:
    """A fixed policy's steps: ``observations``, ``actions`` and discounted ``returns``, a row per step."""

    observations: np.ndarray
    actions: np.ndarray
    returns: np.ndarray


def demonstrations(env_id: str, env_kwargs: dict[str, Any], policy: str, seeds: list[int], gamma: float
                   ) -> Demonstrations:
    """The fixed policy ``policy``'s episodes on ``env_id`` seeded ``seeds``, each step's return discounted.

    ``policy`` is the policy's name as :func:`fixed_policy` takes it.
    """
    rule = fixed_policy(policy, env_id, env_kwargs)
    played = demonstrate(partial(gym.make, env_id, **env_kwargs), rule.factory, seeds)
    observations, actions, returns = [], [], []
    for episode, trajectory in played:
        observations += [obs for obs, _ in trajectory]
        actions += [action for _, action in trajectory]
        returns += _discounted(episode.rewards, gamma)
    return Demonstrations(np.stack(observations), np.stack(actions), np.asarray(returns))


def fixed_policy(policy: Any, env_id: str, env_kwargs: dict[str, Any]) -> PolicySpec:
    """The fixed policy an agent of ``env_id`` with ``env_kwargs`` can imitate.

    Raises:
        ValueError: not a fixed policy of the env, or one that plays another variant of it.
    """
    require(isinstance(policy, str) and ":" not in policy, "imitate", policy,
            f"a fixed policy of {env_id} by name (NAME or NAME[key=value,...]), not a trained model")
    chosen = policy_spec(policy, env_id)
    other = {k: v for k, v in chosen.env_kwargs.items() if env_kwargs.get(k) != v}
    require(not other, "imitate", policy,
            f"a fixed policy that plays the agent's env (this one plays it with {other})")
    return chosen


def _discounted(rewards: list[float], gamma: float) -> list[float]:
    out, ahead = [], 0.0
    for reward in reversed(rewards):
        ahead = reward + gamma * ahead
        out.append(ahead)
    return out[::-1]


def imitate(model: BaseAlgorithm, demos: Demonstrations, epochs: int, lr: float) -> tuple[float, float]:
    """Fit ``model``'s policy to the demonstrations with its optimiser at rate ``lr``.

    Minibatches of ``model.batch_size``; the optimiser's own rate and a Gaussian's exploration
    noise (``log_std``) are as before afterwards. Returns the mean log-likelihood per step of the
    demonstrated actions before and after.
    """
    policy = model.policy
    obs, _ = policy.obs_to_tensor(demos.observations)
    actions = torch.as_tensor(demos.actions, dtype=torch.float32, device=policy.device)
    if isinstance(model.action_space, spaces.Discrete):
        actions = actions.long().flatten()
    returns = torch.as_tensor(demos.returns, dtype=torch.float32, device=policy.device)
    before = _likelihood(policy, obs, actions)
    rates = [group["lr"] for group in policy.optimizer.param_groups]
    noise = getattr(policy, "log_std", None)
    kept = None if noise is None else noise.detach().clone()
    for group in policy.optimizer.param_groups:
        group["lr"] = lr
    policy.set_training_mode(True)
    for _ in range(epochs):
        for rows in torch.randperm(len(returns), device=policy.device).split(model.batch_size):
            _descend(model, obs[rows], actions[rows], returns[rows])
    policy.set_training_mode(False)
    for group, rate in zip(policy.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    if kept is not None:
        noise.data.copy_(kept)
    return before, _likelihood(policy, obs, actions)


def _descend(model: BaseAlgorithm, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor) -> None:
    """One step on a minibatch: the negative log-likelihood of its actions plus the weighted critic error."""
    values, log_prob, _ = model.policy.evaluate_actions(obs, actions)
    loss = -log_prob.mean() + model.vf_coef * torch.nn.functional.mse_loss(values.flatten(), returns)
    model.policy.optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.policy.parameters(), model.max_grad_norm)
    model.policy.optimizer.step()


def _likelihood(policy: Any, obs: torch.Tensor, actions: torch.Tensor) -> float:
    with torch.no_grad():
        return float(policy.evaluate_actions(obs, actions)[1].mean())
