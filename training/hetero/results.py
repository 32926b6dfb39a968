"""HAPFL against its baselines: timing on the clock, accuracy with real training (docs/hapfl.md).

``fl-gym reproduce hetero --dataset digits`` (or ``mnist``) runs, resumably:

1. the dual agent, trained on the timing backend (``fast`` preset and the paper's B=5 recipe),
   and a single PPO on the joint action; saved under ``OUT/agents``;
2. timing: every policy on ``FLHetero-v0`` for ``rounds`` rounds on evaluation seeds that training
   never used: mean straggling latency ``max - min T^c`` and total simulated time ``sum T^round``,
   and HAPFL's reductions against FedAvg, FedProx and pFedMe (uniform large models, no LiteModel);
3. accuracy: the torch backend on a smaller budget (``acc_rounds`` rounds of ``acc_local_epochs``):
   final LiteModel and per-size global test accuracy and mean personalised local accuracy;
4. curves (first accuracy seed): accuracy round by round against the simulated clock, plotted, and
   each baseline's accuracy at the moment HAPFL finishes its rounds (equal simulated time);
5. gap closure per agent: the share of the gap each PPO closes toward its analytic reference
   (PPO1: Random to BalancedOracle on ``R^1``; PPO2, on the frozen PPO1's sizes: a uniform split
   to the inverse-time split on ``R^2``).

Each (policy, seed) result is cached in ``OUT/cache`` as it finishes, so an interrupted run
resumes; ``OUT/results.json`` and ``OUT/report.md`` are written atomically at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from fl_gym.agents.ppo import build_agent, load_hyperparams, make_env
from fl_gym.agents.recipes import (
    Frozen,
    find_recipe,
    is_recipe,
    load_recipe,
    recipe_presets,
    save_recipe,
    stage_hyperparams,
    train_recipe,
    yaml_preset,
)
from fl_gym.atomic import read_json, save_atomic, write_json, write_text
from fl_gym.baselines.hetero import (
    BalancedOraclePolicy,
    GreedyBySpeedPolicy,
    HAPFLPolicy,
    InverseTimePolicy,
    RandomPolicy,
    UniformPolicy,
)
from fl_gym.data import DATASETS, load_dataset
from fl_gym.training.cli import (
    DATA_ROOT_HELP,
    THREADS_HELP,
    Parser,
    parse_seed_list,
    split_list,
    warn_unread_root,
    writable,
)
from fl_gym.training.evaluation import aggregate, aggregate_summaries, evaluate
from fl_gym.training.runs import RunConfig, require_unseen
from fl_gym.training.sections import claim
from fl_gym.validation import (
    MAX_THREADS,
    require,
    require_choice,
    require_epochs,
    require_int_in,
    require_rounds,
    require_seed,
    require_timesteps,
)

# Paper (Chen et al., its experiments): HAPFL's reductions on MNIST, (straggling latency %, training time %).
PAPER_MNIST = {"FedAvg": (35.2, 26.1), "FedProx": (47.6, 40.4), "pFedMe": (37.1, 27.7)}
BASELINES = ("FedAvg", "FedProx", "pFedMe")
CURVES = ("HAPFL PPO (fast)", "BalancedOracle", "FedAvg", "FedProx", "pFedMe")
CURVE_METRICS = ("sim_time", "hetero/lite_accuracy", "accuracy", "hetero/mean_local_accuracy")
JOINT, ALLOC, INTENSITY = "FLHetero-v0", "FLHeteroAlloc-v0", "FLHeteroIntensity-v0"


@dataclass(frozen=True)
class ResultsConfig:
    """What :func:`run` measures.

    Attributes:
        dataset: ``digits`` (embedded) or ``mnist``...
        data_root: folder of torchvision files.
        out_dir: where agents, cache and reports go.
        train_seed: seed of agent training (its envs use ``train_seed + i``).
        eval_seeds: evaluation episodes' seeds (disjoint from training's).
        rounds: rounds per timing episode.
        agents: dual-agent hyperparameter presets to train and compare (``paper`` = the YAML base).
        acc_rounds: rounds per accuracy episode (torch backend).
        acc_local_epochs: ``E_loc`` of accuracy episodes.
        acc_seeds: seeds of accuracy episodes.
        acc_policies: policy labels run for accuracy (None = all, () = none).
        pfedme_overhead: pFedMe's simulated compute factor (its inner loop runs ``K=5`` passes).
        threads: torch threads.
        agent_steps: training steps of every agent instead of the YAML's (for quick checks).
    """

    dataset: str = "digits"
    data_root: str | None = None
    out_dir: str = "bench-results/hapfl-digits"
    train_seed: int = 0
    eval_seeds: tuple[int, ...] = (1000, 1001, 1002, 1003, 1004)
    rounds: int = 100
    agents: tuple[str, ...] = ("fast", "paper")
    acc_rounds: int = 20
    acc_local_epochs: int = 20
    acc_seeds: tuple[int, ...] = (1000, 1001, 1002, 1003, 1004)
    acc_policies: tuple[str, ...] | None = None
    pfedme_overhead: float = 5.0
    threads: int = 1
    agent_steps: int | None = None

    def settings(self) -> dict[str, Any]:
        """The flags the cache and agents depend on (:func:`~fl_gym.training.sections.claim`).

        Not the seeds, presets and policies: the cache holds each (policy, seed) apart and
        ``OUT/agents`` each preset, so a rerun may add some.
        """
        return {"--dataset": self.dataset, "--train-seed": self.train_seed, "--rounds": self.rounds,
                "--acc-rounds": self.acc_rounds, "--acc-local-epochs": self.acc_local_epochs,
                "--agent-steps": self.agent_steps}

    def runs_accuracy(self, label: str) -> bool:
        """Whether the policy ``label`` gets accuracy runs (never the joint PPO: not the paper's)."""
        return label != "Joint PPO (one agent)" and (self.acc_policies is None or label in self.acc_policies)


def _agents(cfg: ResultsConfig, say: Callable[[str], None]) -> dict[str, Any]:
    """Train (or load) each dual agent and the joint PPO; returns label -> (ppo1, ppo2) or model."""
    out, root = {}, Path(cfg.out_dir) / "agents"
    env_kwargs = {"dataset": cfg.dataset, "data_root": cfg.data_root}
    recipe = find_recipe(JOINT, "hapfl")
    for preset in cfg.agents:
        folder = root / preset
        if not is_recipe(folder):
            start = time.perf_counter()
            steps = None if cfg.agent_steps is None else {s.name: cfg.agent_steps for s in recipe.stages}
            models = train_recipe(recipe, env_kwargs, seed=cfg.train_seed, preset=yaml_preset(preset),
                                  steps=steps, progress=lambda m, p=preset: say(f"[{p}] {m}"))
            save_recipe(folder, recipe, models,
                        {"preset": preset, "train_wall_s": time.perf_counter() - start,
                         "env_kwargs": env_kwargs, "seed": cfg.train_seed})
        models = load_recipe(folder)[1]
        out[preset] = (models["ppo1"], models["ppo2"])
    joint = root / "joint.zip"
    if not joint.is_file():
        say("joint PPO on FLHetero-v0")
        h = load_hyperparams(JOINT)
        model = build_agent(make_env(JOINT, int(h.get("n_envs", 1)), cfg.train_seed, env_kwargs=env_kwargs),
                            h, seed=cfg.train_seed)
        model.learn(cfg.agent_steps or int(h["n_timesteps"]))
        save_atomic(model, joint)
    from stable_baselines3 import PPO

    out["joint"] = PPO.load(joint, device="cpu")
    return out


def _rows(cfg: ResultsConfig, agents: dict[str, Any]) -> dict[str, tuple[dict, Callable[[gym.Env], Any]]]:
    """Label -> (env kwargs, policy factory)."""
    hapfl = {"algorithm": "hapfl"}
    rows: dict[str, tuple[dict, Callable[[gym.Env], Any]]] = {}
    for preset in cfg.agents:
        pair = agents[preset]
        rows[f"HAPFL PPO ({preset})"] = (hapfl, lambda env, p=pair: HAPFLPolicy(env, *p))
    rows["Joint PPO (one agent)"] = (hapfl, lambda env: agents["joint"])
    rows["BalancedOracle"] = (hapfl, BalancedOraclePolicy)
    rows["InverseTime (large)"] = (hapfl, InverseTimePolicy)
    rows["GreedyBySpeed"] = (hapfl, GreedyBySpeedPolicy)
    rows["Random"] = (hapfl, lambda env: RandomPolicy(env, seed=0))
    rows["FedAvg"] = ({"algorithm": "fedavg"}, UniformPolicy)
    rows["FedProx"] = ({"algorithm": "fedprox"}, UniformPolicy)
    rows["pFedMe"] = ({"algorithm": "pfedme", "pfedme_overhead": cfg.pfedme_overhead}, UniformPolicy)
    return rows


def _cached(cfg: ResultsConfig, kind: str, label: str, seed: int, compute: Callable[[], Any],
            say: Callable[[str], None]) -> Any:
    """``OUT/cache/<kind>/<label>-<seed>.json``, computed (and written) only if it is missing."""
    path = Path(cfg.out_dir) / "cache" / kind / f"{label.replace(' ', '_').replace('/', '-')}-{seed}.json"
    if not path.is_file():
        say(f"{kind}: {label}, seed {seed}")
        write_json(path, compute())
    return read_json(path)


def _measure(cfg: ResultsConfig, kind: str, label: str, env_kwargs: dict, policy: Callable,
             seeds: tuple[int, ...], rounds: int, say: Callable[[str], None]) -> list[dict[str, float]]:
    """Per-seed episode summaries, each cached as soon as it is done."""
    make_env = lambda: gym.make(JOINT, **env_kwargs)  # noqa: E731
    return [_cached(cfg, kind, label, seed,
                    lambda s=seed: evaluate(make_env, policy, [s], rounds)[0].summary(), say)
            for seed in seeds]


def _torch_kwargs(cfg: ResultsConfig, kwargs: dict) -> dict:
    """Env arguments of the accuracy runs (torch backend, reduced budget)."""
    return {"dataset": cfg.dataset, "data_root": cfg.data_root, **kwargs, "backend": "torch",
            "local_epochs": cfg.acc_local_epochs, "rounds_per_episode": cfg.acc_rounds}


def _curves(cfg: ResultsConfig, rows: dict[str, tuple[dict, Callable]], say: Callable[[str], None]
            ) -> dict[str, dict]:
    """Per-round accuracy and clock of the first accuracy seed (cached); plot accuracy against time."""
    seed = cfg.acc_seeds[0]

    def series(label: str) -> dict[str, list[float]]:
        kwargs, policy = rows[label]
        env_kwargs = _torch_kwargs(cfg, kwargs)
        episode = evaluate(lambda: gym.make(JOINT, **env_kwargs), policy, [seed], cfg.acc_rounds)[0]
        return {m: episode.series(m) for m in CURVE_METRICS}

    curves = {label: _cached(cfg, "curves", label, seed, lambda lb=label: series(lb), say)
              for label in CURVES if label in rows and cfg.runs_accuracy(label)}
    if curves:
        from fl_gym.training.plots import plot_xy

        lines = {f"{label}: large": (c["sim_time"], c["accuracy"]) for label, c in curves.items()}
        lines.update({f"{label}: LiteModel": (c["sim_time"], c["hetero/lite_accuracy"])
                      for label, c in curves.items() if label.startswith("HAPFL")})
        plot_xy(lines, "simulated time (s, log scale)", "global test accuracy",
                f"{cfg.dataset}: accuracy against simulated time (seed {seed})",
                Path(cfg.out_dir) / "accuracy_vs_time.png", logx=True)
    return curves


def at_time(curve: dict[str, list[float]], metric: str, t: float) -> float:
    """The metric after the last round finished by simulated time ``t`` (NaN if none was)."""
    done = [v for time_, v in zip(curve["sim_time"], curve[metric], strict=True) if time_ <= t]
    return done[-1] if done else float("nan")


def _gap_closure(cfg: ResultsConfig, agents: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each agent's share of the gap from its floor to its analytic reference, on the evaluation seeds.

    Timing backend, cheap: not cached. Our check of a trained HAPFL (the paper reports no such
    figure): PPO1 from Random to BalancedOracle on ``R^1``, PPO2 from a uniform split to the
    inverse-time split on ``R^2``.
    """
    base = {"dataset": cfg.dataset, "data_root": cfg.data_root, "rounds_per_episode": cfg.rounds}

    def mean_reward(env_id: str, policy: Callable, **kwargs: Any) -> float:
        episodes = evaluate(lambda: gym.make(env_id, **base, **kwargs), policy, cfg.eval_seeds, cfg.rounds)
        return aggregate(episodes)["reward"][0]

    out = {}
    for preset in cfg.agents:
        ppo1, ppo2 = agents[preset]
        r1 = {"agent": mean_reward(ALLOC, lambda env, p=ppo1: p),
              "floor": mean_reward(ALLOC, lambda env: RandomPolicy(env, seed=0)),
              "reference": mean_reward(ALLOC, BalancedOraclePolicy)}
        sizes = {"allocation_policy": Frozen(ppo1.policy)}
        r2 = {"agent": mean_reward(INTENSITY, lambda env, p=ppo2: p, **sizes),
              "floor": mean_reward(INTENSITY, UniformPolicy, **sizes),
              "reference": mean_reward(INTENSITY, InverseTimePolicy, **sizes)}
        for name, r in (("PPO1", r1), ("PPO2", r2)):
            r["closed"] = (r["agent"] - r["floor"]) / (r["reference"] - r["floor"])
            out[f"{name} ({preset})"] = r
    return out


def run(cfg: ResultsConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run everything (resuming from the cache); returns and writes the results."""
    torch.set_num_threads(cfg.threads)
    agents = _agents(cfg, say)
    rows = _rows(cfg, agents)
    base = {"dataset": cfg.dataset, "data_root": cfg.data_root}
    timing, accuracy = {}, {}
    for label, (kwargs, policy) in rows.items():
        env_kwargs = {**base, **kwargs, "rounds_per_episode": cfg.rounds}
        runs = _measure(cfg, "timing", label, env_kwargs, policy, cfg.eval_seeds, cfg.rounds, say)
        timing[label] = aggregate_summaries(runs)
    for label, (kwargs, policy) in rows.items():
        if cfg.runs_accuracy(label):
            runs = _measure(cfg, "accuracy", label, _torch_kwargs(cfg, kwargs), policy, cfg.acc_seeds,
                            cfg.acc_rounds, say)
            accuracy[label] = aggregate_summaries(runs)
    curves = _curves(cfg, rows, say)
    say("gap closure")
    closure = _gap_closure(cfg, agents)
    walls = {p: read_json(Path(cfg.out_dir) / "agents" / p / "recipe.json").get("train_wall_s")
             for p in cfg.agents}
    results = {"config": asdict(cfg), "timing": timing, "accuracy": accuracy, "curves": curves,
               "gap_closure": closure, "train_wall_s": walls}
    write_json(Path(cfg.out_dir) / "results.json", results)
    write_text(Path(cfg.out_dir) / "report.md", report(results))
    return results


def _pm(stat: tuple[float, float] | None, digits: int = 1, scale: float = 1.0) -> str:
    return "n/a" if stat is None else f"{stat[0] * scale:.{digits}f} ± {stat[1] * scale:.{digits}f}"


def report(results: dict[str, Any]) -> str:
    """Markdown tables of :func:`run`'s results."""
    cfg, timing, accuracy = results["config"], results["timing"], results["accuracy"]
    lines = [f"### Timing: {cfg['dataset']}, {cfg['rounds']} rounds, seeds {cfg['eval_seeds']}", "",
             "| policy | straggling latency (s) | total time (s) | mean R^1 | mean R^2 (s) |",
             "|---|---|---|---|---|"]
    for label, s in timing.items():
        lines.append(f"| {label} | {_pm(s.get('straggling_latency'))} | {_pm(s.get('sim_time'), 0)} | "
                     f"{_pm(s.get('hetero/r1'), 2)} | {_pm(s.get('hetero/r2_seconds'), 1)} |")
    lines += ["", "### Reductions against the baselines (ours vs the paper's MNIST figures)", "",
              "| policy | vs | latency cut: ours | latency cut: paper | time cut: ours | time cut: paper |",
              "|---|---|---|---|---|---|"]
    for label in [k for k in timing if k.startswith("HAPFL")
                  or k in ("Joint PPO (one agent)", "BalancedOracle")]:
        for base in BASELINES:
            lat, tot = (100 * (1 - timing[label][m][0] / timing[base][m][0])
                        for m in ("straggling_latency", "sim_time"))
            paper = PAPER_MNIST[base]
            lines.append(f"| {label} | {base} | {lat:.1f} % | {paper[0]} % | {tot:.1f} % | {paper[1]} % |")
    if accuracy:
        lines += ["",
                  f"### Accuracy: {cfg['dataset']}, {cfg['acc_rounds']} rounds of "
                  f"E_loc={cfg['acc_local_epochs']}, seeds {cfg['acc_seeds']}", "",
                  "| policy | LiteModel (global) | small (global) | large (global) | local (personalised) | "
                  "time (s) |",
                  "|---|---|---|---|---|---|"]
        for label, s in accuracy.items():
            cells = [_pm(s.get(m), 1, 100) for m in ("hetero/lite_accuracy", "hetero/global_accuracy/small",
                                                     "accuracy", "hetero/mean_local_accuracy")]
            lines.append(f"| {label} | {' | '.join(cells)} | {_pm(s.get('sim_time'), 0)} |")
    curves = results.get("curves") or {}
    if "HAPFL PPO (fast)" in curves:
        finish = curves["HAPFL PPO (fast)"]["sim_time"][-1]
        lines += ["",
                  f"### Equal simulated time: each policy when HAPFL PPO (fast) finishes ({finish:.0f} s, "
                  f"seed {cfg['acc_seeds'][0]})", "",
                  "| policy | rounds done | large (global) | local (personalised) |", "|---|---|---|---|"]
        for label, c in curves.items():
            rounds = sum(t <= finish for t in c["sim_time"])
            cells = [at_time(c, m, finish) for m in ("accuracy", "hetero/mean_local_accuracy")]
            lines.append(f"| {label} | {rounds} | "
                         + " | ".join("n/a" if v != v else f"{100 * v:.1f}" for v in cells)
                         + " |")
    if results.get("gap_closure"):
        lines += ["", "### Gap closure: share of the gap to the analytic reference each agent closes", "",
                  "| agent | mean reward | floor | reference | gap closed |", "|---|---|---|---|---|"]
        for name, r in results["gap_closure"].items():
            lines.append(f"| {name} | {r['agent']:.3f} | {r['floor']:.3f} | {r['reference']:.3f} | "
                         f"{100 * r['closed']:.0f} % |")
        lines += ["",
                  "PPO1: R^1 on FLHeteroAlloc-v0, floor Random, reference BalancedOracle. PPO2: R^2/T_scale "
                  "on FLHeteroIntensity-v0 with the frozen PPO1's sizes, floor a uniform split, reference "
                  "inverse time."]
    walls = ", ".join(f"{p}: {w:.0f} s" for p, w in results["train_wall_s"].items() if w)
    lines += ["", f"Dual-agent training wall time (timing backend, shared machine): {walls}."]
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    """The arguments of ``fl-gym reproduce hetero``."""
    p = Parser(prog="fl-gym reproduce hetero", description="HAPFL against its baselines "
                                "(resumable; see docs/hapfl.md)")
    p.add_argument("--dataset", default="digits", help="the envs' data set (default: digits)")
    p.add_argument("--data-root", default=None, help=DATA_ROOT_HELP)
    p.add_argument("--out", default=None, help="output folder (default bench-results/hapfl-DATASET)")
    p.add_argument("--train-seed", type=int, default=0,
                   help="seed of the agents' training (its envs: SEED + i; default 0)")
    p.add_argument("--eval-seeds", default="1000,1001,1002,1003,1004",
                   help="evaluation episodes' seeds, apart from training's (default: 1000-1004)")
    p.add_argument("--rounds", type=int, default=100, help="rounds per timing episode")
    p.add_argument("--agents", default="fast,paper", help="dual-agent presets to train and compare")
    p.add_argument("--acc-rounds", type=int, default=20,
                   help="rounds per episode of the accuracy comparison (torch backend; default 20)")
    p.add_argument("--acc-local-epochs", type=int, default=20,
                   help="local epochs per round of the accuracy comparison (default 20)")
    p.add_argument("--acc-seeds", default=None, help="default: the evaluation seeds")
    p.add_argument("--acc-policies", default=None,
                   help="semicolon-separated policy labels, or none: no accuracy runs (default: all)")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--agent-steps", type=int, default=None, help="override every agent's training steps")
    return p


def reproduce(argv: list[str]) -> int:
    """``fl-gym reproduce hetero [ARGS]``: run, print the report."""
    cfg = checked_config(argv)
    claim(writable(cfg.out_dir, "--out"), cfg.settings())
    print(report(run(cfg, say=lambda m: print(m, file=sys.stderr, flush=True))))
    return 0


def checked_config(argv: list[str]) -> ResultsConfig:
    """The run ``fl-gym reproduce hetero ARGV`` asks for, every flag checked (:func:`check_flags`)."""
    args = parser().parse_args(argv)
    acc_seeds = args.eval_seeds if args.acc_seeds is None else args.acc_seeds  # '' is refused
    cfg = ResultsConfig(
        dataset=args.dataset, data_root=args.data_root,
        out_dir=f"bench-results/hapfl-{args.dataset}" if args.out is None else args.out,
        train_seed=args.train_seed, eval_seeds=parse_seed_list(args.eval_seeds, "--eval-seeds"),
        rounds=args.rounds, agents=tuple(split_list(args.agents)), acc_rounds=args.acc_rounds,
        acc_local_epochs=args.acc_local_epochs,
        acc_seeds=parse_seed_list(acc_seeds, "--acc-seeds"),
        acc_policies=_acc_policies(args.acc_policies),
        threads=args.threads, agent_steps=args.agent_steps)
    check_flags(cfg)
    return cfg


def _acc_policies(flag: str | None) -> tuple[str, ...] | None:
    """``--acc-policies``: None (every policy), ``()`` for ``none`` (timing sections alone), or the labels."""
    if flag is None:
        return None
    return () if flag == "none" else tuple(flag.split(";"))


def check_flags(cfg: ResultsConfig) -> None:
    """Refuse a bad value before the first agent trains (hours, at the papers' step counts).

    The data set is loaded here too: only the accuracy runs, after the agents, read its samples.
    """
    require_choice("--dataset", cfg.dataset, DATASETS)
    require(cfg.data_root != "", "--data-root", "", "a folder (default: $FL_GYM_DATA or ~/.cache/fl_gym)")
    warn_unread_root(cfg.dataset, cfg.data_root)
    load_dataset(cfg.dataset, root=cfg.data_root)
    require_seed("--train-seed", cfg.train_seed)
    require_rounds("--rounds", cfg.rounds)
    require_rounds("--acc-rounds", cfg.acc_rounds)
    require_epochs("--acc-local-epochs", cfg.acc_local_epochs)
    require_int_in("--threads", cfg.threads, 1, MAX_THREADS)
    if cfg.agent_steps is not None:  # default: each agent's own
        require_timesteps("--agent-steps", cfg.agent_steps, meaning=" (default: each agent's own)")
    recipe = find_recipe(JOINT, "hapfl")
    require(bool(cfg.agents), "--agents", ",".join(cfg.agents), "one or more presets, comma-separated")
    known = recipe_presets(recipe)
    unknown = [p for p in cfg.agents if p not in known]
    require(not unknown, "--agents", ",".join(unknown),
            f"presets among {known} (paper: the recipe's own blocks)")
    # the agents as _agents trains them
    plans = [RunConfig(JOINT, "hapfl", hyperparams=stage_hyperparams(recipe, yaml_preset(preset)),
                       seed=cfg.train_seed) for preset in cfg.agents]
    joint = load_hyperparams(JOINT)
    plans.append(RunConfig(JOINT, hyperparams=joint, seed=cfg.train_seed, n_envs=int(joint.get("n_envs", 1))))
    labels = list(_rows(cfg, dict.fromkeys([*cfg.agents, "joint"])))  # the policies, none built
    unknown = [p for p in cfg.acc_policies or () if p not in labels]
    require(not unknown, "--acc-policies", unknown, f"labels separated by ';' among {labels}")
    for flag, seeds in (("--eval-seeds", cfg.eval_seeds), ("--acc-seeds", cfg.acc_seeds)):
        require_unseen(flag, seeds, [(plan, None) for plan in plans])  # none started yet
