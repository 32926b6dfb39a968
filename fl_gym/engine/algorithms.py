"""Local algorithms: how a cohort's stacked clients take their local steps.

Each algorithm is a small strategy object behind one interface, so the trainer's step loop is
written once. :meth:`LocalAlgorithm.start` builds a member's per-round state (its optimiser,
anchors, personal models) and receives the member's client ids and local step counts, so a
stateful algorithm (SCAFFOLD's control variates, FedDyn's dual variables, MOON's previous local
models) keeps per-client state across rounds inside the object; :meth:`LocalAlgorithm.step` runs
one local step of every member; :meth:`LocalAlgorithm.finish` closes the local training, and
:meth:`LocalAlgorithm.commit` is told which clients the server aggregated (state that only
aggregated clients may change is committed there). ``server_mix`` is the server's mixing rate
for the global model (1 = replace it by the average); ``upload_factor`` counts model-sized
uploads per aggregated client.

| algorithm | local step | reference |
|---|---|---|
| :class:`SGD` | one optimiser step on the loss | FedAvg (McMahan et al., 2017) |
| :class:`FedProx` | adds ``mu (w - w_global)`` to the gradient | Li et al., 2020 |
| :class:`PFedMe` | ``inner_steps`` personal steps, then ``w -= lr lam (w - theta)`` | Dinh et al., 2020 |
| :class:`Scaffold` | the gradient corrected by ``c - c_i`` (control variates) | Karimireddy et al., 2020 |
| :class:`Moon` | adds a model-contrastive term on the penultimate representation | Li et al., 2021 |
| :class:`FedDyn` | adds the gradient of ``-<h_i, w> + alpha/2 ||w - w_global||^2`` | Acar et al., 2021 |

An algorithm may also correct the server's average (:meth:`LocalAlgorithm.server_correction`,
FedDyn's ``- h / alpha``); the federation commits before it aggregates, so the correction sees
this round's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor

from fl_gym.engine.losses import log_softmax
from fl_gym.engine.optim import OptimizerConfig, StackOptimizer
from fl_gym.models.architecture import Stack, prefix
from fl_gym.validation import is_int_at_least, is_non_negative, is_positive, require, require_field_types

if TYPE_CHECKING:
    from fl_gym.config import FederationConfig


class Gradients(Protocol):
    """Forward and backward of every live member; the per-role losses.

    With ``descend``, each member's backward pass takes its optimiser's step itself
    (:meth:`StackOptimizer.fused_rate`), leaving no gradient in ``run.grad``.
    """

    def __call__(self, descend: bool = False) -> dict[str, Tensor]:
        """The per-role losses of the batch."""


@dataclass(frozen=True)
class PFedMeConfig:
    """pFedMe's local solver (Dinh et al., NeurIPS 2020; the defaults of the baselines it is run as).

    Attributes:
        lam: Moreau-envelope regularisation ``lambda``.
        inner_steps: personal-model steps per batch ``K``.
        personal_lr: learning rate of the personal model.
        beta: server mixing, ``w <- (1 - beta) w + beta * mean(w_i)``.
    """

    lam: float = 15.0
    inner_steps: int = 5
    personal_lr: float = 0.01
    beta: float = 1.0

    def __post_init__(self) -> None:
        require_field_types(self)  # a string or None reaches no comparison below
        require(is_positive(self.lam), "pfedme.lam", self.lam, "a float > 0")
        require(is_int_at_least(self.inner_steps, 1), "pfedme.inner_steps", self.inner_steps,
                "an integer >= 1")
        require(is_positive(self.personal_lr), "pfedme.personal_lr", self.personal_lr, "a float > 0")
        require(0 < self.beta <= 2, "pfedme.beta", self.beta, "a float in (0, 2]")


class MemberRun:
    """One member's training state for a round: what trains, its optimiser, a gradient buffer.

    Attributes:
        stack: the member's live parameters (what is uploaded).
        trained: the stack the loss gradients are taken on (``stack`` itself, or pFedMe's ``theta``).
        opt: the optimiser stepping ``trained``.
        grad: flat gradient buffer in ``trained``'s layout.
        active: member clients still stepping.
        live_params: the active clients' views of ``trained``'s blocks.
        live_grads: their views of the gradient buffer's blocks.
    """

    def __init__(self, stack: Stack, trained: Stack, opt: StackOptimizer) -> None:
        self.stack, self.trained, self.opt = stack, trained, opt
        self.grad = torch.zeros_like(trained.flat)
        self.grad_blocks = trained.views(self.grad)
        self.extra: list[StackOptimizer] = []
        self.state: dict[str, Any] = {}  # an algorithm's per-round tensors (or stacks: MOON's models)
        self._slice(stack.k)

    def _slice(self, active: int) -> None:
        """Slice the live views once per change of ``active``, not at every local step."""
        self.active = active
        self.live_params = prefix(self.trained.blocks, active)
        self.live_grads = prefix(self.grad_blocks, active)

    def set_active(self, active: int) -> None:
        """Step only the first ``active`` member clients from now on."""
        self._slice(active)
        for opt in (self.opt, *self.extra):
            opt.set_active(active)

    def restart(self) -> None:
        """Back to the round's first step: every client active, fresh optimisers (rows: the caller's)."""
        self._slice(self.stack.k)
        for opt in (self.opt, *self.extra):
            opt.restart()


class LocalAlgorithm:
    """Plain local steps; subclasses change how a member trains (see the module docstring)."""

    name = "sgd"
    server_mix = 1.0
    upload_factor = 1
    uses_representation = False
    stateless = False  # no client or server state between rounds: its clients can train anywhere, merged
    # training leaves personal models (MemberRun.trained, not the stack) that local evaluation scores
    personal_models = False
    # the FederationConfig fields it reads (it validates them when built); any other algorithm's is refused
    settings_fields: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, cfg: FederationConfig) -> LocalAlgorithm:
        """The algorithm with its settings from a federation's config."""
        return cls()

    def start(self, stack: Stack, clients: np.ndarray, lr: Tensor, steps: np.ndarray,
              optimizer: OptimizerConfig
              ) -> MemberRun:
        """A member's state for this round; ``clients`` and ``steps`` (local steps) are per stack row."""
        return MemberRun(stack, stack, StackOptimizer(stack, optimizer, lr))

    def step(self, runs: list[MemberRun], gradients: Gradients) -> dict[str, Tensor]:
        """One local step of every member; returns the per-role losses of the batch.

        Plain SGD steps run inside the backward passes (:meth:`StackOptimizer.fused_rate`).
        """
        if all(run.opt.fused_rate() is not None and not run.extra for run in runs):
            return gradients(descend=True)
        losses = gradients()
        for run in runs:
            if run.active:
                run.opt.step(run.grad)
        return losses

    def representation_gradient(self, run: MemberRun, x: Tensor, z: Tensor, w: Tensor) -> Tensor:
        """Gradient ``(k_active, B, F)`` of an extra loss on the penultimate representation ``z``.

        Called every step when :attr:`uses_representation`; ``x`` is the batch in the
        architecture's layout, ``w`` the ``(k_active, B)`` sample weights (``1/b``, 0 on padding).
        """
        raise NotImplementedError

    def finish(self, runs: list[MemberRun], clients: list[np.ndarray]) -> None:
        """Close the local training (stateful algorithms compute their clients' new state here)."""

    def commit(self, aggregated: np.ndarray) -> None:
        """The server aggregates ``aggregated`` (client ids) this round (called before it averages)."""

    def server_correction(self, arch_name: str, average: Tensor) -> Tensor:
        """The global model from the clients' weighted ``average`` (default: the average itself)."""
        return average

    def reset(self) -> None:
        """Forget per-client state (a new episode)."""


