"""The ``fl-gym`` console script.

Sub-commands: ``envs``, ``train``, ``compare``, ``bench``, ``data describe``, ``fedavg``, ``demo``
and ``reproduce``. A user mistake (unknown env id or policy, a malformed ``k=v``, a
hyperparameter the algorithm does not take, a missing model file) prints one line and exits
with status 2; Ctrl-C during training exits with 130 after saying how to resume.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fl_gym.data.datasets import DatasetNotFoundError

USER_ERRORS = (ValueError, FileNotFoundError, DatasetNotFoundError)


def parse_kv(items: list[str] | None, what: str) -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}``; values are parsed as YAML (numbers, bools, lists)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what}: expected key=value, got {item!r}")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ValueError(f"{what}: cannot parse the value of {item!r}: {err.problem}") from err
    return out


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError as err:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from err


def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


# ---- commands ------------------------------------------------------------------------------


def cmd_envs(args: argparse.Namespace) -> int:
    """List the registered env ids with their spaces, main arguments and fixed policies."""
    import dataclasses

    import gymnasium as gym

    from fl_gym.baselines import fixed_policies
    from fl_gym.envs import ENTRY_POINTS

    for env_id in ENTRY_POINTS:
        env = gym.make(env_id)
        cls = type(env.unwrapped)
        print(f"{env_id}: {(cls.__doc__ or '').strip().splitlines()[0]}")
        print(f"  observation: {env.observation_space}")
        print(f"  action:      {env.action_space}")
        fields = dataclasses.fields(cls.config_class)
        shown = ", ".join(f"{f.name}={getattr(env.unwrapped.cfg, f.name)!r}" for f in fields[:16])
        print(f"  arguments:   {shown}, ... (docs/envs/)")
        print(f"  policies:    {', '.join(fixed_policies(env_id))}")
        env.close()
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """Train an agent in a new run folder, or continue one with ``--resume``."""
    from fl_gym.training import runs

    _threads(args.threads)
    if args.resume:
        folder = Path(args.resume)
        runs.load_run(folder)
    else:
        if not args.env_id:
            raise ValueError("train: give an ENV_ID, or --resume RUN_DIR")
        cfg = runs.resolve(args.env_id, args.algo, args.preset, parse_kv(args.hyperparams, "--hyperparams"),
                           parse_kv(args.env_kwargs, "--env-kwargs"), args.seed, args.n_envs, args.vec_env,
                           args.n_timesteps, args.save_freq, args.tensorboard_log)
        folder = runs.new_run_dir(cfg, args.runs_dir, args.run_id)
        print(f"run folder: {folder}")
    try:
        summary = runs.train(folder, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted; continue with: fl-gym train --resume {folder}", file=sys.stderr)
        return 130
    print(f"done: {summary['timesteps']} steps; model in {folder}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Evaluate policies on the same seeds; write and print the table."""
    import datetime

    from fl_gym.training.compare import compare, markdown_table

    _threads(args.threads)
    specs = [s for s in args.policies.split(",") if s]
    out = Path(args.out or Path(args.runs_dir) / args.env_id / f"compare-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    results = compare(args.env_id, specs, _ints(args.seeds), parse_kv(args.env_kwargs, "--env-kwargs"),
                      args.rounds, out, progress=not args.no_progress)
    print(markdown_table(results))
    print(f"tables and plots in {out}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Engine speed-up tables, env steps per second and dual-agent training time."""
    from fl_gym.training import bench

    sections = args.sections.split(",")
    unknown = sorted(set(sections) - {"engine", "envs", "dual-agent"})
    if unknown:
        raise ValueError(f"--sections={unknown} is out of range; allowed: engine, envs, dual-agent")
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if "engine" in sections:
        scenarios = args.scenarios.split(",")
        missing = [s for s in scenarios if s not in bench.SCENARIOS]
        if missing:
            raise ValueError(f"--scenarios={missing} is out of range; allowed: {', '.join(bench.SCENARIOS)}")
        results = bench.engine_benchmark(scenarios, list(_ints(args.threads)), args.device, args.repeats,
                                         args.loop_repeats, progress=say)
        print(bench.engine_table(results) + "\n")
    if "envs" in sections:
        print(bench.env_table(bench.env_benchmark(progress=say)) + "\n")
    if "dual-agent" in sections:
        print(bench.dual_agent_table(bench.dual_agent_benchmark(progress=say)) + "\n")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """Describe a partition: per-client table and a class-histogram PNG."""
    import numpy as np

    from fl_gym.data import PartitionConfig, PartitionReport, load_dataset, partition
    from fl_gym.training.plots import plot_histogram

    data = load_dataset(args.dataset, root=args.data_root, download=args.download)
    if args.partition == "natural":
        parts = [train for train, _ in data.natural_split]
    else:
        cfg = PartitionConfig(args.partition, alpha=args.alpha, min_size=args.min_size,
                              shards_per_client=args.shards_per_client, classes_per_client=args.classes_per_client,
                              samples_per_client=args.samples_per_client, num_iid=args.num_iid)
        parts = partition(data.y_train.numpy(), args.clients, cfg, np.random.default_rng(args.seed),
                          data.num_classes)
    report = PartitionReport.of(parts, data.y_train.numpy(), data.num_classes)
    print(f"{data!r}, partition={args.partition}, clients={len(parts)}")
    print(report.table())
    out = Path(args.out or f"{args.dataset}-{args.partition}-{len(parts)}.png")
    plot_histogram(report.histogram, f"{args.dataset}: {args.partition} over {len(parts)} clients", out)
    print(f"histogram: {out}")
    return 0


def cmd_fedavg(args: argparse.Namespace) -> int:
    """A plain FedAvg run on the simulator, printing accuracy and simulated time per round."""
    from fl_gym import Federation, FederationConfig, PartitionConfig, RoundPlan

    _threads(args.threads)
    cfg = FederationConfig(dataset=args.dataset, num_clients=args.clients, models=(args.model,),
                           partition=PartitionConfig(alpha=args.alpha), batch_size=args.batch_size)
    fed = Federation(cfg, scenario_seed=args.seed)
    print(f"FedAvg on {args.dataset}: {args.clients} clients, Dirichlet({args.alpha}), {args.model}, "
          f"{args.epochs} local epochs, lr {args.lr}")
    print(f"{'round':>5} {'accuracy':>9} {'loss':>7} {'round time (s)':>15} {'simulated clock (s)':>20}")
    plan = RoundPlan.make(args.clients, lr=args.lr, epochs=args.epochs)
    for _ in range(args.rounds):
        rep = fed.run_round(plan)
        print(f"{rep.round:>5} {rep.accuracy:>9.4f} {float(rep.global_loss[0]):>7.4f} {rep.round_time:>15.3f} "
              f"{rep.clock:>20.3f}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: train HAPFL's dual agent briefly, compare it with the fixed policies."""
    from fl_gym.training.demo import run_demo

    _threads(args.threads)
    run_demo(Path(args.out), args.steps, args.seeds, args.accuracy_rounds)
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    """Run a paper's comparison (resumable)."""
    from fl_gym.training.hapfl_results import ResultsConfig, report, run

    cfg = ResultsConfig(
        dataset=args.dataset, data_root=args.data_root, out_dir=args.out or f"bench-results/hapfl-{args.dataset}",
        train_seed=args.train_seed, eval_seeds=_ints(args.eval_seeds), rounds=args.rounds,
        agents=tuple(args.agents.split(",")), acc_rounds=args.acc_rounds, acc_local_epochs=args.acc_local_epochs,
        acc_seeds=_ints(args.acc_seeds or args.eval_seeds),
        acc_policies=tuple(args.acc_policies.split(";")) if args.acc_policies else None,
        threads=args.threads, agent_steps=args.agent_steps)
    print(report(run(cfg, say=lambda m: print(m, file=sys.stderr, flush=True))))
    return 0


# ---- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="fl-gym", description="Federated learning as Gymnasium environments.")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("envs", help="list the registered env ids").set_defaults(func=cmd_envs)

    p = sub.add_parser("train", help="train an agent (runs/<env>/<run-id>/)")
    p.add_argument("env_id", nargs="?")
    p.add_argument("--algo", default="ppo", help="ppo, recurrent-ppo, maskable-ppo, or hapfl (dual agent)")
    p.add_argument("--preset", default=None, help="hyperparameter block ENV_ID/PRESET of ppo.yml (e.g. fast)")
    p.add_argument("--hyperparams", nargs="*", metavar="K=V", help="override hyperparameters")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V", help="env constructor arguments")
    p.add_argument("--n-timesteps", type=int, default=None, help="default: n_timesteps of the YAML block")
    p.add_argument("--n-envs", type=int, default=None, help="default: n_envs of the YAML block, else 1")
    p.add_argument("--vec-env", choices=["dummy", "subproc"], default="dummy")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-freq", type=int, default=10000, help="checkpoint every this many steps")
    p.add_argument("--tensorboard-log", default=None, help="default: RUN_DIR/tb")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--run-id", default=None)
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue a run from its last checkpoint")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest here, docs/performance.md)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("compare", help="evaluate policies on the same seeds, write tables and plots")
    p.add_argument("env_id")
    p.add_argument("--policies", required=True, help="comma-separated: fixed names and/or ALGO:PATH")
    p.add_argument("--seeds", default="10000,10001,10002,10003,10004", help="evaluation seeds (apart from training's)")
    p.add_argument("--env-kwargs", nargs="*", metavar="K=V")
    p.add_argument("--rounds", type=int, default=None, help="rounds per episode (default: the env's)")
    p.add_argument("--out", default=None, help="default: runs/ENV_ID/compare-TIMESTAMP")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("bench", help="engine speed-up, env steps/s and dual-agent training time")
    p.add_argument("--sections", default="engine,envs,dual-agent")
    p.add_argument("--scenarios", default="S3,S4,S1,S2", help="engine scenarios: S1,S2,S3,S4,S1-100,S2-100")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (engine)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=7, help="timed runs of the batched engine (median)")
    p.add_argument("--loop-repeats", type=int, default=3, help="timed runs of the per-client loop (median)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("data", help="data sets and partitions")
    data_sub = p.add_subparsers(dest="data_command", required=True)
    d = data_sub.add_parser("describe", help="partition report and class-histogram PNG")
    d.add_argument("dataset")
    d.add_argument("--partition", default="dirichlet",
                   help="iid, dirichlet, shards, classes, mixed, power_law, natural")
    d.add_argument("--clients", type=int, default=10)
    d.add_argument("--alpha", type=float, default=0.5)
    d.add_argument("--min-size", type=int, default=10)
    d.add_argument("--shards-per-client", type=int, default=2)
    d.add_argument("--classes-per-client", type=int, default=2)
    d.add_argument("--samples-per-client", type=int, default=None)
    d.add_argument("--num-iid", type=int, default=0)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--data-root", default=None)
    d.add_argument("--download", action="store_true")
    d.add_argument("--out", default=None, help="PNG path (default DATASET-PARTITION-CLIENTS.png)")
    d.set_defaults(func=cmd_data)

    p = sub.add_parser("fedavg", help="a plain FedAvg run, printing accuracy per round")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration of the label split")
    p.add_argument("--model", default="mlp-small")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.set_defaults(func=cmd_fedavg)

    p = sub.add_parser("demo", help="the main job: train HAPFL's dual agent briefly and compare it")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--steps", type=int, default=40000, help="training steps per agent")
    p.add_argument("--seeds", type=int, default=5, help="evaluation episodes per policy")
    p.add_argument("--accuracy-rounds", type=int, default=15, help="rounds of the torch-backend comparison")
    p.add_argument("--threads", type=int, default=1)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("reproduce", help="reproduce a paper's comparison (resumable; see docs/hapfl.md)")
    p.add_argument("paper", choices=["hapfl"])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--data-root", default=None)
    p.add_argument("--out", default=None, help="output folder (default bench-results/hapfl-DATASET)")
    p.add_argument("--train-seed", type=int, default=0)
    p.add_argument("--eval-seeds", default="1000,1001,1002,1003,1004")
    p.add_argument("--rounds", type=int, default=100, help="rounds per timing episode")
    p.add_argument("--agents", default="fast,paper", help="dual-agent presets to train and compare")
    p.add_argument("--acc-rounds", type=int, default=20)
    p.add_argument("--acc-local-epochs", type=int, default=20)
    p.add_argument("--acc-seeds", default=None, help="default: the evaluation seeds")
    p.add_argument("--acc-policies", default=None, help="semicolon-separated policy labels (default: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--agent-steps", type=int, default=None, help="override every agent's training steps")
    p.set_defaults(func=cmd_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fl-gym`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as err:
        print(f"fl-gym: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
