"""One federation's clients over Ray actors, for federations too big for one process.

:class:`RayFederation` keeps the server on the driver (the sampler, the global model, the
evaluation: a :class:`~fl_gym.federation.Federation` of its own) and splits the ``K`` clients
into ``workers`` contiguous shards, each a Ray actor holding the same scenario (same partition,
same devices, from the same ``scenario_seed``) that trains only its own clients, as one batched
cohort. A round sends the global model to every shard with sampled clients; each returns its
clients' data-size-weighted sum of trained models and the sum of their weights; the server's
new model is the total sum over the total weight, which is FedAvg's data-size average over all
sampled clients. Each shard draws its own minibatch order, so a sharded round equals the
single-process round up to that order: exactly so (to float rounding) with full-batch local
training, which the equality test uses.

Supported: one model, the plain average on the server, data-size weights and a local algorithm
without client or server state (``fedavg``, ``fedprox``); anything else is a ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fl_gym.config import STATELESS, FederationConfig
from fl_gym.federation import Federation
from fl_gym.integrations.ray import ensure_ray, import_ray, require_cpus
from fl_gym.records import RoundPlan, as_mask
from fl_gym.validation import (
    is_int_at_least,
    is_non_negative,
    is_positive,
    require,
    require_choice,
    require_seed,
    require_types,
)


class FederationShard:
    """A Ray actor's body: the whole scenario, training the clients the server sends it."""

    def __init__(self, config: FederationConfig, scenario_seed: int, threads: int) -> None:
        torch.set_num_threads(threads)
        self.fed = Federation(config, scenario_seed)

    def reset(self, seed: int) -> None:
        """A new episode's streams (batch order) from ``seed``."""
        self.fed.reset(seed)

    def train(self, global_model: torch.Tensor, selected: np.ndarray, lr: float, epochs: float
              ) -> tuple[torch.Tensor, float]:
        """Train ``selected`` from ``global_model``: their data-size-weighted model sum and weight."""
        fed = self.fed
        fed.global_models[0] = global_model.to(fed.device)
        fed.run_round(RoundPlan.make(fed.num_clients, lr=lr, selected=selected, epochs=epochs))
        weight = float(fed.sizes[selected].sum())
        return fed.global_models[0].cpu() * weight, weight


class RayFederation:
    """FedAvg over a federation whose clients are sharded over Ray actors (module docstring).

    Args:
        config: the federation (trained for real: ``config.train``).
        scenario_seed: the static scenario, the same in every shard.
        workers: actors; client ``i`` lives on shard ``i * workers // K``.
        address: where Ray runs if it is not running yet (as :class:`~fl_gym.integrations.ray.RayVecEnv`).
        num_cpus_per_worker: CPUs each actor declares (and its torch threads).
    """

    def __init__(self, config: FederationConfig, scenario_seed: int = 0, workers: int = 2,
                 address: str | None = None, num_cpus_per_worker: int = 1) -> None:
        require(isinstance(config, FederationConfig), "config", config, "a FederationConfig")
        require_seed("scenario_seed", scenario_seed)
        require_cpus(num_cpus_per_worker)
        require(config.train, "config.train", config.train, "True (a sharded federation trains)")
        require(len(config.models) == 1 and config.companion is None, "config.models", config.models,
                "one model and no companion")
        require_choice("config.algorithm", config.algorithm, STATELESS)
        require(config.aggregation == "datasize" and config.server.name == "average", "config.server",
                config.server.name, "the plain average with data-size weights")
        require(is_int_at_least(workers, 1) and workers <= config.num_clients, "workers", workers,
                f"an integer in [1, num_clients={config.num_clients}]")
        ray = ensure_ray(address)
        self.server = Federation(config, scenario_seed)
        self.owner = np.arange(config.num_clients) * workers // config.num_clients
        actor = ray.remote(FederationShard).options(num_cpus=num_cpus_per_worker)
        self.shards = [actor.remote(config, scenario_seed, num_cpus_per_worker) for _ in range(workers)]

    @property
    def global_model(self) -> torch.Tensor:
        """The server's model."""
        return self.server.global_models[0]

    def reset(self, seed: int) -> None:
        """A new episode on the server and every shard (fresh global model from ``seed``)."""
        self.server.reset(seed)
        import_ray().get([shard.reset.remote(seed) for shard in self.shards])

    def run_round(self, selected: np.ndarray, lr: float, epochs: float = 1.0, evaluate: bool = True
                  ) -> dict[str, Any]:
        """Train ``selected`` (``(K,)`` bool) on their shards and average them into the global model.

        Returns the shards that trained and (with ``evaluate``) the new global model's test accuracy.
        """
        selected = as_mask("selected", selected, self.server.num_clients)
        require(selected.any(), "selected", selected.tolist(), "a mask with at least one client")
        # here, not in the shards: there a bad value was Ray's traceback, after other shards had trained
        require(is_positive(lr), "lr", lr, "a number > 0")
        require(is_non_negative(epochs), "epochs", epochs, "a number >= 0")
        require_types(RayFederation.run_round, {"evaluate": evaluate})
        model = self.global_model.cpu()
        busy = [s for s in range(len(self.shards)) if (selected & (self.owner == s)).any()]
        futures = [self.shards[s].train.remote(model, selected & (self.owner == s), lr, epochs) for s in busy]
        sums, weights = zip(*import_ray().get(futures), strict=True)
        self.server.global_models[0] = (torch.stack(sums).sum(dim=0) / sum(weights)).to(self.server.device)
        self.server.advance(0.0)  # counted, not timed: this path trains without the clock
        report: dict[str, Any] = {"shards": busy}
        if evaluate:
            report["accuracy"] = float(self.server.evaluate()[0][0])
        return report

    def close(self) -> None:
        """Release the actors."""
        ray = import_ray()
        for shard in self.shards:
            ray.kill(shard)