class SGD(LocalAlgorithm):
    """FedAvg's local solver: the optimiser alone (SGD, momentum or Adam per ``OptimizerConfig``)."""

    stateless = True


@dataclass(frozen=True)
class FedProx(LocalAlgorithm):
    """FedProx: the proximal term ``mu/2 ||w - w_global||^2`` pulls each client toward the round's start."""

    mu: float = 0.01
    name = "fedprox"
    stateless = True
    settings_fields = ("prox_mu",)

    def __post_init__(self) -> None:
        require(is_non_negative(self.mu), "prox_mu", self.mu, "a float >= 0")

    @classmethod
    def from_config(cls, cfg: FederationConfig) -> FedProx:
        """FedProx with ``cfg.prox_mu``."""
        return cls(cfg.prox_mu)

    def start(self, stack: Stack, clients: np.ndarray, lr: Tensor, steps: np.ndarray,
              optimizer: OptimizerConfig
              ) -> MemberRun:
        """Plain steps with the proximal pull toward the stack's start (the global model)."""
        return MemberRun(stack, stack, StackOptimizer(stack, optimizer, lr, self.mu))


@dataclass(frozen=True)
class PFedMe(LocalAlgorithm):
    """pFedMe: a personal model ``theta`` per client, the local model pulled toward it.

    Per batch, ``inner_steps`` updates of ``theta`` toward ``argmin f(theta) + lam/2 ||theta - w||^2``,
    then ``w <- w - lr * lam * (w - theta)``.

    The trained personal models are what local evaluation scores (:attr:`MemberRun.trained`).
    """

    config: PFedMeConfig = PFedMeConfig()

    @classmethod
    def from_config(cls, cfg: FederationConfig) -> PFedMe:
        """PFedMe with ``cfg.pfedme``."""
        return cls(cfg.pfedme)
    name = "pfedme"
    settings_fields = ("pfedme",)
    personal_models = True

    @property
    def server_mix(self) -> float:  # type: ignore[override]
        """``beta``."""
        return self.config.beta

    def start(self, stack: Stack, clients: np.ndarray, lr: Tensor, steps: np.ndarray,
              optimizer: OptimizerConfig
              ) -> MemberRun:
        """``theta`` (plain SGD at ``personal_lr`` with the pull to ``w``) and ``w``'s own SGD step."""
        cfg = self.config
        theta = Stack(stack.arch, stack.flat.clone())
        opt = StackOptimizer(theta, OptimizerConfig(), torch.full_like(lr, cfg.personal_lr), cfg.lam,
                             anchor=stack.flat)
        run = MemberRun(stack, theta, opt)
        run.extra = [StackOptimizer(stack, OptimizerConfig(), lr)]  # w <- w - lr * lam * (w - theta)
        return run

    def step(self, runs: list[MemberRun], gradients: Gradients) -> dict[str, Tensor]:
        """``inner_steps`` personal steps, then one step of ``w`` toward ``theta``."""
        for _ in range(self.config.inner_steps):
            losses = gradients()
            for run in runs:
                if run.active:
                    run.opt.step(run.grad)
        for run in runs:  # an SGD step of w on the gradient lam * (w - theta)
            if run.active:
                torch.sub(run.stack.flat, run.trained.flat, out=run.grad).mul_(self.config.lam)
                run.extra[0].step(run.grad)
        return losses


