"""Flower: a strategy that plays an fl-gym policy on a real Flower federation, and its ClientApp.

Optional: ``pip install "fl-gym[flower]"`` (Flower 1.21 or later, its Message API).

The server of the Flower run is an fl-gym env of the same id, keyword arguments and seeds, whose
federation's clients are remote (:class:`~fl_gym.federation.RemoteClients`). Each round the env
opens the round (sampling, device load: the server's draws), builds its observation from what
the server has, asks the policy and plays the round; local training (and the probe gradients a
rate decision reads) runs on Flower ClientApps, sent as Messages through Flower's ``Grid``. The
clients return their trained models and what they measure on their own data (losses, local
accuracy, soft labels); the server computes the update angles from the returned models,
aggregates, advances the virtual clock and evaluates on its test split, as the env does. So the
observation is built by the env's own code from values of the same kind, and the policy's action
is applied by the env's own code: which clients train at which model size for how many epochs
(HAPFL), which replies are aggregated (FedEntropy, DDFL), each client's learning rate in its
train config (FedEnt), the aggregation weights (FedAdp). One strategy class serves every family;
the env id picks the decision.

Clients: a ClientApp holds the data of client ``partition-id`` (``node_config``, as Flower's
simulation sets it; a deployed SuperNode passes ``--node-config "partition-id=I"``). Before
round 1 the strategy waits until ``num_clients`` nodes have registered and asks each for its
partition id. The ClientApp rebuilds the scenario from the ``EnvSpec`` the server sends (env id,
keyword arguments, scenario seed) and trains its own partition with the fl-gym engine.

Differences from the fl-gym env: each client draws its own minibatch order (from the round's key
and its id) where the env draws the whole cohort's at once, so a Flower run equals the env's
episode with full-batch local training and differs by minibatch order otherwise. Refused with a
``ValueError``: a federation that does not train (timing-only backends), local algorithms with
state across rounds (SCAFFOLD, FedDyn, MOON, pFedMe), and scenarios drawn per episode
(``randomize_scenario``, ``redraw_partition``: the clients hold the ``scenario_seed``'s data).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fl_gym.config import STATELESS
from fl_gym.engine.probe import Probe
from fl_gym.envs.base import FLEnv, Predictor
from fl_gym.envs.registry import family_of
from fl_gym.federation import Federation
from fl_gym.models.architecture import Stack
from fl_gym.records import Cohort, LocalStats, RoundPlan, RoundReport
from fl_gym.validation import (
    MissingExtraError,
    UserError,
    is_int_at_least,
    is_positive,
    one_line,
    require,
    require_mapping,
    require_seed,
    require_types,
)

INSTALL = 'pip install "fl-gym[flower]"'
try:
    from flwr.app import (
        Array,
        ArrayRecord,
        ConfigRecord,
        Context,
        Message,
        MessageType,
        MetricRecord,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import Result, Strategy
except ImportError as exc:  # pragma: no cover - the extra is installed where this is tested
    raise MissingExtraError(f"Flower is not installed; {INSTALL}") from exc

__all__ = ["Context", "EnvSpec", "Grid", "PolicyStrategy", "ServerApp", "client_app", "client_seed", "play"]
log = logging.getLogger("flwr")  # Flower's logger: these lines appear in its run logs
STATS = ("loss", "last_epoch_loss", "local_accuracy")
# what the strategy itself writes into every train message (a train_config entry may not replace it)
TRAIN_KEYS = ("spec", "server-round", "client", "model", "lr", "epochs", "steps", "seed")


@dataclass(frozen=True)
class EnvSpec:
    """The env both sides build: id, keyword arguments (JSON values) and scenario seed."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    scenario_seed: int = 0

    def __post_init__(self) -> None:
        family_of(self.env_id)  # an fl-gym id, named among them
        require_mapping("env_kwargs", self.env_kwargs, optional=False)
        try:
            json.dumps(self.env_kwargs)
        except (TypeError, ValueError) as err:
            raise UserError(f"env_kwargs={self.env_kwargs!r} is out of range; allowed: JSON values (they are "
                            f"sent to the clients: {err})") from err
        require_seed("scenario_seed", self.scenario_seed)

    def to_json(self) -> str:
        """This ``EnvSpec`` as JSON, as sent to the clients."""
        return json.dumps({"env_id": self.env_id, "env_kwargs": self.env_kwargs,
                           "scenario_seed": self.scenario_seed},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EnvSpec:
        """The ``EnvSpec`` a server sent (:meth:`to_json`)."""
        return cls(**json.loads(text))

    def make(self) -> FLEnv:
        """The env (unwrapped), checked for a remote federation."""
        env = gym.make(self.env_id, scenario_seed=self.scenario_seed, **self.env_kwargs).unwrapped
        cfg = env.federation.config
        training = ", ".join(f"{k}={v!r}" for k, v in env.config.training_kwargs.items())
        require(cfg.train, "env_kwargs", self.env_kwargs,
                f"arguments under which {self.env_id} trains models ({training}; without them this "
                "federation only runs its clock)")
        require(cfg.algorithm in STATELESS, "algorithm", cfg.algorithm,
                f"one of {', '.join(STATELESS)} (no client state across rounds)")
        for name in ("randomize_scenario", "redraw_partition"):
            require(not getattr(env.config.scenario, name), name, True,
                    "False (the clients hold the scenario_seed's partition; an episode may not draw another)")
        return env


def client_seed(key: int, client: int) -> int:
    """Client ``client``'s batch stream in the round with key ``key`` (an int64 for Flower's records)."""
    return int(np.random.SeedSequence([key, client]).generate_state(1, np.uint64)[0] >> np.uint64(1))


# ---- the client -------------------------------------------------------------------------------------

client_app = ClientApp()
_federations: dict[str, Federation] = {}


def _federation(config: ConfigRecord) -> Federation:
    """The scenario the server's ``EnvSpec`` describes, built once per process."""
    spec = str(config["spec"])
    if spec not in _federations:
        _federations[spec] = EnvSpec.from_json(spec).make().federation
    return _federations[spec]


def _client_id(context: Context, config: ConfigRecord | None = None) -> int:
    """This node's client id (its ``partition-id``), checked against the one the server addressed."""
    pid = context.node_config.get("partition-id")
    require(pid is not None, "node_config", dict(context.node_config),
            "a partition-id (start the SuperNode with --node-config 'partition-id=I')")
    if config is not None and "client" in config:
        require(int(config["client"]) == int(pid), "client", int(config["client"]),
                f"this node's partition-id {pid}")
    return int(pid)


def _companion_columns(stats: LocalStats) -> dict[str, np.ndarray]:
    """The companion's per-client columns a client reports, by message key (none without a companion)."""
    lite = stats.companion
    return {} if lite is None else {"companion_loss": lite.loss, "companion_accuracy": lite.accuracy}


def _tensor(array: Array, fed: Federation) -> torch.Tensor:
    return torch.as_tensor(array.numpy(), device=fed.device)


@client_app.query("hello")
def hello(message: Message, context: Context) -> Message:
    """Tell the server which client this node is."""
    return Message(RecordDict({"metrics": MetricRecord({"client": _client_id(context)})}), reply_to=message)


@client_app.train()
def train(message: Message, context: Context) -> Message:
    """Train this client from the global model(s) it was sent, under the server's instructions."""
    config, arrays = message.content["config"], message.content["arrays"]
    fed, i = _federation(config), _client_id(context, config)
    model = int(config["model"])
    fed.global_models[model] = _tensor(arrays["model"], fed)
    if "lite" in arrays:
        fed.companion_model = _tensor(arrays["lite"], fed)
    selected = np.arange(fed.num_clients) == i
    plan = RoundPlan.make(fed.num_clients, lr=float(config["lr"]), selected=selected, model=model,
                          epochs=float(config["epochs"]))
    stats, cohort = fed.train_clients(plan, np.where(selected, int(config["steps"]), 0), int(config["seed"]))
    trained = ArrayRecord({member.role: Array(member.stack.rows()[0].cpu().numpy())
                           for member in cohort.members})
    metrics = {"client": i, "num-examples": int(fed.sizes[i]), "soft_labels": stats.soft_labels[i].tolist(),
               **{name: float(getattr(stats, name)[i]) for name in STATS},
               **{name: float(values[i]) for name, values in _companion_columns(stats).items()}}
    return Message(RecordDict({"arrays": trained, "metrics": MetricRecord(metrics)}), reply_to=message)


@client_app.query("probe")
def probe(message: Message, context: Context) -> Message:
    """One minibatch gradient of this client's data at the model it was sent (evaluation mode)."""
    config = message.content["config"]
    fed, i = _federation(config), _client_id(context, config)
    model = _tensor(message.content["arrays"]["model"], fed)
    result = fed.probe(np.array([i]), model.unsqueeze(0), fed.generator(int(config["seed"])))
    return Message(RecordDict({"arrays": ArrayRecord({"grad": Array(result.grad[0].cpu().numpy())}),
                               "metrics": MetricRecord({"client": i, "loss": float(result.loss[0])})}),
                   reply_to=message)


# ---- the server -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _PendingTraining:
    """The round the env asked the clients to train: what :meth:`PolicyStrategy.configure_train` sends."""

    plan: RoundPlan
    steps: np.ndarray
    key: int
    order: np.ndarray


class PolicyStrategy(Strategy):
    """A Flower strategy whose every decision is an fl-gym policy's action on the matching env.

    Args:
        spec: the :class:`EnvSpec` of the env (id, keyword arguments, scenario seed); the clients build
            the same one.
        policy: anything with SB3's ``predict`` (a loaded PPO model, a fixed policy), or a
            function of the server's env returning one (fixed policies are built on the env).
        seed: the episode seed (the env's ``reset(seed=...)``): sampling, device load, model
            initialisation and batch streams, as in the env.
        deterministic: passed to ``predict``.
        label: the policy's name in the logs (default: its type's).
        node_timeout: seconds to wait for ``num_clients`` nodes to register before round 1.

    After :meth:`start`, :attr:`history` holds each round's ``info`` scalars and the policy's action.
    """

    @cached_property
    def env(self) -> FLEnv:
        """The server's env, built (and checked) once."""
        return self.spec.make()

    @cached_property
    def predictor(self) -> Predictor:
        """The policy that plays, built on :attr:`env` when given as a function of it (which checks it)."""
        return built(self.policy, self.env)

    def __init__(self, spec: EnvSpec, policy: Predictor | Callable[[FLEnv], Predictor], *, seed: int = 0,
                 deterministic: bool = True, label: str | None = None, node_timeout: float = 120.0) -> None:
        require_seed("seed", seed)  # the env's reset(seed=...) refused it, after the nodes registered
        require(is_positive(node_timeout), "node_timeout", node_timeout, "seconds > 0")
        require(hasattr(policy, "predict") or callable(policy), "policy", policy,
                "a predictor (SB3's predict) or a function of the env that builds one")
        require_types(PolicyStrategy.__init__, {"deterministic": deterministic, "label": label})
        self.spec, self.policy, self.seed = spec, policy, int(seed)
        self.deterministic, self.node_timeout = deterministic, float(node_timeout)
        self.label = label or type(policy).__name__
        self.history: list[dict[str, Any]] = []
        self._grid: Grid | None = None
        self._timeout = 3600.0
        self._nodes: dict[int, int] = {}
        self._extra: dict[str, Any] = {}
        self._pending: _PendingTraining | None = None

    def summary(self) -> None:
        """Log what plays."""
        log.info("\t├──> env: %s (scenario seed %d, episode seed %d)", self.spec.env_id,
                 self.spec.scenario_seed, self.seed)
        log.info("\t└──> policy: %s", self.label)

    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int = 3,
              timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None) -> Result:
        """Play ``num_rounds`` rounds (fewer if the env's episode ends) of the policy on ``grid``'s nodes.

        ``initial_arrays`` must be None: the global model comes from the episode seed, as in the
        env, so the Flower run and the env start from the same model. Evaluation is the env's
        (central, on the server's test split); ``evaluate_fn``, if given, is called after each
        round as in Flower's strategies. ``evaluate_config`` is unused (there is no federated
        evaluation); ``train_config`` entries go into every train message.
        """
        require(initial_arrays is None, "initial_arrays", type(initial_arrays).__name__,
                "None (the global model comes from the episode seed)")
        require(is_int_at_least(num_rounds, 1), "num_rounds", num_rounds, "an integer >= 1")
        require(is_positive(timeout), "timeout", timeout, "seconds > 0 (each round's wait for its replies)")
        require(evaluate_fn is None or callable(evaluate_fn), "evaluate_fn", evaluate_fn,
                "None or a function (round, arrays) -> MetricRecord or None")
        extra = _train_entries(train_config)
        log.info("Starting %s:", type(self).__name__)
        self.summary()
        env = self.env
        self._grid, self._timeout, self._extra = grid, float(timeout), extra
        self._nodes = self._register(env.federation.num_clients)
        env.federation.remote = self
        result, self.history = Result(), []
        for row in play(env, self.predictor, self.seed, num_rounds, self.deterministic):
            self.history.append(row)
            metrics = {k: v for k, v in row.items() if k != "action"}
            result.train_metrics_clientapp[row["round"]] = MetricRecord(metrics)
            result.arrays = _global_arrays(env.federation)
            if evaluate_fn is not None and (metrics := evaluate_fn(row["round"], result.arrays)) is not None:
                result.evaluate_metrics_serverapp[row["round"]] = metrics
        return result

    # ---- the clients: Flower messages ------------------------------------------------------------

    def _register(self, k: int) -> dict[int, int]:
        """``{client id: node id}`` once ``k`` nodes have registered and told their partition ids."""
        deadline = time.monotonic() + self.node_timeout
        while len(nodes := list(self._grid.get_node_ids())) < k:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(nodes)} of num_clients={k} nodes registered in "
                                   f"{self.node_timeout:g} s; "
                                   "start one SuperNode per client")
            time.sleep(0.5)
        hello = ConfigRecord({"spec": self.spec.to_json()})
        replies = self._exchange([_message(node, "query.hello", config=hello) for node in nodes])
        found = {int(r.content["metrics"]["client"]): r.metadata.src_node_id for r in replies}
        missing = sorted(set(range(k)) - set(found))
        require(not missing, "partition-id", missing,
                f"every client 0..{k - 1} on some node (these are on none)")
        return {i: found[i] for i in range(k)}

    def _exchange(self, messages: list[Message]) -> list[Message]:
        """Send and wait for every reply; a client's error is raised here."""
        replies = list(self._grid.send_and_receive(messages, timeout=self._timeout))
        for reply in replies:
            if reply.has_error():
                raise RuntimeError(f"node {reply.metadata.src_node_id}: {reply.error.reason}")
        if len(replies) < len(messages):
            raise TimeoutError(f"{len(replies)} of {len(messages)} clients replied within "
                               f"{self._timeout:g} s")
        return replies

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                        ) -> Iterable[Message]:
        """One train message per client of the pending round: its model and instructions.

        ``arrays`` holds the global models (``model0``, ``model1``, ... and ``lite``); each
        client gets the one of its model size, its epochs, learning rate, step count and seed.
        """
        p = self._pending
        plan, lite = p.plan, arrays.get("lite")
        log.info("round %d: train clients %s | model %s | epochs %s | lr %s", server_round, p.order.tolist(),
                 plan.model[p.order].tolist(), _rounded(plan.epochs[p.order]), _rounded(plan.lr[p.order]))
        messages = []
        for i in p.order:
            m = int(plan.model[i])
            content = ConfigRecord({**config, "server-round": server_round, "client": int(i), "model": m,
                                    "lr": float(plan.lr[i]), "epochs": float(plan.epochs[i]),
                                    "steps": int(p.steps[i]), "seed": client_seed(p.key, int(i))})
            models = ArrayRecord({"model": arrays[f"model{m}"],
                                  **({"lite": lite} if lite is not None else {})})
            messages.append(_message(self._nodes[int(i)], MessageType.TRAIN, config=content, arrays=models))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The replies' data-size-weighted mean loss; no arrays: the env aggregates after its decision."""
        metrics = [r.content["metrics"] for r in replies]
        n = np.array([m["num-examples"] for m in metrics], np.float64)
        loss = np.array([m["loss"] for m in metrics], np.float64)
        return None, MetricRecord({"loss": float(n @ loss / n.sum()), "num-examples": int(n.sum())})

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                           ) -> Iterable[Message]:
        """None: evaluation is the env's, on the server's test split."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """None (no federated evaluation)."""
        return None

    # ---- RemoteClients: the federation's clients are the Flower nodes ------------------------------

    def train_clients(self, fed: Federation, plan: RoundPlan, steps: np.ndarray, key: int
                      ) -> tuple[LocalStats, Cohort | None]:
        """Send the round to its clients, and turn their replies into the federation's cohort and stats."""
        order = fed.cohort_order(steps)
        self._pending = _PendingTraining(plan, steps, key, order)
        config = ConfigRecord({**self._extra, "spec": self.spec.to_json()})
        replies = self._exchange(list(self.configure_train(fed.round + 1, _global_arrays(fed), config,
                                                           self._grid)))
        _, metrics = self.aggregate_train(fed.round + 1, replies)
        log.info("round %d: %d replies, mean local loss %.4f", fed.round + 1, len(replies), metrics["loss"])
        content = {int(r.content["metrics"]["client"]): r.content for r in replies}
        stats = LocalStats.empty(fed.num_clients, fed.num_classes, fed.companion_arch is not None)
        for i, reply in content.items():
            values = reply["metrics"]
            for name in STATS:
                getattr(stats, name)[i] = values[name]
            stats.soft_labels[i] = values["soft_labels"]
            for name, column in _companion_columns(stats).items():
                column[i] = values[name]
        cohort = Cohort(order, fed.members(plan, order))
        for member in cohort.members:
            rows = torch.stack([_tensor(content[int(i)]["arrays"][member.role], fed)
                                for i in cohort.clients(member)])
            member.stack = Stack.from_rows(member.stack.arch, rows)
        return stats, cohort

    def probe(self, fed: Federation, clients: np.ndarray, models: torch.Tensor, key: int) -> Probe:
        """Each client's probe gradient at its row of ``models``."""
        spec = self.spec.to_json()
        messages = [_message(self._nodes[int(i)], "query.probe",
                             config=ConfigRecord({"spec": spec, "client": int(i),
                                                  "seed": client_seed(key, int(i))}),
                             arrays=ArrayRecord({"model": Array(row.cpu().numpy())}))
                    for i, row in zip(clients, models, strict=True)]
        content = {int(r.content["metrics"]["client"]): r.content for r in self._exchange(messages)}
        loss = torch.tensor([content[int(i)]["metrics"]["loss"] for i in clients], device=fed.device)
        grad = torch.stack([_tensor(content[int(i)]["arrays"]["grad"], fed) for i in clients])
        return Probe(loss.to(grad.dtype), grad)

    def round_finished(self, report: RoundReport) -> None:
        """Log which updates entered, with which weights, and the new global accuracy."""
        entered = np.flatnonzero(report.aggregated)
        log.info("round %d: aggregated %s | weights %s | global accuracy %s", report.round, entered.tolist(),
                 _rounded(report.weights[entered]), "not evaluated" if math.isnan(report.accuracy)
                 else _rounded(report.global_accuracy))


