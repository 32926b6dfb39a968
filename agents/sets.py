"""A policy over the set of clients: one network for any client count, blind to the clients' order.

fl-gym observations list one row of features per client (:class:`~fl_gym.envs.base.ClientRows`)
and most actions are one decision per client, so a flat MLP ties an agent to one client count
and to the order in which clients happen to be listed. :class:`SetPolicy` (Deep Sets, Zaheer et
al., NeurIPS 2017) encodes every row with the same network, pools the encodings with symmetric
functions (mean and max), and gives each client its action from its own encoding and the pooled
context; the value reads the pool. ``pool="attention"`` first lets each client attend to the
others through one Transformer encoder layer without positional encoding (as in the Set
Transformer, Lee et al., ICML 2019). No weight's shape depends on the number of rows, and
permuting the clients permutes the action the same way (equivariance; the value is invariant).

So an agent trained with ``k`` clients acts on any other ``k``: ``model.predict(obs)`` takes an
observation of any row count of the same layout. Use it from ``ppo.yml`` by name
(``policy: SetPolicy``, see ``docs/generalisation.md``); :func:`~fl_gym.agents.ppo.build_agent`
reads the env's ``client_rows``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    MultiCategoricalDistribution,
)
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

from fl_gym.envs.base import ClientRows
from fl_gym.validation import is_int_at_least, require, require_choice

POOLS = ("mean", "attention")
TRANSFORMS = (None, "neglog")


class SetNetwork(nn.Module):
    """Row encoder, pooling, per-client actor and pooled critic (module docstring).

    Args:
        rows: the observation's row layout.
        action_width: the actor's outputs per client (per round, without per-client actions).
        hidden: width of every layer.
        pool: ``mean`` (Deep Sets) or ``attention`` (one self-attention layer, then Deep Sets).
        transform: ``neglog`` feeds ``-log(obs)`` (as :class:`~fl_gym.agents.features.NegLogFeatures`).
    """

    def __init__(self, rows: ClientRows, action_width: int, hidden: int, pool: str,
                 transform: str | None) -> None:
        super().__init__()
        self.rows, self.transform = rows, transform
        self.embed = nn.Sequential(nn.Linear(rows.width + rows.globals, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())
        self.attend = nn.TransformerEncoderLayer(hidden, nhead=4, dim_feedforward=2 * hidden, dropout=0.0,
                                                 batch_first=True) if pool == "attention" else None
        actor_in = 3 * hidden if rows.per_client_action else 2 * hidden  # own encoding + the pooled context
        self.actor = nn.Sequential(nn.Linear(actor_in, hidden), nn.Tanh(), nn.Linear(hidden, action_width))
        self.critic = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh())
        self.latent_dim_pi, self.latent_dim_vf = action_width, hidden

    def table(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(batch, rows, width)`` client rows and ``(batch, globals)`` round features."""
        if self.transform == "neglog":
            obs = -torch.log(obs.clamp_min(1e-6))
        width, g = self.rows.width, self.rows.globals
        flat, glob = obs[:, : obs.shape[1] - g], obs[:, obs.shape[1] - g:]
        n = flat.shape[1] // width
        table = (flat.reshape(-1, width, n).transpose(1, 2) if self.rows.feature_major
                 else flat.reshape(-1, n, width))
        return table, glob

    def encode(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each client's encoding ``(batch, rows, hidden)`` and the pooled context ``(batch, 2 hidden)``."""
        table, glob = self.table(obs)
        h = self.embed(torch.cat([table, glob[:, None, :].expand(-1, table.shape[1], -1)], dim=2))
        if self.attend is not None:
            h = self.attend(h)
        return h, torch.cat([h.mean(dim=1), h.amax(dim=1)], dim=1)

    def _act(self, h: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        if not self.rows.per_client_action:
            return self.actor(context)
        return self.actor(torch.cat([h, context[:, None, :].expand(-1, h.shape[1], -1)], dim=2))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's outputs (``(batch, rows, action_width)`` per client) and the critic's latent."""
        h, context = self.encode(obs)
        return self._act(h, context), self.critic(context)

    def forward_actor(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's outputs alone."""
        return self._act(*self.encode(obs))

    def forward_critic(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's latent alone."""
        return self.critic(self.encode(obs)[1])


class SetPolicy(ActorCriticPolicy):
    """SB3 actor-critic policy over client rows (module docstring); for ``PPO``.

    Box actions get a Gaussian whose log-std is shared by every client (one per value of a
    client's action); ``MultiDiscrete`` and ``MultiBinary`` actions get per-client logits.

    Args:
        client_rows: the env's :attr:`~fl_gym.envs.base.FLEnv.client_rows` (``build_agent``
            passes it).
        hidden: width of every layer.
        pool: ``mean`` or ``attention``.
        transform: None or ``neglog`` (``-log(obs)``, for ratio features in ``(0, 1]``).
        action_bias: the actor output's initial bias (a logit, or a Gaussian's mean), so that PPO
            starts at a sensible action: ``2.0`` on keep-bits keeps each client with probability
            0.88 at first (near FedAvg's "keep all") instead of a coin flip.
        kwargs: :class:`~stable_baselines3.common.policies.ActorCriticPolicy`'s (``log_std_init``,
            ``ortho_init``, ``optimizer_kwargs``, ...); ``net_arch`` and ``use_sde`` are not used.
    """

    def __init__(self, observation_space: spaces.Box, action_space: spaces.Space, lr_schedule: Any,
                 client_rows: ClientRows | None = None, hidden: int = 64, pool: str = "mean",
                 transform: str | None = None, action_bias: float = 0.0, **kwargs: Any) -> None:
        require(isinstance(client_rows, ClientRows), "client_rows", client_rows,
                "the env's ClientRows (an env whose observation lists per-client rows)")
        require(is_int_at_least(hidden, 4) and hidden % 4 == 0, "hidden", hidden, "a multiple of 4 >= 4")
        require_choice("pool", pool, POOLS)
        require(transform in TRANSFORMS, "transform", transform, "None or 'neglog'")
        require(not kwargs.get("use_sde", False), "use_sde", True, "False (SetPolicy has no gSDE)")
        require(isinstance(action_bias, (int, float)) and np.isfinite(action_bias), "action_bias",
                action_bias, "a finite float")
        self.client_rows, self.hidden, self.pool, self.transform = client_rows, hidden, pool, transform
        self.action_bias = float(action_bias)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def rows_in(self, obs_dim: int) -> int:
        """Client rows in an observation of length ``obs_dim``."""
        rows = self.client_rows
        n, rest = divmod(obs_dim - rows.globals, rows.width)
        require(rest == 0 and n >= 1, "observation", f"length {obs_dim}",
                f"{rows.globals} + a multiple of {rows.width} (the env's client rows)")
        return n

    def fits(self, rows: ClientRows | None, observation_space: spaces.Space,
             action_space: spaces.Space) -> bool:
        """Whether this policy acts on an env of ``rows`` and these spaces.

        The same row layout, and per row the action of its own env (of a ``MultiDiscrete``, at
        least as many choices: it picks among the first); otherwise ``predict`` fails deep in SB3
        or in the env.
        """
        if rows != self.client_rows or not isinstance(observation_space, spaces.Box) \
                or len(observation_space.shape) != 1:
            return False
        n, rest = divmod(observation_space.shape[0] - rows.globals, rows.width)
        return rest == 0 and n >= 1 and self._acts_in(n, action_space)

    def _acts_in(self, n: int, space: spaces.Space) -> bool:
        """Whether this policy's actions for ``n`` client rows lie in ``space``."""
        own = self.action_space
        if not self.client_rows.per_client_action:
            return space == own
        if isinstance(own, spaces.MultiBinary):
            return space == spaces.MultiBinary(n)
        width = self._action_width()
        if isinstance(own, spaces.Box):
            return space == spaces.Box(own.low.min(), own.high.max(), (n * width,), own.dtype)
        return (isinstance(space, spaces.MultiDiscrete) and space.shape == (n,)
                and bool((space.nvec >= width).all()))

    def _action_width(self) -> int:
        space, per_client = self.action_space, self.client_rows.per_client_action
        if isinstance(space, spaces.Box):
            n = self.rows_in(int(self.observation_space.shape[0]))
            size = int(np.prod(space.shape))
            require(not per_client or size % n == 0, "action_space", space,
                    f"a multiple of the {n} client rows")
            return size // n if per_client else size
        if isinstance(space, spaces.MultiDiscrete) and per_client:
            require(len(set(space.nvec.tolist())) == 1, "action_space", space,
                    "the same choices for every client")
            return int(space.nvec[0])
        if isinstance(space, spaces.MultiBinary) and per_client:
            return 1
        require(isinstance(space, spaces.Discrete) and not per_client, "action_space", space,
                "Box, MultiDiscrete or MultiBinary per client, or Discrete per round")
        return int(space.n)

    def _build(self, lr_schedule: Any) -> None:
        width = self._action_width()
        self.mlp_extractor = SetNetwork(self.client_rows, width, self.hidden, self.pool, self.transform)
        self.action_net = nn.Identity()  # the set network's actor already outputs per client
        self.value_net = nn.Linear(self.hidden, 1)
        if isinstance(self.action_space, spaces.Box):
            self.log_std = nn.Parameter(torch.full((width,), float(self.log_std_init)))
        if self.ortho_init:  # SB3's gains: sqrt(2) hidden, 0.01 policy output, 1 value
            self.mlp_extractor.apply(lambda m: self.init_weights(m, gain=float(np.sqrt(2))))
            self.init_weights(self.mlp_extractor.actor[-1], gain=0.01)
            self.value_net.apply(lambda m: self.init_weights(m, gain=1.0))
        nn.init.constant_(self.mlp_extractor.actor[-1].bias, self.action_bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Distribution:
        space, out = self.action_space, latent_pi
        if not self.client_rows.per_client_action:
            if isinstance(space, spaces.Box):
                return DiagGaussianDistribution(out.shape[1]).proba_distribution(out, self.log_std)
            return CategoricalDistribution(out.shape[1]).proba_distribution(out)
        batch, n, width = out.shape
        if isinstance(space, spaces.Box):  # value by value: every client's first value, then the second ...
            mean = out.transpose(1, 2).reshape(batch, n * width)
            return DiagGaussianDistribution(n * width).proba_distribution(mean,
                                                                          self.log_std.repeat_interleave(n))
        if isinstance(space, spaces.MultiBinary):
            return BernoulliDistribution(n).proba_distribution(out.reshape(batch, n))
        return MultiCategoricalDistribution([width] * n).proba_distribution(out.reshape(batch, n * width))

    def predict(self, observation: np.ndarray, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, Any]:
        """SB3's ``predict`` for observations of any client count (same row layout)."""
        obs = np.asarray(observation, np.float32)
        single = obs.ndim == 1
        batch = obs.reshape(1, -1) if single else obs.reshape(len(obs), -1)
        self.rows_in(batch.shape[1])
        self.set_training_mode(False)
        with torch.no_grad():
            actions = self._predict(torch.as_tensor(batch, device=self.device), deterministic=deterministic)
        actions = actions.cpu().numpy()
        if isinstance(self.action_space, spaces.Box):
            actions = np.clip(actions, self.action_space.low.min(), self.action_space.high.max())
        elif isinstance(self.action_space, (spaces.MultiDiscrete, spaces.MultiBinary)):
            actions = actions.astype(self.action_space.dtype)
        return (actions[0] if single else actions), state

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(client_rows=self.client_rows, hidden=self.hidden, pool=self.pool,
                    transform=self.transform, action_bias=self.action_bias)
        return data


def client_rows_of(env: Any) -> ClientRows:
    """The row layout of a (vector) env's fl-gym envs.

    Raises:
        ValueError: the env's observation is not per-client rows.
    """
    rows = env.get_attr("client_rows")[0] if hasattr(env, "get_attr") else env.get_wrapper_attr("client_rows")
    require(rows is not None, "policy", "SetPolicy",
            "an env whose observation lists per-client rows (client_rows)")
    return rows