class Corrected(LocalAlgorithm):
    """Base of algorithms whose local step adds a fixed per-client vector to the gradient.

    ``start`` stores it as ``run.state["correction"]`` (the stack's layout) with the start rows;
    per-client state lives in ``(N, P)`` tables per architecture, created on first use.
    """

    def __init__(self, num_clients: int) -> None:
        self.num_clients = num_clients
        self.reset()

    @classmethod
    def from_config(cls, cfg: FederationConfig) -> Corrected:
        """The algorithm for ``cfg.num_clients`` clients, with its own settings (FedDyn's ``alpha``)."""
        return cls(cfg.num_clients, *cls.settings(cfg))

    @staticmethod
    def settings(cfg: FederationConfig) -> tuple:
        """The config's settings of this algorithm, after ``num_clients`` (none by default)."""
        return ()

    def reset(self) -> None:
        """Zero state (created on first use per architecture)."""
        self.server: dict[str, Tensor] = {}
        self.clients: dict[str, Tensor] = {}
        self._pending: list[tuple[str, np.ndarray, Tensor]] = []

    def _tables(self, stack: Stack) -> tuple[Tensor, Tensor]:
        """``(P,)`` server and ``(N, P)`` client state of the stack's architecture."""
        key = stack.arch.name
        if key not in self.server:
            p = stack.arch.num_params
            self.server[key] = stack.flat.new_zeros(p)
            self.clients[key] = stack.flat.new_zeros(self.num_clients, p)
        return self.server[key], self.clients[key]

    def _run(self, stack: Stack, clients: np.ndarray, opt: StackOptimizer, correction: Tensor) -> MemberRun:
        run = MemberRun(stack, stack, opt)
        run.state = {"correction": Stack.from_rows(stack.arch, correction).flat, "start": stack.rows(),
                     "ids": torch.as_tensor(clients, device=stack.flat.device)}
        return run

    def step(self, runs: list[MemberRun], gradients: Gradients) -> dict[str, Tensor]:
        """One corrected step of every member."""
        losses = gradients()
        for run in runs:
            if run.active:
                run.grad.add_(run.state["correction"])  # rows past ``active`` are not stepped
                run.opt.step(run.grad)
        return losses

    def _aggregated(self, aggregated: np.ndarray) -> list[tuple[str, Tensor, Tensor]]:
        """``(architecture, client rows, pending change rows)`` of the aggregated clients; clears pending."""
        out = []
        for key, ids, delta in self._pending:
            keep = np.isin(ids, aggregated)
            if keep.any():
                out.append((key, torch.as_tensor(ids[keep], device=delta.device),
                            delta[torch.as_tensor(keep, device=delta.device)]))
        self._pending = []
        return out