def play(env: FLEnv, policy: Predictor | Callable[[FLEnv], Predictor], seed: int, num_rounds: int,
         deterministic: bool = True) -> Iterator[dict[str, Any]]:
    """Play ``policy`` on ``env`` from ``reset(seed=seed)`` for ``num_rounds`` rounds or to the episode's end.

    Yields each round's ``info`` scalars with ``reward`` and the policy's ``action``: the same
    loop for the Flower run and for the env it is compared with.
    """
    policy = built(policy, env)
    obs, _ = env.reset(seed=seed)
    for _ in range(num_rounds):
        action, _ = policy.predict(obs, deterministic=deterministic)
        obs, reward, terminated, truncated, info = env.step(action)
        yield _scalars(info) | {"round": int(info["round"]), "reward": float(reward),
                                "action": np.asarray(action).tolist()}
        if terminated or truncated:
            log.info("the env's episode ended after round %d", info["round"])
            return


def built(policy: Predictor | Callable[[FLEnv], Predictor], env: FLEnv) -> Predictor:
    """``policy`` itself if it predicts, else the predictor it builds on ``env`` (a fixed policy)."""
    predictor = policy if hasattr(policy, "predict") else policy(env)
    require(hasattr(predictor, "predict"), "policy", policy, "a predictor or a function that returns one "
            f"(this one returned {predictor!r})")
    return predictor


