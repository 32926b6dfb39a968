"""The ``fl-gym`` console script."""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _fedavg(args: argparse.Namespace) -> int:
    import torch

    from fl_gym import Federation, FederationConfig, PartitionConfig, RoundPlan

    torch.set_num_threads(args.threads)
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


def _bench(args: argparse.Namespace) -> int:
    from fl_gym.training.bench import SCENARIOS, engine_benchmark, engine_table

    scenarios = args.scenarios.split(",")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"--scenarios={unknown} is out of range; allowed: {', '.join(SCENARIOS)}")
    threads = [int(t) for t in args.threads.split(",")]
    results = engine_benchmark(scenarios, threads, args.device, args.repeats, args.loop_repeats,
                               progress=lambda m: print(m, file=sys.stderr))
    print(engine_table(results))
    return 0


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def _reproduce(args: argparse.Namespace) -> int:
    from fl_gym.training.hapfl_results import ResultsConfig, run

    cfg = ResultsConfig(
        dataset=args.dataset, data_root=args.data_root, out_dir=args.out or f"bench-results/hapfl-{args.dataset}",
        train_seed=args.train_seed, eval_seeds=_ints(args.eval_seeds), rounds=args.rounds,
        agents=tuple(args.agents.split(",")), acc_rounds=args.acc_rounds, acc_local_epochs=args.acc_local_epochs,
        acc_seeds=_ints(args.acc_seeds or args.eval_seeds),
        acc_policies=tuple(args.acc_policies.split(",")) if args.acc_policies else None,
        threads=args.threads, agent_steps=args.agent_steps)
    results = run(cfg, say=lambda m: print(m, file=sys.stderr, flush=True))
    from fl_gym.training.hapfl_results import report

    print(report(results))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="fl-gym", description="Federated learning as Gymnasium environments.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fedavg", help="a plain FedAvg run on the simulator, printing accuracy per round")
    p.add_argument("--dataset", default="digits")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration of the label split")
    p.add_argument("--model", default="mlp-small")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for small models)")
    p.set_defaults(func=_fedavg)
    p = sub.add_parser("bench", help="time the batched engine against the per-client loop")
    p.add_argument("--scenarios", default="S3,S4,S1,S2", help="comma-separated: S1,S2,S3,S4,S1-100,S2-100")
    p.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=7, help="timed runs of the batched engine (median)")
    p.add_argument("--loop-repeats", type=int, default=3, help="timed runs of the per-client loop (median)")
    p.set_defaults(func=_bench)
    p = sub.add_parser("reproduce", help="reproduce a paper's comparison (resumable; see docs/)")
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
    p.add_argument("--acc-policies", default=None, help="comma-separated policy labels (default: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--agent-steps", type=int, default=None, help="override every agent's training steps")
    p.set_defaults(func=_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fl-gym`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:
        print(f"fl-gym: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    sys.exit(main())