class Scaffold(Corrected):
    """SCAFFOLD (Karimireddy et al., 2020), option II: control variates correct client drift.

    Every local step descends ``g - c_i + c``. After ``K_i`` steps at rate ``lr_i`` from the global
    ``w``, a client's new variate is ``c_i+ = c_i - c + (w - w_i) / (K_i lr_i)``; only the clients
    the server aggregates commit it, and the server moves ``c += sum_aggregated (c_i+ - c_i) / N``,
    which keeps ``c`` the mean of all ``N`` clients' variates (the paper's Algorithm 1, lines 12-17,
    with ``|S| / N`` for a partial cohort). Each aggregated client uploads its model and its
    variate change (``upload_factor = 2``). Variates live per architecture (``(P,)`` server,
    ``(N, P)`` clients), zero at the start of an episode.

    Option II's variate assumes plain SGD steps, so the federation refuses SCAFFOLD with local
    momentum or Adam. The models are averaged with ``FederationConfig.aggregation`` (data-size
    weights by default); the paper averages uniformly: ``aggregation="uniform"``.

    Args:
        num_clients: ``N``.
    """

    name = "scaffold"
    upload_factor = 2

    def start(self, stack: Stack, clients: np.ndarray, lr: Tensor, steps: np.ndarray,
              optimizer: OptimizerConfig
              ) -> MemberRun:
        """Plain steps corrected by ``c - c_i``; the run keeps ``K_i lr_i`` for the new variate."""
        c, c_i = self._tables(stack)
        run = self._run(stack, clients, StackOptimizer(stack, optimizer, lr),
                        c - c_i[torch.as_tensor(clients, device=stack.flat.device)])
        run.state["scale"] = (torch.as_tensor(steps, dtype=lr.dtype, device=lr.device) * lr)[:, None]
        return run

    def finish(self, runs: list[MemberRun], clients: list[np.ndarray]) -> None:
        """Each client's variate change, held until the server says who was aggregated."""
        self._pending = []
        for run, ids in zip(runs, clients, strict=True):
            c, _ = self._tables(run.stack)
            st = run.state
            delta = -c + (st["start"] - run.stack.rows()) / st["scale"]  # c_i+ - c_i
            self._pending.append((run.stack.arch.name, ids, delta))

    def commit(self, aggregated: np.ndarray) -> None:
        """Aggregated clients take their new variate; the server's moves by their mean change over N."""
        for key, rows, delta in self._aggregated(aggregated):
            self.clients[key][rows] += delta
            self.server[key] += delta.sum(0) / self.num_clients


