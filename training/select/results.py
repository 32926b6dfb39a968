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
from pathlib import Path
from typing import Any

from fl_gym.atomic import read_json, write_text
from fl_gym.training import runs
from fl_gym.training.cli import parse_ints, parse_kv
from fl_gym.training.compare import compare, markdown_table

SERVER = {"server_data_fraction": 0.1, "allow_server_data": True}
AGENT_POLICIES = {"FLSelect-v0": ["fedentropy", "fedavg"], "FLSelectPick-v0": ["pools", "random-pick"],
                  "FLSelectQueue-v0": ["ddfl", "queue-all"]}


def parser() -> argparse.ArgumentParser:
    """The arguments of ``fl-gym reproduce select``."""
    p = argparse.ArgumentParser(prog="fl-gym reproduce select", description="FedEntropy and DDFL against their "
                                "baselines (resumable; docs/select.md)")
    p.add_argument("--out", default="bench-results/select", help="output folder")
    p.add_argument("--seeds", default="10000,10001,10002", help="evaluation seeds")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help="for every env, e.g. dataset=mnist")
    p.add_argument("--agent-steps", type=int, default=0, help="PPO steps per env id (0: no agents)")
    p.add_argument("--target", type=float, default=0.9, help="accuracy target for the rounds-to-target column")
    return p


def _section(out: Path, name: str, env_id: str, policies: list[str], seeds: tuple[int, ...],
             env_kwargs: dict[str, Any], say, target: float) -> dict[str, Any]:
    folder = out / name
    if (folder / "results.json").is_file():
        return read_json(folder / "results.json")
    say(f"{name}: {env_id}, {', '.join(policies)} on seeds {list(seeds)}")
    return compare(env_id, policies, seeds, env_kwargs, out_dir=folder, progress=False, target=target)


def _agent(out: Path, env_id: str, steps: int, env_kwargs: dict[str, Any], say) -> Path:
    folder = out / "agents" / env_id / "ppo"
    if not (folder / "config.yml").is_file():
        cfg = runs.resolve(env_id, "maskable-ppo" if env_id == "FLSelectPick-v0" else "ppo", env_kwargs=env_kwargs,
                           total_timesteps=steps, save_freq=max(steps // 4, 240))
        folder = runs.new_run_dir(cfg, out / "agents", "ppo")
    say(f"training PPO on {env_id} ({steps} steps)")
    runs.train(folder, progress=False, say=say)
    return folder


def reproduce(argv: list[str]) -> int:
    """``fl-gym reproduce select [ARGS]``: run the sections, write and print ``report.md``."""
    args = parser().parse_args(argv)
    out, seeds = Path(args.out), parse_ints(args.seeds)
    base = parse_kv(args.env_kwargs, "--env-kwargs")
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    tables = {}

    def section(name: str, env_id: str, policies: list[str], kwargs: dict[str, Any] = base) -> dict[str, Any]:
        return _section(out, name, env_id, policies, seeds, kwargs, say, args.target)

    tables["fedentropy"] = section("fedentropy", "FLSelect-v0", ["fedentropy", "fedavg", "fedentropy-nopools"])
    rate = tables["fedentropy"]["summary"]["fedentropy"]["select/kept_share"][0]
    tables["matched"] = section("matched", "FLSelect-v0", [f"random-drop[q={rate:.3f}]"])
    tables["x-fedentropy"] = section("x-fedentropy", "FLSelect-v0", ["fedprox", "fedprox+fedentropy", "scaffold",
                                                                     "scaffold+fedentropy", "moon", "moon+fedentropy"])
    tables["ddfl"] = section("ddfl", "FLSelectQueue-v0", ["fedavg-noniid", "top-entropy", "queue-all", "ddfl"])
    if args.agent_steps > 0:
        for env_id, fixed in AGENT_POLICIES.items():
            kwargs = {**base, **(SERVER if env_id == "FLSelectQueue-v0" else {})}
            agent = _agent(out, env_id, args.agent_steps, kwargs, say)
            tables[f"ppo-{env_id}"] = section(f"ppo-{env_id}", env_id, [*fixed, f"ppo:{agent}"], kwargs)
    text = "\n".join(f"## {name}\n\n{markdown_table(r)}" for name, r in tables.items())
    write_text(out / "report.md", f"# Selection results, seeds {list(seeds)}, env kwargs {base}\n\n{text}")
    print(text)
    return 0
