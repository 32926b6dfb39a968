"""A policy on a Flower federation: the ServerApp ``flwr run`` starts, and ``fl-gym flower``.

The policy is named as ``fl-gym compare`` names it (a fixed policy of the env's family, or
``ppo:PATH`` for a trained run); the strategy is :class:`~fl_gym.integrations.flower.PolicyStrategy`,
the ClientApp :data:`fl_gym.integrations.flower.client_app`. ``flwr run`` reads the run config
keys ``env-id``, ``policy``, ``num-rounds``, ``seed``, ``scenario-seed`` and ``env-kwargs`` (a
JSON object); ``examples/flower/`` is a Flower App that points at both.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from fl_gym.atomic import write_json, write_text
from fl_gym.integrations.flower import Context, EnvSpec, Grid, PolicyStrategy, ServerApp, client_app, play
from fl_gym.training.compare import policy_spec
from fl_gym.validation import is_int_at_least, is_positive, require

server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """``flwr run``: play the run config's policy for ``num-rounds`` rounds."""
    cfg = context.run_config
    spec = EnvSpec(str(cfg["env-id"]), json.loads(str(cfg.get("env-kwargs", "{}"))),
                   int(cfg.get("scenario-seed", 0)))
    strategy = strategy_for(spec, str(cfg.get("policy", "fedavg")), seed=int(cfg.get("seed", 0)))
    strategy.start(grid, num_rounds=int(cfg.get("num-rounds", 3)))


def strategy_for(env: EnvSpec, policy: str, seed: int = 0) -> PolicyStrategy:
    """The strategy playing ``policy`` (a ``compare`` policy string) on ``env``, or on the variant it names.

    The policy's own env arguments (a variant's) come first; ``env``'s override them.
    """
    chosen = policy_spec(policy, env.env_id, eval_seeds=(seed,))
    env = replace(env, env_kwargs={**chosen.env_kwargs, **env.env_kwargs})
    return PolicyStrategy(env, chosen.factory, seed=seed, label=chosen.label)


def run_local(strategy: PolicyStrategy, num_rounds: int, num_cpus_per_client: float = 1.0,
              verbose: bool = False) -> PolicyStrategy:
    """Flower's simulation runtime in this process (loopback only): one SuperNode per client.

    Returns ``strategy`` after its run (its :attr:`~PolicyStrategy.history` filled).
    """
    from flwr.simulation import run_simulation

    require(isinstance(strategy, PolicyStrategy), "strategy", strategy,
            "a PolicyStrategy (strategy_for builds one)")
    require(is_int_at_least(num_rounds, 1), "num_rounds", num_rounds, "an integer >= 1")
    # Flower's simulation crashed on 0 ("float division by zero") and on more than the machine's CPUs
    cpus = os.cpu_count() or 1
    require(is_positive(num_cpus_per_client) and num_cpus_per_client <= cpus, "num_cpus_per_client",
            num_cpus_per_client, f"a number in (0, {cpus}], this machine's CPUs")
    # built and checked before Flower starts: the env, and the policy against it
    num_clients, _ = strategy.env.federation.num_clients, strategy.predictor
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        strategy.start(grid, num_rounds=num_rounds)

    backend: dict[str, Any] = {"client_resources": {"num_cpus": num_cpus_per_client, "num_gpus": 0.0}}
    with _quiet_deprecation():
        run_simulation(server_app=app, client_app=client_app, num_supernodes=num_clients,
                       backend_config=backend, verbose_logging=verbose)
    return strategy


class _DropRunSimulationNotice(logging.Filter):
    """Drops Flower's notice that ``run_simulation`` is deprecated in favour of ``flwr run``.

    ``flwr run`` needs a SuperLink process; an in-process simulation has no other entry point in
    Flower 1.42, and ``docs/integrations.md`` says which call this is and what replaces it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for the notice, True for every other record."""
        return "`run_simulation` function is deprecated" not in record.getMessage()


@contextlib.contextmanager
def _quiet_deprecation() -> Iterator[None]:
    """Flower's logger without the ``run_simulation`` deprecation notice, for the block's duration."""
    logger, notice = logging.getLogger("flwr"), _DropRunSimulationNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def env_episode(strategy: PolicyStrategy, num_rounds: int) -> list[dict[str, Any]]:
    """The rounds ``strategy``'s policy plays in the fl-gym env itself (same arguments, seeds), to compare."""
    env = strategy.spec.make()
    return list(play(env, strategy.policy, strategy.seed, num_rounds, strategy.deterministic))


def comparison(flower: list[dict[str, Any]], env: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per round: accuracy and reward of the Flower run and of the env, and whether the actions agree."""
    rows = []
    for f, e in zip(flower, env, strict=False):
        gap = float(np.abs(np.asarray(f["action"], float) - np.asarray(e["action"], float)).max())
        rows.append({"round": f["round"], "flower_accuracy": f.get("accuracy", math.nan),
                     "env_accuracy": e.get("accuracy", math.nan), "flower_reward": f["reward"],
                     "env_reward": e["reward"], "action_gap": gap})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The comparison as a Markdown table."""
    lines = ["| round | accuracy, Flower | accuracy, env | reward, Flower | reward, env | largest action gap "
             "|",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['flower_accuracy']:.4f} | {r['env_accuracy']:.4f} | "
              f"{r['flower_reward']:.4f} | {r['env_reward']:.4f} | {r['action_gap']:.2g} |" for r in rows]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, env: EnvSpec, policy: str, seed: int, rows: list[dict[str, Any]], seconds: float
                  ) -> None:
    """``results.json`` and ``results.md`` (atomically) of ``policy`` played on ``env`` over Flower."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", {"env_id": env.env_id, "env_kwargs": env.env_kwargs,
                                      "scenario_seed": env.scenario_seed, "seed": seed, "policy": policy,
                                      "flower_seconds": seconds, "rounds": rows})
    write_text(out / "results.md",
               f"# {policy} on {env.env_id} over Flower (seed {seed})\n\n" + markdown(rows))