class FedDyn(Corrected):
    """FedDyn (Acar et al., ICLR 2021), as Zheng et al. (IEEE TMC 2024) state it.

    Client ``i`` minimises ``F_i(w) - <h_i, w> + alpha/2 ||w - w(t)||^2``: each local step adds
    ``-h_i + alpha (w - w(t))`` to the gradient. An aggregated client then moves its dual
    ``h_i <- h_i - alpha (w_i - w(t))``; the server's ``h <- h - alpha/N sum_aggregated (w_i - w(t))``
    and the next global model is the clients' average minus ``h / alpha``. Duals live per
    architecture, zero at the start of an episode. The average uses ``FederationConfig.aggregation``
    (data-size weights by default); the paper's is uniform: ``aggregation="uniform"``.

    Args:
        num_clients: ``N``.
        alpha: the dynamic regulariser's weight.
    """

    name = "feddyn"
    settings_fields = ("feddyn_alpha",)

    @staticmethod
    def settings(cfg: FederationConfig) -> tuple:
        """``(feddyn_alpha,)``."""
        return (cfg.feddyn_alpha,)

    def __init__(self, num_clients: int, alpha: float = 0.001) -> None:
        require(is_positive(alpha), "feddyn_alpha", alpha, "a float > 0")
        self.alpha = alpha
        super().__init__(num_clients)

    def start(self, stack: Stack, clients: np.ndarray, lr: Tensor, steps: np.ndarray,
              optimizer: OptimizerConfig
              ) -> MemberRun:
        """Steps with the proximal pull ``alpha (w - w(t))`` and the linear term ``-h_i``."""
        _, h_i = self._tables(stack)
        return self._run(stack, clients, StackOptimizer(stack, optimizer, lr, self.alpha),
                         -h_i[torch.as_tensor(clients, device=stack.flat.device)])

    def finish(self, runs: list[MemberRun], clients: list[np.ndarray]) -> None:
        """Each client's drift ``w_i - w(t)``, held until the server says who was aggregated."""
        self._pending = [(run.stack.arch.name, ids, run.stack.rows() - run.state["start"])
                         for run, ids in zip(runs, clients, strict=True)]

    def commit(self, aggregated: np.ndarray) -> None:
        """Aggregated clients' duals and the server's ``h`` move by their drifts."""
        for key, rows, drift in self._aggregated(aggregated):
            self.clients[key][rows] -= self.alpha * drift
            self.server[key] -= self.alpha / self.num_clients * drift.sum(0)

    def server_correction(self, arch_name: str, average: Tensor) -> Tensor:
        """``average - h / alpha``."""
        h = self.server.get(arch_name)
        return average if h is None else average - h / self.alpha


