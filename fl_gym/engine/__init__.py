"""The client-batched training engine."""

from fl_gym.engine.algorithms import (
    SGD,
    FedDyn,
    FedProx,
    LocalAlgorithm,
    Moon,
    PFedMe,
    PFedMeConfig,
    Scaffold,
)
from fl_gym.engine.evaluate import EvalResult, evaluate_models, evaluate_stack
from fl_gym.engine.graphs import GraphedCohort
from fl_gym.engine.losses import MutualDistillation, autograd_loss, cross_entropy
from fl_gym.engine.optim import OptimizerConfig, StackOptimizer
from fl_gym.engine.schedule import BatchSchedule, local_steps, make_schedule
from fl_gym.engine.trainer import Member, TrainResult, train_cohort

__all__ = [
    "SGD", "BatchSchedule", "EvalResult", "FedDyn", "FedProx", "GraphedCohort", "LocalAlgorithm", "Member",
    "Moon", "MutualDistillation", "OptimizerConfig", "PFedMe", "PFedMeConfig", "Scaffold",
    "StackOptimizer", "TrainResult", "autograd_loss", "cross_entropy", "evaluate_models", "evaluate_stack",
    "local_steps", "make_schedule", "train_cohort",
]
