"""The selection family's comparisons (docs/select.md): ``fl-gym reproduce select``.

Sections, each one ``fl-gym compare`` call written under ``OUT/<section>/`` (tables, plots) and
skipped when its ``results.json`` exists, so an interrupted run resumes:

1. ``fedentropy``: FedEntropy against FedAvg, its no-pools ablation, and random dropping at
   FedEntropy's measured upload rate (the communication-matched control) on ``FLSelect-v0``;
2. ``x-fedentropy``: FedProx and SCAFFOLD without and with the judgement;
3. ``ddfl``: DDFL against non-IID FedAvg on one-class devices (``FLSelectQueue-v0``), with the
   selection and the queue apart;
4. ``ppo-<id>`` (``--agent-steps > 0``): PPO trained on seeds from 0, against the fixed policies.

Evaluation seeds are ``--seeds`` (10000 on), apart from training's. ``OUT/report.md`` collects
the tables.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fl_gym.atomic import write_text
from fl_gym.training.cli import Parser, parse_kv, parse_seed_list, writable
from fl_gym.training.compare import markdown_table
from fl_gym.training.runs import RunConfig, require_unseen
from fl_gym.training.sections import agent, agent_run, claim, section
from fl_gym.validation import require_fraction, require_timesteps

SERVER = {"server_data_fraction": 0.1, "allow_server_data": True}
AGENT_POLICIES = {"FLSelect-v0": ["fedentropy", "fedavg"], "FLSelectPick-v0": ["pools", "random-pick"],
                  "FLSelectQueue-v0": ["ddfl", "queue-all"]}


def parser() -> argparse.ArgumentParser:
    """The arguments of ``fl-gym reproduce select``."""
    p = Parser(prog="fl-gym reproduce select", description="FedEntropy and DDFL against their "
                                "baselines (resumable; docs/select.md)")
    p.add_argument("--out", default="bench-results/select", help="output folder")
    p.add_argument("--seeds", default="10000,10001,10002", help="evaluation seeds")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help="for every env, e.g. dataset=mnist")
    p.add_argument("--agent-steps", type=int, default=0, help="PPO steps per env id (0: no agents)")
    p.add_argument("--target", type=float, default=0.9,
                   help="accuracy target for the rounds-to-target column")
    return p


def _algo(env_id: str) -> str:
    """The agent's algorithm: a pick is a masked choice."""
    return "maskable-ppo" if env_id == "FLSelectPick-v0" else "ppo"


def _agent_kwargs(env_id: str, base: dict[str, Any]) -> dict[str, Any]:
    """The agent's env arguments: ``--env-kwargs``, and DDFL's server for the queue."""
    return {**base, **(SERVER if env_id == "FLSelectQueue-v0" else {})}


@dataclass(frozen=True)
class Reproduction:
    """What ``fl-gym reproduce select ARGV`` runs, every flag checked (:func:`checked_config`).

    ``out`` as given (written by the command only once every flag is checked); ``agents``: each
    env id's PPO run, its config and folder (none without ``--agent-steps``).
    """

    out: str
    env_kwargs: dict[str, Any]
    seeds: tuple[int, ...]
    target: float
    agent_steps: int
    agents: dict[str, tuple[RunConfig, Path]]

    def settings(self) -> dict[str, Any]:
        """The flags the results depend on (:func:`~fl_gym.training.sections.claim`)."""
        return {"--seeds": self.seeds, "--env-kwargs": self.env_kwargs, "--target": self.target,
                "--agent-steps": self.agent_steps}


def checked_config(argv: list[str]) -> Reproduction:
    """The run ``fl-gym reproduce select ARGV`` asks for, every flag checked before anything is written."""
    args = parser().parse_args(argv)
    seeds, base = parse_seed_list(args.seeds, "--seeds"), parse_kv(args.env_kwargs, "--env-kwargs")
    require_timesteps("--agent-steps", args.agent_steps, 0, " (0: no agents)")
    require_fraction("--target", args.target)
    agents = {env_id: agent_run(Path(args.out), env_id, args.agent_steps, _agent_kwargs(env_id, base),
                                _algo(env_id))
              for env_id in AGENT_POLICIES} if args.agent_steps > 0 else {}
    require_unseen("--seeds", seeds, agents.values())
    return Reproduction(args.out, base, seeds, args.target, args.agent_steps, agents)


def reproduce(argv: list[str]) -> int:
    """``fl-gym reproduce select [ARGS]``: run the sections, write and print ``report.md``."""
    cfg = checked_config(argv)
    out, seeds, base, agents = writable(cfg.out, "--out"), cfg.seeds, cfg.env_kwargs, cfg.agents
    claim(out, cfg.settings())
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    tables = {}

    def run(name: str, env_id: str, policies: list[str], kwargs: dict[str, Any] = base) -> dict[str, Any]:
        return section(out, name, env_id, policies, seeds, kwargs, say, cfg.target)

    tables["fedentropy"] = run("fedentropy", "FLSelect-v0", ["fedentropy", "fedavg", "fedentropy-nopools"])
    rate = tables["fedentropy"]["summary"]["fedentropy"]["select/kept_share"][0]
    tables["matched"] = run("matched", "FLSelect-v0", [f"random-drop[q={rate:.3f}]"])
    tables["x-fedentropy"] = run("x-fedentropy", "FLSelect-v0",
                                 ["fedprox", "fedprox+fedentropy", "scaffold", "scaffold+fedentropy", "moon",
                                  "moon+fedentropy"])
    tables["ddfl"] = run("ddfl", "FLSelectQueue-v0", ["fedavg-noniid", "top-entropy", "queue-all", "ddfl"])
    for env_id, plan in agents.items():
        folder = agent(plan, say)
        tables[f"ppo-{env_id}"] = run(f"ppo-{env_id}", env_id,
                                      [*AGENT_POLICIES[env_id], f"{_algo(env_id)}:{folder}"],
                                      _agent_kwargs(env_id, base))
    text = "\n".join(f"## {name}\n\n{markdown_table(r)}" for name, r in tables.items())
    write_text(out / "report.md", f"# Selection results, seeds {list(seeds)}, env kwargs {base}\n\n{text}")
    print(text)
    return 0
