"""Every flag of every command given a bad value, each in its own process: one line and exit 2, or success.

The whole grid (365 cases, 11 minutes on a 2-core CPU) is marked slow; the default suite plays a
fresh sample of the quick commands' cases each run (hypothesis), and checks words in numeric flags
in-process (``test_cli.py``). A case passes when the command exits 0, or exits 2 with one line on
stderr, with no traceback, within :data:`SECONDS` (an accepted value must not hang or start work
that would run for hours).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import _leaf_commands  # tests/ is on sys.path

from fl_gym.training.cli import build_parser

SECONDS = 90
# each command at a size that finishes in seconds; a swept flag replaces its value here
BASE = {
    "train": ["train", "FLHeteroAlloc-v0", "--n-timesteps", "16", "--no-progress", "--hyperparams",
              "n_steps=16", "batch_size=16"],
    "compare": ["compare", "FLHeteroAlloc-v0", "--policies", "fedavg", "--rounds", "2", "--seeds", "0",
                "--no-progress"],
    "generalise": ["generalise", "FLHeteroAlloc-v0", "--policies", "fedavg", "--scenario-seeds", "0",
                   "--seeds", "0", "--no-progress"],
    "flower": ["flower", "FLLearningRate-v0", "--policy", "fedavg", "--rounds", "1"],
    "bench": ["bench", "--sections", "engine", "--scenarios", "S1", "--repeats", "1", "--loop-repeats", "1",
              "--threads", "1"],
    "benchmark run": ["benchmark", "run", "--tasks", "hetero-drift", "--algo", "fixed", "--seeds", "1",
                      "--no-progress"],
    "benchmark report": ["benchmark", "report", "--reps", "100"],
    "benchmark tasks": ["benchmark", "tasks"],
    "data describe": ["data", "describe", "digits", "--clients", "5"],
    "fedavg": ["fedavg", "--rounds", "2", "--clients", "4"],
    "demo": ["demo", "--steps", "64", "--episodes", "1", "--accuracy-rounds", "1"],
}
# commands whose cases answer in seconds (Flower, a benchmark run, train and the demo take longer)
QUICK = ("compare", "generalise", "bench", "benchmark report", "benchmark tasks", "data describe", "fedavg")
BAD = {int: ["-1", "0", "1000000000000"], float: ["-1", "0", "nan", "inf", "1e12"],
       str: ["", "../escape", "/proc/nope/x", "nosuch"]}


def _cases(commands: tuple[str, ...] = tuple(BASE)) -> list[list[str]]:
    """Every flag of ``commands`` with each bad value of its type, the rest of the command as in BASE."""
    cases = []
    for path, parser in _leaf_commands(build_parser()):
        command = " ".join(path)
        if command not in commands:  # envs, data prepare and reproduce take no flags worth sweeping
            continue
        for action in parser._actions:
            if not action.option_strings or action.nargs == 0 or action.dest == "help":
                continue
            flag = action.option_strings[-1]
            for value in BAD.get(action.type, BAD[str]):
                cases.append([*_without(BASE[command], flag), flag, value])
    return cases


def _without(args: list[str], flag: str) -> list[str]:
    """``args`` without ``flag`` and its values."""
    if flag not in args:
        return list(args)
    i = args.index(flag)
    j = i + 1
    while j < len(args) and not args[j].startswith("--"):
        j += 1
    return args[:i] + args[j:]


def _misbehaves(args: list[str], folder: str) -> str | None:
    """What went wrong with ``fl-gym ARGS`` run in ``folder``, or None."""
    try:
        done = subprocess.run([sys.executable, "-m", "fl_gym.training.cli", *args], cwd=folder,
                              capture_output=True, text=True, timeout=SECONDS,
                              env={**os.environ, "FL_GYM_DATA": os.path.join(folder, "no-data")})
    except subprocess.TimeoutExpired:
        return f"no answer within {SECONDS} s"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if "Traceback" in done.stderr or done.returncode not in (0, 2):
        return f"exit {done.returncode}: {lines[-1] if lines else ''}"
    if done.returncode == 2 and len(lines) != 1:
        return f"exit 2 with {len(lines)} lines"
    return None


@pytest.mark.slow
def test_every_flag_of_every_command_with_a_bad_value_is_one_line_or_works(tmp_path):
    cases = _cases()
    assert len(cases) > 300
    folders = [tmp_path / str(i) for i in range(len(cases))]
    for folder in folders:
        folder.mkdir()
    with ThreadPoolExecutor(2) as pool:
        found = list(pool.map(lambda c: _misbehaves(*c), zip(cases, map(str, folders), strict=True)))
    assert [(" ".join(c), f) for c, f in zip(cases, found, strict=True) if f] == []


@settings(max_examples=10, deadline=None)
@given(case=st.sampled_from(_cases(QUICK)))
def test_a_sample_of_the_grid_is_one_line_or_works(case, tmp_path_factory):
    """About a minute of the slow grid, a different sample each run."""
    assert _misbehaves(case, str(tmp_path_factory.mktemp("case"))) is None, " ".join(case)
