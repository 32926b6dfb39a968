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