class Moon(LocalAlgorithm):
    """MOON (Li, He and Song, 2021): model-contrastive learning on the penultimate representation.

    Each local step adds ``mu * l_con`` to the cross-entropy, with
    ``l_con = -log(e^{cos(z, z_glob)/tau} / (e^{cos(z, z_glob)/tau} + e^{cos(z, z_prev)/tau}))``:
    ``z`` is the training model's representation of the sample, ``z_glob`` the round's global
    model's and ``z_prev`` the client's previous local model's (the global model for a client that
    has not trained yet). Every client that trains keeps its model as the next round's previous
    one, aggregated or not (FedEntropy's "X + FedEntropy" runs the optimiser as usual). The
    reported loss is the cross-entropy.

    Args:
        num_clients: ``N``.
        mu: weight of the contrastive term.
        tau: its temperature.
    """

    name = "moon"
    settings_fields = ("moon_mu", "moon_tau")
    uses_representation = True

    @classmethod
    def from_config(cls, cfg: FederationConfig) -> Moon:
        """MOON for ``cfg.num_clients`` clients with ``cfg.moon_mu`` and ``cfg.moon_tau``."""
        return cls(cfg.num_clients, cfg.moon_mu, cfg.moon_tau)

    def __init__(self, num_clients: int, mu: float = 0.1, tau: float = 0.5) -> None:
        require(is_non_negative(mu), "moon_mu", mu, "a float >= 0")
        require(is_positive(tau), "moon_tau", tau, "a float > 0")
        self.num_clients, self.mu, self.tau = num_clients, mu, tau
        self.reset()

    def reset(self) -> None:
        """Forget the previous local models."""
        self.previous: dict[str, Tensor] = {}
        self.seen: dict[str, np.ndarray] = {}

    def start(self, stack: Stack, clients: np.ndarray, lr: Tensor, steps: np.ndarray,
              optimizer: OptimizerConfig
              ) -> MemberRun:
        """Plain steps; the run keeps the round's global model and the clients' previous models."""
        key, arch = stack.arch.name, stack.arch
        start = stack.rows()
        if key not in self.previous:
            self.previous[key] = start.new_zeros(self.num_clients, arch.num_params)
            self.seen[key] = np.zeros(self.num_clients, bool)
        seen = torch.as_tensor(self.seen[key][clients], device=start.device)[:, None]
        prev = torch.where(seen, self.previous[key][torch.as_tensor(clients, device=start.device)], start)
        run = MemberRun(stack, stack, StackOptimizer(stack, optimizer, lr))
        run.state = {"global": Stack.from_rows(arch, start), "previous": Stack.from_rows(arch, prev)}
        return run

    def representation_gradient(self, run: MemberRun, x: Tensor, z: Tensor, w: Tensor) -> Tensor:
        """``mu * d l_con / dz``, each client's term its own batch mean (the weights ``w``)."""
        arch, a = run.stack.arch, run.active
        with torch.no_grad():
            z_glob = arch.representation(arch.forward(prefix(run.state["global"].blocks, a), x, False)[1])
            z_prev = arch.representation(arch.forward(prefix(run.state["previous"].blocks, a), x, False)[1])
        z = z.detach().requires_grad_(True)
        with torch.enable_grad():
            sims = torch.stack([torch.cosine_similarity(z, z_glob, dim=-1),
                                torch.cosine_similarity(z, z_prev, dim=-1)], dim=-1) / self.tau
            loss = -(log_softmax(sims)[..., 0] * w).sum()
            (grad,) = torch.autograd.grad(self.mu * loss, z)
        return grad

    def finish(self, runs: list[MemberRun], clients: list[np.ndarray]) -> None:
        """Every trained client's model becomes its previous model."""
        for run, ids in zip(runs, clients, strict=True):
            key = run.stack.arch.name
            self.previous[key][torch.as_tensor(ids, device=run.stack.flat.device)] = run.stack.rows()
            self.seen[key][ids] = True


ALGORITHMS: dict[str, type[LocalAlgorithm]] = {"fedavg": SGD, "fedprox": FedProx, "pfedme": PFedMe,
                                               "scaffold": Scaffold, "moon": Moon, "feddyn": FedDyn}
"""Local algorithms by ``FederationConfig.algorithm`` name."""
