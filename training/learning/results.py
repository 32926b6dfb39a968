"""The learning-rate and weight families' comparisons (docs/lr-weights.md).

``fl-gym reproduce rates`` and ``fl-gym reproduce aggregate``: each section is one resumable
``fl-gym compare`` call under ``OUT/<section>/`` (:mod:`fl_gym.training.sections`), and
``--agent-steps N`` adds PPO trained on the small default preset, evaluated on seeds apart from
training's, with a plot of one episode's rates or weights per round (``ppo-small/decisions.png``).
By default the paper presets run at reduced scale (a smaller CNN, one local epoch for FedEnt,
fewer rounds), which a 2-core CPU finishes in minutes; ``--paper-scale`` keeps the papers'
models, epochs and rounds. ``OUT/report.md`` collects the tables.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from fl_gym.atomic import write_text
from fl_gym.baselines.rates import FedEntPolicy
from fl_gym.training.cli import Parser, parse_kv, parse_seed_list, split_list, writable
from fl_gym.training.compare import markdown_table
from fl_gym.training.runs import RunConfig, require_unseen
from fl_gym.training.sections import agent, agent_run, claim, section
from fl_gym.training.trace import decision_trace
from fl_gym.validation import require, require_fraction, require_timesteps


@dataclass(frozen=True)
class Section:
    """One comparison: the env kwargs, what reduced scale changes, and the accuracy target(s)."""

    kwargs: dict[str, Any]
    reduced: dict[str, Any]
    target: float
    reduced_target: float | None = None  # a smaller model's reachable target (None: the same)


RATE_POLICIES = ["fedavg", "fedavg[lr=0.03]", "fedavg[lr=0.1]", "fedadam", "fedprox", "feddyn",
                 "decay", "fedent"]
_ONE_EPOCH = {"model": "cnn-small", "local_epochs": 1}
RATES = {
    "mnist-pathological": Section({"preset": "paper_mnist_pathological"}, _ONE_EPOCH, 0.9),
    "mnist-dirichlet": Section({"preset": "paper_mnist_dirichlet"}, _ONE_EPOCH, 0.9),
}
_SMALL_CNN = {"model": "cnn-small", "rounds_per_episode": 150}
WEIGHTS = {  # the paper's target is 95 %; cnn-small does not reach it in 150 rounds, 90 % it does
    "mnist-5iid-5oneclass": Section({"preset": "paper_mnist_cnn"}, _SMALL_CNN, 0.95, 0.9),
    "mnist-5iid-5twoclass": Section({"preset": "paper_mnist_cnn", "classes_per_client": 2}, _SMALL_CNN,
                                    0.95, 0.9),
    "mnist-mlr": Section({"preset": "paper_mlr"}, {}, 0.85),
    "fmnist-5iid-5oneclass": Section({"preset": "paper_fmnist_cnn"}, _SMALL_CNN, 0.80),
}
WEIGHT_POLICIES = ["fedavg", "fedadp", "fedcos"]
AGENT_POLICIES = {"FLLearningRate-v0": ["fedavg", "fedavg[lr=0.1]", "fedavg[lr=0.2]", "fedent", "decay",
                                        "fedadam", "fedprox", "feddyn"],
                  "FLAggregate-v0": ["fedavg", "uniform", "fedadp", "fedcos"]}
TRACE = {"FLLearningRate-v0": ("rates/lrs", "learning rate", ["fedavg", "fedent", "decay"]),
         "FLAggregate-v0": ("aggregate/weights", "aggregation weight", ["fedavg", "fedadp", "fedcos"])}
# each family's env id, its sections and the fixed policies they compare
COMPARISONS = {"rates": ("FLLearningRate-v0", RATES, RATE_POLICIES),
               "aggregate": ("FLAggregate-v0", WEIGHTS, WEIGHT_POLICIES)}


def parser(family: str) -> argparse.ArgumentParser:
    """The arguments of ``fl-gym reproduce FAMILY``."""
    p = Parser(prog=f"fl-gym reproduce {family}", description="the paper presets against their "
                                "baselines, and PPO on the small preset (resumable; docs/lr-weights.md)")
    p.add_argument("--out", default=f"bench-results/{family}", help="output folder")
    p.add_argument("--seeds", default="0,1", help="evaluation seeds (paired: every policy sees each one)")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help="for every section, e.g. data_root=/data")
    p.add_argument("--paper-scale", action="store_true", help="the papers' models, epochs and rounds")
    p.add_argument("--agent-steps", type=int, default=0, help="PPO steps on the small preset (0: no agent)")
    p.add_argument("--agent-seeds", default="1000,1001,1002,1003,1004", help="the agent's evaluation seeds")
    p.add_argument("--target", type=float, default=None,
                   help="accuracy target of every section (default: each "
                   "section's own)")
    p.add_argument("--sections", default="", help="comma-separated sections to run (default: all)")
    return p


@dataclass(frozen=True)
class Reproduction:
    """What ``fl-gym reproduce rates|aggregate ARGV`` runs, every flag checked (:func:`checked_config`).

    ``out`` as given (written by the command only once every flag is checked); ``agent``: the PPO
    run's config and folder (None without ``--agent-steps``).
    """

    out: str
    env_kwargs: dict[str, Any]
    seeds: tuple[int, ...]
    agent_seeds: tuple[int, ...]
    sections: list[str]
    paper_scale: bool
    target: float | None
    agent_steps: int
    agent: tuple[RunConfig, Path] | None

    def settings(self) -> dict[str, Any]:
        """The flags the results depend on (:func:`~fl_gym.training.sections.claim`); not ``--sections``."""
        return {"--seeds": self.seeds, "--env-kwargs": self.env_kwargs, "--paper-scale": self.paper_scale,
                "--target": self.target, "--agent-steps": self.agent_steps, "--agent-seeds": self.agent_seeds}


def checked_config(family: str, argv: list[str]) -> Reproduction:
    """The run ``fl-gym reproduce FAMILY ARGV`` asks for, every flag checked before anything is written."""
    env_id, sections, _ = COMPARISONS[family]
    args = parser(family).parse_args(argv)
    base = parse_kv(args.env_kwargs, "--env-kwargs")
    seeds = parse_seed_list(args.seeds, "--seeds")
    agent_seeds = parse_seed_list(args.agent_seeds, "--agent-seeds")
    require_timesteps("--agent-steps", args.agent_steps, 0, " (0: no agent)")
    require("preset" not in base, "--env-kwargs preset", base.get("preset"),
            f"none: each section sets its own "
            f"preset; pick sections with --sections ({', '.join(sections)})")
    if args.target is not None:  # its default: each section's own
        require_fraction("--target", args.target)
    chosen = split_list(args.sections) or list(sections)
    unknown = [n for n in chosen if n not in sections]
    require(not unknown, "--sections", unknown, ", ".join(sections))
    plan = agent_run(Path(args.out), env_id, args.agent_steps, {}) if args.agent_steps > 0 else None
    require_unseen("--agent-seeds", agent_seeds, [plan] if plan else [])
    return Reproduction(args.out, base, seeds, agent_seeds, chosen, args.paper_scale, args.target,
                        args.agent_steps, plan)


def _reproduce(family: str, argv: list[str]) -> int:
    cfg = checked_config(family, argv)
    env_id, sections, policies = COMPARISONS[family]
    out, base, seeds = writable(cfg.out, "--out"), cfg.env_kwargs, cfg.seeds
    claim(out, cfg.settings())
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    tables: dict[str, dict[str, Any]] = {}
    logs = {}
    for name in cfg.sections:
        sec = sections[name]
        kwargs = {**sec.kwargs, **({} if cfg.paper_scale else sec.reduced), **base}
        target = sec.target if cfg.paper_scale or sec.reduced_target is None else sec.reduced_target
        target = cfg.target if cfg.target is not None else target
        tables[name] = section(out, name, env_id, policies, seeds, kwargs, say, target)
        if env_id == "FLLearningRate-v0":
            logs[name] = fedent_log(kwargs, seeds[0], out / name / "fedent-log.md")
    if cfg.agent is not None:
        folder = agent(cfg.agent, say)
        tables["ppo-small"] = section(out, "ppo-small", env_id, [*AGENT_POLICIES[env_id], f"ppo:{folder}"],
                                      cfg.agent_seeds, {}, say)
        key, label, fixed = TRACE[env_id]
        decision_trace(env_id, [*fixed, f"ppo:{folder}"], cfg.agent_seeds[0], key,
                       out / "ppo-small" / "decisions.png", label)
    text = "\n".join(f"## {name}\n\n{markdown_table(r)}" for name, r in tables.items())
    text += "".join(f"\n## FedEnt's closed form, {name}, seed {seeds[0]}\n\n{log}"
                    for name, log in logs.items())
    write_text(out / "report.md", f"# {env_id}, seeds {list(seeds)}, env kwargs {base}\n\n{text}")
    print(text)
    return 0


def fedent_log(env_kwargs: dict[str, Any], seed: int, path: Path) -> str:
    """One FedEnt episode's closed form, round by round (our predictions of it, checked in the log).

    Per round: the share of clients whose raw rate is 0, the mean raw and used rates, the mean
    ``k`` sign (``k < 0`` is the deep-net regime), roots that are not minimisers, and the test
    accuracy. Written as a Markdown table to ``path`` and returned.
    """
    if path.is_file():
        return path.read_text()
    env = gym.make("FLLearningRate-v0", **env_kwargs)
    policy = FedEntPolicy(env)
    obs, _ = env.reset(seed=seed)
    rows = ["| round | raw = 0 | mean raw | mean rate used | k < 0 | root not a minimum | test acc. |",
            "|---|---|---|---|---|---|---|"]
    done = False
    while not done:
        st = env.unwrapped.round_stats
        action, _ = policy.predict(obs)
        sol = policy.last
        p = np.maximum(st.theta * (st.s - 2 * sol.eta * st.a + sol.eta ** 2 * st.b) / sol.phi2, 1e-12)
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        rows.append(f"| {st.round} | {np.mean(sol.eta == 0):.2f} | {sol.eta.mean():.4f} | "
                    f"{info['rates/lrs'].mean():.5f} | {np.mean(1 + np.log(p) < 0):.2f} | "
                    f"{int(sol.foc_not_min.sum())} | {info['accuracy']:.4f} |")
    env.close()
    return write_text(path, "\n".join(rows) + "\n").read_text()


def reproduce_rates(argv: list[str]) -> int:
    """``fl-gym reproduce rates``: FedEnt against FedAvg (three rates), FedAdam, FedProx, FedDyn, decay."""
    return _reproduce("rates", argv)


def reproduce_weights(argv: list[str]) -> int:
    """``fl-gym reproduce aggregate``: FedAdp and FedCos against FedAvg on the paper's node mixes."""
    return _reproduce("aggregate", argv)