def _train_entries(config: object) -> dict[str, Any]:
    """``start``'s ``train_config`` as the entries every train message adds, or an error naming it.

    Checked before the nodes register: a value Flower's records refuse failed at the first round's
    messages, and a key the strategy writes itself (:data:`TRAIN_KEYS`) was overwritten without a word.
    """
    require_mapping("train_config", config, of="names to Flower config values")
    taken = sorted(set(config or {}) & set(TRAIN_KEYS))
    require(not taken, "train_config", config, f"keys other than {', '.join(TRAIN_KEYS)} (the strategy "
            f"writes them into every train message; {taken} given)")
    try:
        return dict(ConfigRecord(dict(config or {})))
    except TypeError as err:
        raise UserError(f"train_config={config!r} is out of range; allowed: Flower config values "
                        f"({one_line(err)})") from None


def _message(node: int, kind: str, *, config: ConfigRecord, arrays: ArrayRecord | None = None) -> Message:
    content = RecordDict({"config": config, **({"arrays": arrays} if arrays is not None else {})})
    return Message(content=content, dst_node_id=node, message_type=kind)


def _global_arrays(fed: Federation) -> ArrayRecord:
    """The federation's global models as Flower arrays (``model0``, ... and ``lite``)."""
    arrays = {f"model{m}": Array(v.cpu().numpy()) for m, v in enumerate(fed.global_models)}
    if fed.companion_model is not None:
        arrays["lite"] = Array(fed.companion_model.cpu().numpy())
    return ArrayRecord(arrays)


def _scalars(info: dict[str, Any]) -> dict[str, float]:
    """The finite-or-NaN scalar entries of an env's ``info`` (what a MetricRecord holds)."""
    return {k: float(v) for k, v in info.items() if isinstance(v, (int, float, np.number))
            and not isinstance(v, bool)}


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 4) for v in values]
