from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import shutil
import statistics
import threading
import time
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from stable_baselines3 import PPO

from fl_gym.agents.ppo import make_env
from fl_gym.training import runs
from fl_gym.training.cli import main, parse_kv
from fl_gym.validation import MAX_COPIES, MAX_SEED, UserError

TINY = ["--hyperparams", "n_steps=16", "batch_size=16", "n_epochs=1", "--no-progress"]


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_envs_lists_every_id(capsys):
    code, out, _ = run_cli(["envs"], capsys)
    assert code == 0
    for env_id in ("FLHetero-v0", "FLHeteroAlloc-v0", "FLHeteroIntensity-v0", "FLToy-v0"):
        assert f"{env_id}:" in out
    assert "MultiDiscrete([2 2 2 2 2 2])" in out and "oracle" in out and "recipes:     hapfl" in out
    # a family registered from outside the package
    assert "# toy: a toy family" in out and "fastest-half" in out


def test_version_names_the_release_and_the_code_results_record(capsys):
    import importlib.metadata
    import platform

    import fl_gym
    from fl_gym.training.provenance import code_versions

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    code = code_versions()
    assert capsys.readouterr().out == (
        f"fl-gym {fl_gym.__version__} (code {code['fl_gym']}, torch {torch.__version__}, numpy "
        f"{np.__version__}, Python {platform.python_version()})\n")
    # the installed metadata's version is the package's own (one source: fl_gym.__version__)
    assert importlib.metadata.version("fl-gym") == fl_gym.__version__


def test_runs_that_share_a_tensorboard_folder_log_under_their_own_names(tmp_path, capsys):
    for run_id in ("a", "b"):
        assert run_cli(["train", "FLHeteroAlloc-v0", "--n-timesteps", 16, "--runs-dir", tmp_path, "--run-id",
                        run_id, "--tensorboard-log", tmp_path / "tb", *TINY], capsys)[0] == 0
    logs = sorted(p.name for p in (tmp_path / "tb").iterdir())
    assert logs == ["FLHeteroAlloc-v0-a_1", "FLHeteroAlloc-v0-b_1"]  # not FLHeteroAlloc-v0_1 and _2
    recipe = runs.RunConfig("FLHetero-v0", algo="hapfl", tensorboard_log=str(tmp_path / "tb"))
    assert runs._log_name(recipe, tmp_path / "FLHetero-v0" / "r7" / "ppo1", "FLHeteroAlloc-v0") == \
        "FLHeteroAlloc-v0-r7"  # a stage's log names the run, not the stage's subfolder


def test_train_writes_a_complete_run(tmp_path, capsys):
    code, out, _ = run_cli(["train", "FLHeteroAlloc-v0", "--n-timesteps", 64, "--runs-dir", tmp_path,
                            "--run-id", "r1", "--save-freq", 32, *TINY], capsys)
    assert code == 0
    folder = tmp_path / "FLHeteroAlloc-v0" / "r1"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["timesteps"] == 64 and summary["episodes"] == 0
    assert (folder / "model.zip").is_file() and (folder / "config.yml").is_file()
    assert list((folder / "monitor").rglob("*.monitor.csv")) and (folder / "tb").is_dir()
    assert [p.name for p in (folder / "checkpoints").iterdir()] == ["model_32_steps.zip"]
    cfg = runs.load_run(folder)
    # YAML block + override
    assert cfg.hyperparams["n_steps"] == 16 and cfg.hyperparams["learning_rate"] == 0.02
    code, out, _ = run_cli(["train", "--resume", folder, "--no-progress"], capsys)
    assert code == 0 and "already complete" in out


def test_comparing_a_run_that_has_not_finished_names_its_latest_checkpoint(tmp_path, capsys, monkeypatch):
    folder = runs.create_run_dir(runs.RunConfig("FLHeteroAlloc-v0"), tmp_path / "run")
    compare = ["compare", "FLHeteroAlloc-v0", "--policies", f"ppo:{folder}", "--out", tmp_path / "cmp"]
    code, _, err = run_cli(compare, capsys)
    assert code == 2 and err.endswith(f"(the run has not finished and has no checkpoint yet; fl-gym train "
                                      f"--resume {folder})\n")
    from fl_gym.training import callbacks

    def interrupt(self):
        if self.model.num_timesteps >= 40:
            raise KeyboardInterrupt
        return True

    monkeypatch.setattr(callbacks.FLMetricsCallback, "_on_step", interrupt)
    train = ["train", "FLHeteroAlloc-v0", "--n-timesteps", 96, "--runs-dir", tmp_path, "--run-id", "cut",
             "--save-freq", 16, *TINY]
    assert run_cli(train, capsys)[0] == 130
    cut = tmp_path / "FLHeteroAlloc-v0" / "cut"
    code, _, err = run_cli([*compare[:3], f"ppo:{cut}", *compare[4:]], capsys)
    assert code == 2 and (f"(the run has not finished: pass its latest checkpoint, ppo:{cut}/checkpoints/"
                          f"model_32_steps.zip (after 32 steps), or finish the run with fl-gym train "
                          f"--resume {cut})") in err


def test_resume_after_interruption_matches_an_uninterrupted_run(tmp_path, capsys, monkeypatch):
    args = ["train", "FLHeteroAlloc-v0", "--n-timesteps", 96, "--runs-dir", tmp_path, "--save-freq",
            32, *TINY, "--env-kwargs", "rounds_per_episode=8"]
    assert run_cli([*args, "--run-id", "whole"], capsys)[0] == 0
    whole = PPO.load(tmp_path / "FLHeteroAlloc-v0" / "whole" / "model.zip")

    from fl_gym.training import callbacks

    original = callbacks.FLMetricsCallback._on_step

    def interrupt(self):
        if self.model.num_timesteps >= 56:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(callbacks.FLMetricsCallback, "_on_step", interrupt)
    code, _, err = run_cli([*args, "--run-id", "cut"], capsys)
    folder = tmp_path / "FLHeteroAlloc-v0" / "cut"
    assert code == 130 and f"fl-gym train --resume {folder}" in err
    assert not (folder / "model.zip").exists()
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["model_32_steps.zip"]
    monkeypatch.setattr(callbacks.FLMetricsCallback, "_on_step", original)
    seeds = []
    monkeypatch.setattr(runs, "make_env", lambda env_id, n, seed, *a, **k: seeds.append(seed) or make_env(
        env_id, n, seed, *a, **k))
    code, _, _ = run_cli(["train", "--resume", folder, "--no-progress"], capsys)
    assert code == 0
    assert seeds == [runs.session_seed(0, 32)]  # fresh episodes, not the first session's
    resumed = PPO.load(folder / "model.zip")
    assert resumed.num_timesteps == whole.num_timesteps == 96
    assert len(list((folder / "monitor").iterdir())) == 2  # one Monitor folder per session
    counts = [json.loads((f / "summary.json").read_text())["episodes"]
              for f in (folder, folder.parent / "whole")]
    assert counts == [12, 12]  # the episodes replayed after the checkpoint are counted once


def _sessions(folder: Path, *starts: int) -> None:
    """Monitor folders of sessions that started after ``starts`` steps, as ``_train_stage`` names them."""
    for i, done in enumerate(starts):
        (folder / "monitor" / f"s{i}-from{done}").mkdir(parents=True)


def test_a_resumed_session_draws_fresh_seeds_away_from_the_evaluation_seeds():
    assert runs.session_seed(7, 0) == 7  # from step 0: the run replays an uninterrupted one
    resumed = [runs.session_seed(seed, done) for seed in (0, 7) for done in (32, 10000, 20000)]
    assert len(set(resumed)) == 6  # fresh per seed and checkpoint
    assert all(10**5 < s <= MAX_SEED - MAX_COPIES for s in resumed)  # was seed + done: 10000 on


def test_the_seeds_a_run_trained_on_count_its_resumed_sessions_stages_and_imitation(tmp_path):
    plain = runs.RunConfig("FLHeteroAlloc-v0", seed=5, n_envs=4)
    assert runs.seeds_trained_on(plain) == {5, 6, 7, 8}
    _sessions(tmp_path / "plain", 0, 10000)  # resumed from the 10,000-step checkpoint
    s = runs.session_seed(5, 10000)
    assert runs.seeds_trained_on(plain, tmp_path / "plain") == {5, 6, 7, 8, s, s + 1, s + 2, s + 3}
    imitating = runs.RunConfig("FLHeteroAlloc-v0", hyperparams={"imitate": "uniform", "imitate_episodes": 3},
                               n_envs=2)
    assert runs.seeds_trained_on(imitating) == {0, 1, 2, 3, 4}  # demonstrations from seed + n_envs
    assert len(runs.seeds_trained_on(runs.RunConfig("FLHeteroAlloc-v0", hyperparams={"imitate": "uniform"},
                                                    n_envs=2))) == 2 + 64  # the default episodes
    recipe = runs.RunConfig("FLHetero-v0", algo="hapfl", hyperparams={"ppo1": {"n_envs": 3}, "ppo2": {}},
                            seed=10, n_envs=2)
    _sessions(tmp_path / "recipe" / "ppo2", 0, 50)
    # stage i seeded seed + i, with its block's copies (else the run's): ppo1 10-12, ppo2 11-12 and its
    # session resumed after 50 steps
    r = runs.session_seed(11, 50)
    assert runs.seeds_trained_on(recipe, tmp_path / "recipe") == {10, 11, 12, r, r + 1}
    # an unfinished stage resumes from its latest checkpoint: that session's copies count before it starts
    (tmp_path / "recipe" / "ppo1" / "checkpoints").mkdir(parents=True)
    with zipfile.ZipFile(tmp_path / "recipe" / "ppo1" / "checkpoints" / "model_300_steps.zip", "w") as z:
        z.writestr("data", "{}")
    c = runs.session_seed(10, 300)
    assert runs.seeds_trained_on(recipe, tmp_path / "recipe") == {10, 11, 12, r, r + 1, c, c + 1, c + 2}
    (tmp_path / "recipe" / "ppo1" / "model.zip").write_bytes(b"")  # finished: no session resumes it
    assert runs.seeds_trained_on(recipe, tmp_path / "recipe") == {10, 11, 12, r, r + 1}


def test_compare_warns_when_evaluation_seeds_trained_a_resumed_run(tmp_path):
    from fl_gym.training.compare import policy_spec

    folder = runs.create_run_dir(runs.RunConfig("FLHeteroAlloc-v0", n_envs=4), tmp_path / "run")
    _sessions(folder, 0, 10000)
    (folder / "model.zip").write_bytes(b"not a model")
    s = runs.session_seed(0, 10000)
    with pytest.warns(UserWarning, match=rf"evaluation seeds \[3, {s + 1}\] were used to train"), \
            pytest.raises(ValueError, match="is not an SB3 model"):
        policy_spec(f"ppo:{folder}", "FLHeteroAlloc-v0", eval_seeds=(3, s + 1, 10000))


def test_a_run_trained_by_other_code_is_reused_with_a_warning(tmp_path, capsys, monkeypatch):
    """After an upgrade a run's model was scored, and its checkpoints trained on, with no word of it."""
    from fl_gym.training import provenance
    from fl_gym.training.compare import policy_spec

    assert run_cli(["train", "FLHeteroAlloc-v0", "--n-timesteps", 64, "--runs-dir", tmp_path, "--run-id", "r",
                    "--save-freq", 32, *TINY], capsys)[0] == 0
    folder = tmp_path / "FLHeteroAlloc-v0" / "r"
    assert runs.trained_by(folder) == [provenance.code_versions()]
    uses = (lambda: runs.train(folder, progress=False, say=lambda _: None),
            lambda: policy_spec(f"ppo:{folder}", "FLHeteroAlloc-v0", eval_seeds=(10**6,)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for use in uses:  # this code's run: reused quietly
            use()
    upgraded = {**provenance.code_versions(), "fl_gym": "another"}
    monkeypatch.setattr(provenance, "code_versions", lambda: upgraded)
    for use in uses:
        with pytest.warns(UserWarning, match=rf"run {re.escape(str(folder))} was trained by other code "
                                             r"\(\{'fl_gym': '[0-9a-f]{16}'.*delete the run folder"):
            use()


def test_the_code_a_run_was_trained_by_is_its_sessions_that_left_steps(tmp_path):
    from fl_gym.atomic import write_json

    def checkpoint(folder, steps):
        (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(folder / "checkpoints" / f"model_{steps}_steps.zip", "w") as z:
            z.writestr("data", "{}")

    folder = tmp_path / "run"
    _sessions(folder, 0, 0, 32)  # the first session stopped before its first checkpoint; the third resumed
    for i, code in ((0, "a"), (1, "b")):  # the third, from before sessions recorded their code
        write_json(folder / "monitor" / f"s{i}-from0" / "code.json", {"fl_gym": code})
    checkpoint(folder, 32)
    assert runs.trained_by(folder) == [{"fl_gym": "b"}]  # the third has left no step yet
    checkpoint(folder, 64)
    assert runs.trained_by(folder) == [{"fl_gym": "b"}, None]
    _sessions(folder / "ppo1", 0)  # a recipe's finished stage
    write_json(folder / "ppo1" / "monitor" / "s0-from0" / "code.json", {"fl_gym": "c"})
    (folder / "ppo1" / "model.zip").write_bytes(b"")
    assert runs.trained_by(folder) == [{"fl_gym": "b"}, None, {"fl_gym": "c"}]


@pytest.mark.parametrize("text,message", [("env_id: [unclosed", "does not parse as YAML"),
                                          ("env_id: FLHeteroAlloc-v0\nbogus: 1\n",
                                           "key='bogus' is out of range"),
                                          ("env_id: \udcff", "does not parse as YAML: 'utf-8' codec")])
def test_resume_of_a_damaged_config_is_one_line(tmp_path, capsys, text, message):
    (tmp_path / "config.yml").write_bytes(text.encode(errors="surrogateescape"))  # \udcff: the byte 0xff
    code, _, err = run_cli(["train", "--resume", tmp_path, "--no-progress"], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_lost_worker_is_one_line_saying_how_to_go_on(tmp_path, monkeypatch, capsys):
    """A worker killed by the out-of-memory killer ended ``train`` with a ``WorkerLost`` traceback."""
    from fl_gym.envs.sharded import WorkerLost

    def killed(*args, **kwargs):
        raise WorkerLost("worker process 7 of this vector env has ended (exit code -9), and its copies with "
                         "it (close() the env; a new one starts afresh)")

    monkeypatch.setattr(runs, "train", killed)
    code, _, err = run_cli(["train", "FLAggregate-v0", "--n-timesteps", 64, "--runs-dir", tmp_path,
                            "--run-id", "r", "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("fl-gym: error: worker process 7 of this vector env has ended (exit code -9)")
    assert err.strip().endswith(f"continue with: fl-gym train --resume {tmp_path / 'FLAggregate-v0' / 'r'}")
    for pipe, vec_env in ((EOFError, "subproc"), (BrokenPipeError, "subproc"), (EOFError, "batched")):
        def closed(*args, error=pipe, **kwargs):  # SB3's SubprocVecEnv: the killed worker's end of its pipe
            raise error()

        monkeypatch.setattr(runs, "train", closed)
        argv = ["train", "FLAggregate-v0", "--n-envs", 2, "--vec-env", vec_env, "--n-timesteps", 64,
                "--runs-dir", tmp_path, "--run-id", f"{pipe.__name__}-{vec_env}", "--no-progress"]
        if vec_env != "subproc":  # no worker pipes of SB3's: another cause, whose traceback shows
            with pytest.raises(pipe):
                run_cli(argv, capsys)
            continue
        code, _, err = run_cli(argv, capsys)
        said = f"a worker process of SB3's SubprocVecEnv has ended ({pipe.__name__}), and its copies with it"
        assert code == 2 and err.startswith(f"fl-gym: error: {said}; continue with: fl-gym train --resume ")
    from fl_gym.training import compare

    monkeypatch.setattr(compare, "evaluate", killed)  # any other command
    code, _, err = run_cli(["compare", "FLAggregate-v0", "--policies", "fedavg", "--seeds", 1, "--rounds", 1,
                            "--out", tmp_path / "c", "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("what the command finished is kept, and a resumable command goes on from it "
                                "when run again")


@pytest.fixture(scope="module")
def stored_runs():
    """What ``config.yml`` holds for a plain run and for a recipe's, as ``train`` writes it."""
    return {algo: dataclasses.asdict(runs.resolve("FLHetero-v0", algo)) for algo in ("ppo", "hapfl")}


@pytest.mark.parametrize("algo,edit,message", [
    ("ppo", dict(env_id="FLNope-v0"), "env_id='FLNope-v0' is not registered"),
    ("ppo", dict(seed="abc"), "seed='abc' is out of range; allowed: an integer"),
    ("ppo", dict(seed=-5), "seed=-5 is out of range"),
    ("ppo", dict(n_envs=0), "n_envs=0 is out of range"),
    ("ppo", dict(vec_env="nope"), "vec_env='nope' is out of range"),
    ("ppo", dict(algo="nope"), "algo='nope' is out of range"),
    ("ppo", dict(env_kwargs=5), "env_kwargs=5 is out of range; allowed: a mapping of a string to any value"),
    ("ppo", dict(save_freq=-3), "save_freq=-3 is out of range"),
    ("ppo", dict(total_timesteps=0), "total_timesteps=0 is out of range"),
    ("ppo", dict(hyperparams={"n_steps": "abc"}), "hyperparameter n_steps='abc' is out of range"),
    ("hapfl", dict(hyperparams={}), "hyperparams={} is out of range; allowed: a block for each stage"),
    ("hapfl", dict(hyperparams={"ppo1": 1, "ppo2": {}}), "hyperparams.ppo1=1 is out of range"),
])
def test_resume_of_a_config_edited_out_of_range_is_one_line_naming_the_file(
        tmp_path, capsys, stored_runs, algo, edit, message):
    """``config.yml`` is checked as the flags that made it were, before anything trains."""
    (tmp_path / "config.yml").write_text(yaml.safe_dump({**stored_runs[algo], **edit}))
    code, _, err = run_cli(["train", "--resume", tmp_path, "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{tmp_path / 'config.yml'}: {message}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yml"]


@pytest.mark.parametrize("text,message", [("env_id: [unclosed", "does not parse as YAML"),
                                          ("", "config.yml is damaged; expected a mapping")])
def test_compare_of_a_run_with_a_damaged_config_is_one_line(tmp_path, capsys, text, message):
    """The run's config is read as ``train --resume`` reads it, before the model loads."""
    (tmp_path / "config.yml").write_text(text)
    (tmp_path / "model.zip").write_bytes(b"not read")
    code, _, err = run_cli(["compare", "FLHeteroAlloc-v0", "--policies", f"ppo:{tmp_path}", "--rounds", 2,
                            "--out", tmp_path / "cmp", "--no-progress"], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("env_id,algo,extra", [
    ("FLHetero-v0", "recurrent-ppo", []), ("FLHeteroAlloc-v0", "maskable-ppo", []),
    ("FLSelect-v0", "ppo", []), ("FLSelectPick-v0", "maskable-ppo", []),
    ("FLSelect-v0", "recurrent-ppo", []),  # MultiBinary: sb3-contrib's int8 actions failed the first update
    ("FLSelectQueue-v0", "ppo", ["--env-kwargs", "server_data_fraction=0.1", "allow_server_data=true"]),
    ("FLAggregate-v0", "ppo", []), ("FLLearningRate-v0", "ppo", []),
    ("FLHeteroAlloc-v0", "ppo", ["--n-envs", 2, "--vec-env", "subproc"]),
    ("FLAggregate-v0", "ppo", ["--n-envs", 2, "--vec-env", "batched"]),
])
def test_other_algorithms_and_vec_envs(env_id, algo, extra, tmp_path, capsys):
    code, _, err = run_cli(["train", env_id, "--algo", algo, "--n-timesteps", 32, "--runs-dir", tmp_path,
                            "--run-id", "r", *extra, *TINY], capsys)
    assert code == 0, err
    folder = tmp_path / env_id / "r"
    assert (folder / "model.zip").is_file()
    assert list((folder / "tb").rglob("events.out.tfevents.*"))
    code, out, _ = run_cli(["compare", env_id, "--policies", f"{algo}:{folder}", "--seeds", 10000,
                            "--rounds", 3, "--out", tmp_path / "cmp", "--no-progress"], capsys)
    assert code == 0 and f"{algo}:{folder.name}" in out
    # given as another algorithm's, a model loads and is labelled as what trained it, in its run folder or
    # alone (a PPO model alone as recurrent-ppo: was SB3's AttributeError, as maskable-ppo: its ValueError)
    lonely = tmp_path / "lonely.zip"
    shutil.copy(folder / "model.zip", lonely)
    other = "recurrent-ppo" if algo == "ppo" else "ppo"
    for given, label in ((folder, folder.name), (lonely, "lonely")):
        code, out, err = run_cli(["compare", env_id, "--policies", f"{other}:{given}", "--seeds", 10000,
                                  "--rounds", 3, "--out", tmp_path / f"cmp-{label}", "--no-progress"], capsys)
        assert code == 0 and f"| {algo}:{label} " in out, err


def test_a_model_of_another_algorithm_is_refused_by_name(tmp_path, capsys):
    from stable_baselines3 import DQN

    dqn = tmp_path / "dqn.zip"
    DQN("MlpPolicy", gym.make("FLSelect-v0", action_encoding="discrete")).save(dqn)
    code, _, err = run_cli(["compare", "FLSelect-v0", "--policies", f"ppo:{dqn}", "--env-kwargs",
                            "action_encoding=discrete", "--out", tmp_path / "cmp"], capsys)
    assert code == 2 and err.strip() == (f"fl-gym: error: policy 'ppo:{dqn}': {dqn} holds no policy of ppo, "
                                         "recurrent-ppo, maskable-ppo; allowed: a model file as fl-gym train "
                                         "writes it")


@pytest.fixture(scope="module")
def dual_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    assert main(["train", "FLHetero-v0", "--algo", "hapfl", "--preset", "fast", "--n-timesteps", "512",
                 "--runs-dir", str(folder), "--run-id", "hapfl", "--no-progress"]) == 0
    return folder / "FLHetero-v0" / "hapfl"


def test_dual_agent_run(dual_run):
    assert all((dual_run / name).is_file() for name in ("ppo1/model.zip", "ppo2/model.zip", "recipe.json",
                                                          "summary.json"))
    assert json.loads((dual_run / "summary.json").read_text())["timesteps"] == 512


def test_compare_writes_parseable_tables_and_plots(dual_run, tmp_path, capsys):
    policies = f"uniform,oracle,hapfl:{dual_run}"
    code, out, _ = run_cli(["compare", "FLHetero-v0", "--policies", policies, "--seeds", "10000,10001",
                            "--rounds", 5, "--out", tmp_path, "--no-progress"], capsys)
    assert code == 0
    results = json.loads((tmp_path / "results.json").read_text())
    labels = ["uniform", "oracle", "hapfl:hapfl"]  # run paths shortened to their last component
    assert list(results["summary"]) == labels and results["seeds"] == [10000, 10001]
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["policy"] for r in rows] == labels
    assert float(rows[1]["straggling_latency_mean"]) < float(rows[0]["straggling_latency_mean"])
    assert (tmp_path / "round_time.png").stat().st_size > 1000 and (tmp_path / "sim_time.png").is_file()
    md = (tmp_path / "results.md").read_text()
    assert all(p in md for p in labels) and all(p in out for p in labels)
    code, out, _ = run_cli(["compare", "FLHetero-v0", "--policies", f"ppo:{dual_run}", "--seeds", "10000",
                            "--rounds", 2, "--out", tmp_path / "same", "--no-progress"], capsys)
    assert code == 0 and "ppo:hapfl" in out  # a recipe folder composes under any algorithm prefix


def test_compare_runs_each_baseline_on_its_env_variant(tmp_path, capsys):
    code, out, _ = run_cli(["compare", "FLHetero-v0", "--policies", "uniform,fedavg,pfedme",
                            "--seeds", "10000", "--rounds", 3, "--out", tmp_path, "--no-progress"], capsys)
    assert code == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["variants"] == {"uniform": {}, "fedavg": {"algorithm": "fedavg"},
                                   "pfedme": {"algorithm": "pfedme", "pfedme_overhead": 5.0}}
    time = {p: results["summary"][p]["sim_time"][0] for p in ("uniform", "fedavg", "pfedme")}
    assert time["fedavg"] < time["uniform"] < time["pfedme"]  # no LiteModel epochs; pFedMe's 5 inner passes


def test_compare_with_accuracy_plots(tmp_path, capsys, monkeypatch):
    from fl_gym.training import compare, plots

    titles = []

    def plot_bands(*args, **kwargs):
        titles.append(args[3])
        return plots.plot_bands(*args, **kwargs)

    monkeypatch.setattr(compare, "plot_bands", plot_bands)
    code, _, _ = run_cli(["compare", "FLHetero-v0", "--policies", "greedy", "--seeds", "10000", "--rounds", 2,
                          "--env-kwargs", "backend=torch", "local_epochs=1", "--out", tmp_path,
                          "--no-progress"],
                         capsys)
    assert code == 0 and (tmp_path / "accuracy.png").is_file() and (tmp_path
                                                                    / "accuracy_vs_time.png").is_file()
    assert "accuracy_mean" in (tmp_path / "results.csv").read_text()
    assert "large model acc." in (tmp_path / "results.md").read_text()
    assert titles and all(t.endswith(", one seed") for t in titles)  # not "mean of 1 seeds"


def test_data_describe(tmp_path, capsys):
    png = tmp_path / "hist.png"
    code, out, _ = run_cli(["data", "describe", "digits", "--partition", "dirichlet", "--alpha", 0.3,
                            "--clients", 10, "--out", png], capsys)
    assert code == 0 and png.stat().st_size > 1000
    assert out.count("\n") >= 13 and "H(bits)" in out


@pytest.mark.parametrize("command", [["data", "describe", "digits"], ["reproduce", "hetero", "--rounds", 0]])
def test_a_data_root_the_embedded_data_set_does_not_read_is_said(command, tmp_path, capsys):
    """--data-root with digits changed nothing, without a word; reproduce warns before a check fails."""
    with pytest.warns(UserWarning, match=f"--data-root {tmp_path} is not read: digits is embedded"):
        run_cli([*command, "--data-root", tmp_path, "--out", tmp_path / "out.png"], capsys)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # without the flag, no word
        run_cli([*command, "--out", tmp_path / "out.png"], capsys)


def test_bench_engine_section(capsys):
    code, out, _ = run_cli(["bench", "--sections", "engine", "--scenarios", "S3", "--threads", 1,
                            "--repeats", 1, "--loop-repeats", 1], capsys)
    assert code == 0
    assert re.search(r"\| S3 \| mlp-small \| 10 \| 1 \| [\d.]+ \| [\d.]+ \| [\d.]+x", out)


# a step's merged engine calls: a training, its statistics, the averages, the evaluation of the models they
# make; FedEntropy's local evaluations (soft labels) and FedEnt's probes one more each
ENGINE_CALLS = {"FLSelect-v0": 5.0, "FLAggregate-v0": 4.0, "FLLearningRate-v0": 5.0}


def test_bench_vec_section(capsys, monkeypatch):
    from fl_gym.envs.registry import FAMILIES

    monkeypatch.delitem(FAMILIES, "toy")  # registered in this process only: SubprocVecEnv's workers lack it
    code, out, _ = run_cli(["bench", "--sections", "vec", "--vec-envs", "2", "--vec-calls", "3"], capsys)
    assert code == 0
    for env_id in ("FLSelect-v0", "FLAggregate-v0", "FLLearningRate-v0"):
        # dummy, subproc, batched in one process, batched with its default workers (one here), two ratios,
        # the share of the engine calls, the bound it sets, the Python calls per copy-step
        share = re.search(rf"\| {env_id} \| 2 \| [\d,.]+ \| [\d,.]+ \| [\d,.]+ \| [\d,.]+ \(1\) \| [\d.]+ \| "
                          r"[\d.]+ \| (\d+)% \| ([\d.]+) \| ([\d,]+) \|$", out, re.M)
        assert share and 0 < int(share[1]) < 100 and float(share[2]) > 0
        assert int(share[3].replace(",", "")) > 100
        # the merged engine calls a step makes, and where the engine time goes: each kind's share, most
        # first, summing to at most the whole
        kinds = re.search(rf"^\| {env_id} \| 2 \| {share[1]}% \| ([\d.]+) \| (.+) \|$", out, re.M)
        assert float(kinds[1]) == ENGINE_CALLS[env_id]
        shares = dict(re.findall(r"(\w+) (\d+)%", kinds[2]))
        probes = {"probes"} if env_id == "FLLearningRate-v0" else set()  # FedEnt's probe gradients
        assert set(shares) == {"training", "evaluation", "statistics", "averages"} | probes
        assert sum(map(int, shares.values())) <= int(share[1]) + len(shares)  # rounded: up to 1 % each
    # the timing backend too (its vector clock), which merges no engine calls
    assert re.search(r"\| FLHetero-v0 \| 2 \| [\d,.]+ \|.* \| - \| - \| [\d,]+ \|$", out, re.M)
    # --vec-calls: each run's three most-called functions, most first
    for env_id in ("FLSelect-v0", "FLAggregate-v0", "FLLearningRate-v0", "FLHetero-v0"):
        calls = [float(c.replace(",", "")) for c in
                 re.findall(rf"^\| {env_id} \| 2 \| `[^`]+` \| ([\d,.]+) \|$", out, re.M)]
        assert len(calls) == 3 and calls == sorted(calls, reverse=True) and calls[-1] > 0
    # and every run's calls by phase: a training copy's in its round's phases and the merged engine calls
    # (FedEnt's probes only for FLLearningRate-v0); the timing backend's in its clock, outside them but
    # for the rounds its resets open
    for env_id in ("FLSelect-v0", "FLAggregate-v0", "FLLearningRate-v0", "FLHetero-v0"):
        row = re.search(rf"^\| {env_id} \| 2 \|" + r" ([\d,.]+) \|" * 6 + "$", out, re.M)
        engine, opened, probe, train, finish, rest = (float(c.replace(",", "")) for c in row.groups())
        trains = env_id != "FLHetero-v0"
        assert (engine > 0, train > 0, finish > 0) == (trains,) * 3 and opened > 0 and rest > 0
        assert (probe > 0) == (env_id == "FLLearningRate-v0")
        if not trains:
            assert opened < rest / 10


def test_bench_turns_section(capsys):
    """Only the counts above the smallest turn, only the ids that train; the device's default turn marked."""
    code, out, err = run_cli(["bench", "--sections", "turns", "--vec-envs", "1,3", "--vec-turns", "2,16",
                              "--vec-ids", "FLAggregate-v0,FLHetero-v0"], capsys)
    assert code == 0
    rows = re.findall(r"^\| (\S+) \| (\d+) \| (.+) \| ([\d,.]+) \| ([\d.]+) \|$", out, re.M)
    assert [row[:3] for row in rows] == [("FLAggregate-v0", "3", "2"),
                                         ("FLAggregate-v0", "3", "16 (default)")]
    assert rows[0][4] == "1.00" and float(rows[1][4]) > 0
    assert "FLHetero-v0 trains nothing" in err


def test_bench_turns_default_to_the_batchers_turns():
    from fl_gym.engine import batcher
    from fl_gym.training.cli import build_parser

    args = build_parser().parse_args(["bench"])
    assert args.vec_turns == f"{batcher.MERGED_COPIES},{batcher.MERGED_COPIES_GPU}"


def test_the_engine_bound_is_the_one_process_rate_over_its_engine_share_by_the_dummy_rate():
    from fl_gym.training.vec_bench import VecResult, vec_table

    rates = {"dummy": 100.0, "subproc": 150.0, "batched-1": 300.0, "batched": 450.0}
    result = VecResult("FLSelect-v0", 16, rates, workers=2, engine_share=0.5, calls=1000.0)
    assert result.engine_bound == 6.0  # 300 steps/s in 50 % of the time: 600 with no per-copy Python
    assert vec_table([result]).splitlines()[-1] == (
        "| FLSelect-v0 | 16 | 100.0 | 150.0 | 300.0 | 450.0 (2) | 4.50 | 3.00 | 50% | 6.00 | 1,000 |")


def test_engine_share_is_the_share_of_each_run_in_the_engine_calls_and_in_each_kind():
    from fl_gym.training.vec_bench import engine_share, median_shares

    class Batcher:
        engine_seconds = 0.0
        engine_kinds: dict[str, float] = {"training": 1.0}  # before the runs: not counted

    class Vec:
        batcher = Batcher()

    def run() -> None:  # 20 ms of a 40 ms run in engine calls: 15 training, 5 evaluation
        time.sleep(0.04)
        Vec.batcher.engine_seconds += 0.02
        kinds = Vec.batcher.engine_kinds
        kinds["training"] += 0.015
        kinds["evaluation"] = kinds.get("evaluation", 0.0) + 0.005

    shares: list[dict[str, float]] = []
    timed = engine_share(run, Vec(), shares)
    timed()
    timed()
    # at most half: the wall time can only be longer
    assert len(shares) == 2 and all(0.2 < s[""] <= 0.5 for s in shares)
    for s in shares:
        assert s["training"] == pytest.approx(3 * s["evaluation"]) and s["training"] + s["evaluation"] == \
            pytest.approx(s[""])
    share, kinds = median_shares(shares)
    assert share == pytest.approx(statistics.median(s[""] for s in shares))
    assert [kind for kind, _ in kinds] == ["training", "evaluation"]
    assert median_shares([]) == (pytest.approx(math.nan, nan_ok=True), ())
    assert engine_share(run, object(), shares) is run  # nothing merged: the run itself
    assert not hasattr(Vec.batcher, "synchronize")
    engine_share(run, Vec(), shares, "cuda")  # on a GPU the batcher waits for its kernels
    assert Vec.batcher.synchronize is torch.cuda.synchronize


def test_python_calls_count_each_call_of_a_run_per_copy_step():
    from fl_gym.training.vec_bench import python_calls

    def leaf() -> None:
        pass

    def run() -> None:  # 30 calls of leaf (range is a type: cProfile counts no call)
        for _ in range(30):
            leaf()

    assert python_calls(run, 10) == 3.0


def test_call_counts_name_each_function_called_with_its_calls_per_copy_step():
    from fl_gym.training.vec_bench import VecResult, busiest_table, call_counts

    def leaf() -> None:
        pass

    def run() -> None:  # 30 calls of leaf, 10 of len (a builtin), none counted for run itself
        for _ in range(10):
            leaf(), leaf(), leaf(), len(())

    counts = call_counts(run, 10)
    name = f"test_cli.py:{leaf.__code__.co_firstlineno}(leaf)"
    assert sorted(counts.items()) == [("<built-in method builtins.len>", 1.0),
                                      (next(k for k in counts if k.endswith(name)), 3.0)]
    rates = dict.fromkeys(("dummy", "subproc", "batched-1", "batched"), 1.0)
    result = VecResult("FLSelect-v0", 16, rates, busiest=(("a.py:1(f)", 1234.5), ("len", 2.0)))
    assert busiest_table([result]).splitlines()[2:] == ["| FLSelect-v0 | 16 | `a.py:1(f)` | 1,234.5 |",
                                                       "| FLSelect-v0 | 16 | `len` | 2.0 |"]


def test_calls_by_phase_count_each_call_for_the_innermost_phase_it_runs_under():
    from fl_gym.training.vec_bench import REST, VecResult, calls_by_phase, phases_table

    def inner() -> None:  # its own call and two of len
        len(()), len(())

    def outer() -> None:  # its own call, inner's three, one of len
        inner(), len(())

    def run() -> None:  # not counted itself; outer twice and one len outside every phase, per copy-step
        for _ in range(10):
            outer(), outer(), len(())

    calls = calls_by_phase(run, 10, {"outer": outer, "inner": inner})
    assert calls == {"outer": 2 * 2.0, "inner": 2 * 3.0, REST: 1.0}
    rates = dict.fromkeys(("dummy", "subproc", "batched-1", "batched"), 1.0)
    phases = (("merged engine calls", 250.5), ("open_round", 21.0), ("probe", 0.0), ("train_round", 1225.0),
              ("finish_round", 178.0), (REST, 137.9))
    table = phases_table([VecResult("FLAggregate-v0", 16, rates, phases=phases),
                          VecResult("FLHetero-v0", 16, rates)]).splitlines()
    assert table[0] == ("| env id | copies | merged engine calls | open_round | probe | train_round | "
                        "finish_round | the rest |")
    assert table[2:] == ["| FLAggregate-v0 | 16 | 250.5 | 21.0 | 0.0 | 1,225.0 | 178.0 | 137.9 |"]


def test_python_calls_of_a_vector_run_are_the_same_on_every_run_alike():
    """What the vec bench's calls column rests on: two vector envs built and stepped alike make the
    same calls, whatever the host's load."""
    from fl_gym.training.vec_bench import python_calls, stepper

    counts = []
    for _ in range(2):
        run, vec = stepper("FLSelect-v0", "batched-1", 2, 2)
        run()  # past the first steps' one-off work
        counts.append(python_calls(run, 4))
        vec.close()
    assert counts[0] == counts[1] > 100


def test_a_call_count_leaves_out_the_finalisers_of_earlier_garbage():
    """Garbage an earlier test left would be collected during the run, its finalisers counted as calls."""
    import gc

    from fl_gym.training.vec_bench import call_counts

    class Litter:
        def __del__(self):
            pass

    def work():
        for _ in range(5):  # allocations enough for the collector to run
            [[] for _ in range(1000)]

    clean = call_counts(work, 1)
    gc.collect()
    for _ in range(100):
        litter = Litter()
        litter.cycle = litter  # only the collector frees it
    del litter
    assert call_counts(work, 1) == clean and gc.isenabled()


def test_bench_vec_section_of_chosen_ids(capsys):
    code, out, _ = run_cli(["bench", "--sections", "vec", "--vec-envs", "2", "--vec-ids",
                            "FLHeteroAlloc-v0"], capsys)
    assert code == 0
    assert re.findall(r"^\| (\S+) \| 2 \|", out, re.M) == ["FLHeteroAlloc-v0"]


def test_bench_memory_section(capsys):
    code, out, _ = run_cli(["bench", "--sections", "memory", "--vec-envs", "2", "--memory-envs",
                            "FLLearningRate-v0"],
                           capsys)
    assert code == 0
    number = r" \| ([\d.-]+)"
    rows = re.findall(r"\| FLLearningRate-v0 \| (\d+) \| (\w+)" + number * 7 + r" \|", out)
    assert [(n, kind) for n, kind, *_ in rows] == [("1", "batched"), ("2", "batched"), ("2", "dummy")]
    one_peak = float(rows[0][2])
    for n, _, peak, resident, _, models, ratio, net, _ in rows:
        assert float(peak) >= float(resident) > 0  # the high-water mark bounds what is held after the steps
        # each copy holds its global model and its pending round's five probe gradients, 4,810 float32 each
        assert float(models) >= int(n) * 6 * 4810 * 4 / 2**20 - 0.005  # the table rounds to 0.01 MiB
        assert float(net) == pytest.approx((float(peak) - float(models)) / one_peak, abs=0.01)
        assert float(ratio) == pytest.approx(float(peak) / one_peak, abs=0.01)


def test_bench_memory_section_builds_its_envs_with_the_given_arguments(capsys):
    code, out, _ = run_cli(["bench", "--sections", "memory", "--vec-envs", "1", "--memory-envs",
                            "FLLearningRate-v0", "--memory-kwargs", "clients_per_round=2"], capsys)
    assert code == 0
    row = re.search(r"\| FLLearningRate-v0 \| 1 \| batched(?: \| [\d.]+){3} \| ([\d.]+) \|", out)
    models = float(row.group(1))
    # the global model and two probe gradients, not the default round's five
    assert 3 * 4810 * 4 / 2**20 - 0.005 <= models < 6 * 4810 * 4 / 2**20


def test_float_tensor_bytes_counts_each_float_storage_once_outside_the_excluded():
    from fl_gym.training.vec_bench import float_tensor_bytes

    model, data, labels = torch.zeros(10, 6), torch.zeros(100), torch.zeros(7, dtype=torch.int64)
    objects = [model, model[2:5], model.view(60), data, data[:10], labels, "not a tensor", np.zeros(50)]
    assert float_tensor_bytes(objects, exclude=(data,)) == 60 * 4  # the views share the model's storage
    assert float_tensor_bytes(objects) == 60 * 4 + 100 * 4


def test_memory_section_defaults_to_every_training_family():
    from fl_gym.training.vec_bench import training_ids

    ids = training_ids()
    assert {"FLSelect-v0", "FLAggregate-v0", "FLLearningRate-v0"} <= set(ids)
    assert "FLHetero-v0" not in ids  # the timing backend trains no model


def test_bench_ppo_section(capsys):
    code, out, _ = run_cli(["bench", "--sections", "ppo", "--ppo-steps", "64", "--ppo-envs", "2"], capsys)
    assert code == 0
    for kind in ("batched", "subproc", "dummy"):
        share = re.search(rf"\| {kind} \| [\d.]+ \| [\d.]+ \| (\d+)% \|", out)  # wall, x fastest, env share
        assert share and 0 < int(share.group(1)) < 100


def test_bench_behaviour_section_on_a_tiny_case():
    from fl_gym.training.behaviour_bench import behaviour_benchmark, behaviour_table

    results = behaviour_benchmark(progress=lambda _: None, clients=300, copies=2, repeats=1)
    assert [r.behaviour.split(" ")[0] for r in results[:3]] == ["off", "availability", "availability"]
    assert results[0].ratio == 1.0 and all(r.rate > 0 and r.ratio > 0 for r in results)
    behaving = ["FLSelect-v0", "FLSelectPick-v0", "FLSelectQueue-v0", "FLAggregate-v0"]
    assert [r.case.split(",")[0] for r in results[3:]] == [i for i in behaving for _ in "on"]  # off, then on
    assert results[4].ratio == pytest.approx(results[4].rate / results[3].rate)  # the rate against off
    assert "| against off |" in behaviour_table(results)


def test_reproduce_hetero_loads_its_data_set_before_any_agent_trains(tmp_path, capsys, monkeypatch):
    """Only the accuracy runs read the samples: a missing MNIST failed after every agent had trained."""
    from fl_gym.data import DatasetNotFoundError
    from fl_gym.training.hetero import results

    def missing(name, root=None):
        raise DatasetNotFoundError(f"dataset {name!r}: no usable files under {root}")

    monkeypatch.setattr(results, "load_dataset", missing)
    code, _, err = run_cli(["reproduce", "hetero", "--dataset", "mnist", "--data-root", tmp_path / "none",
                            "--out", tmp_path / "out"], capsys)
    assert code == 2 and f"dataset 'mnist': no usable files under {tmp_path / 'none'}" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag,runs", [(None, True), ("none", False), ("BalancedOracle;FedAvg", False)])
def test_reproduce_hetero_runs_the_accuracy_of_the_policies_named(flag, runs, tmp_path, capsys, monkeypatch):
    """--acc-policies none (docs/hapfl.md's 300k-step run) was refused as an unknown label."""
    from fl_gym.training.hetero import results

    seen = []
    monkeypatch.setattr(results, "run", lambda cfg, say: seen.append(cfg) or {})
    monkeypatch.setattr(results, "report", lambda res: "")
    extra = [] if flag is None else ["--acc-policies", flag]
    assert run_cli(["reproduce", "hetero", "--out", tmp_path, *extra], capsys)[0] == 0
    cfg = seen[0]
    assert cfg.runs_accuracy("HAPFL PPO (fast)") is runs and cfg.runs_accuracy("FedAvg") is (flag != "none")


@pytest.mark.parametrize("args,message", [
    (["train", "NoSuchEnv-v0"], "env_id='NoSuchEnv-v0' is not registered"),
    (["generalise", "NoSuchEnv-v0", "--policies", "fedavg", "--zero-shot", "num_clients=5"],  # gymnasium's
     "env_id='NoSuchEnv-v0' is not registered"),  # NameNotFound's traceback
    (["bench", "--sections", "ppo", "--ppo-env", "NoSuchEnv-v0"],
     "--ppo-env=['NoSuchEnv-v0'] is out of range"),
    (["train", "FLHetero-v0", "--hyperparams", "learning_rat=0.1"],
     "hyperparameter 'learning_rat' is not accepted"),
    (["train", "FLHetero-v0", "--hyperparams", "lr"], "--hyperparams: expected key=value, got 'lr'"),
    (["train", "FLHeteroAlloc-v0", "--env-kwargs", "num_clients_range="],  # YAML's None: the default
     "--env-kwargs: 'num_clients_range=' has no value; allowed: key=value (key=null for None)"),
    (["train", "FLHetero-v0", "--env-kwargs", "backend=jax"], "backend='jax' is out of range"),
    (["train", "FLHetero-v0", "--env-kwargs", "bogus=1"], "argument 'bogus' is not accepted"),
    (["train", "FLHetero-v0", "--preset", "turbo"], "preset='turbo'"),
    (["train", "FLHeteroAlloc-v0", "--algo", "hapfl"], "--algo='hapfl' is out of range for FLHeteroAlloc-v0"),
    (["train", "FLHeteroAlloc-v0", "--n-timesteps", "0"], "--n-timesteps=0 is out of range"),
    (["train", "FLHeteroAlloc-v0", "--n-envs", "0"], "--n-envs=0 is out of range"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "learning_rate=abc"],
     "hyperparameter learning_rate='abc'"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "n_steps=-5"], "hyperparameter n_steps=-5"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "batch_size=0"], "hyperparameter batch_size=0"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "n_steps=1000000000"],  # numpy's MemoryError: 1 TiB
     "hyperparameter n_steps=1000000000 is out of range; allowed: an integer in [1, 1,000,000] (per copy)"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "n_epochs=1000000000"], "an integer in [1, 10,000]"),
    (["train", "FLSelect-v0", "--preset", "bench-imitate", "--hyperparams", "imitate_episodes=1000000000"],
     "hyperparameter imitate_episodes=1000000000 is out of range; allowed: an integer in [1, 10,000]"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "device=cuda"],  # Python's "multiple values" TypeError
     "hyperparameter 'device' is set by fl-gym, not by a block; allowed: none (fl-gym trains agents on"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "seed=3"], "'seed' is set by fl-gym, not by a block"),
    (["train", "FLHeteroAlloc-v0", "--hyperparams", "policy_kwargs={net_arch: [1000000000000]}"],  # torch's
     "--hyperparams for FLHeteroAlloc-v0 are not accepted by ppo: "),  # RuntimeError: 292 TB of weights
    (["train", "FLHeteroAlloc-v0", "--env-kwargs", "scenario_seed=-1"], "scenario_seed=-1"),
    (["train", "FLHeteroAlloc-v0", "--env-kwargs", "scenario_seed=a"], "scenario_seed='a'"),
    (["train", "FLHeteroAlloc-v0", "--env-kwargs", "device=nope"], "device='nope'"),
    (["train", "FLHeteroAlloc-v0", "--env-kwargs", "reward_mode=r2"], "reward_mode='r2'"),
    (["compare", "FLHetero-v0", "--policies", "uniform", "--rounds", "0"], "--rounds=0 is out of range"),
    (["compare", "FLHetero-v0", "--policies", "hapfl:/nonexistent"], "no finished hapfl recipe"),
    (["demo", "--steps", "0"], "--steps=0 is out of range"),
    (["reproduce", "nosuch"], "reproduce 'nosuch' is out of range; allowed: hetero"),
    (["train", "FLHetero-v0", "--algo", "maskable-ppo"], "needs an env with action_masks()"),
    (["train", "--resume", "/nonexistent/run"], "is not a run folder"),
    (["compare", "FLHetero-v0", "--policies", "uniform,fastest"], "policy 'fastest' is not known"),
    (["compare", "FLHetero-v0", "--policies", "medium"],  # listed for the family, played at num_sizes=3 only
     "size='medium' is out of range; allowed: one of small, large (num_sizes=2; num_sizes=3 has medium)"),
    (["compare", "FLHetero-v0", "--policies", "ppo:/nonexistent/model.zip"], "no model at"),
    (["compare", "FLHetero-v0", "--policies", "dqn:x.zip"], "algorithm 'dqn' is out of range; allowed: ppo, "
                                                            "recurrent-ppo, maskable-ppo, hapfl"),
    (["compare", "FLHetero-v0", "--policies", "uniform", "--seeds", "a,b"], "--seeds='a,b' is out of range"),
    (["compare", "FLSelect-v0", "--policies", "random-drop[q=0.5,p=1]"],  # was a TypeError's traceback
     "policy 'random-drop[q=0.5,p=1]': 'p' is not one of its parameters; allowed: q, seed"),
    (["compare", "FLSelect-v0", "--policies", "random-drop[seed=-1]"],  # was numpy's ValueError's traceback
     "seed=-1 is out of range; allowed: an integer in [0, 2147483647]"),
    (["compare", "FLSelectPick-v0", "--policies", "pools[m=0]"],  # picked nobody: the env drew for it
     "m=0 is out of range; allowed: None (the env's) or an integer in [1, 20]"),
    (["compare", "FLAggregate-v0", "--policies", "fedadp[alpha=-1]"],
     "alpha=-1 is out of range; allowed: a float in (0, 100] (FedAdp: 5)"),
    (["compare", "FLSelectQueue-v0", "--policies", "cos-trim[smooth=x]"], "smooth='x' is out of range"),
    (["compare", "FLSelectPick-v0", "--policies", "pools[p_positive=2]"], "p_positive=2 is out of range"),
    (["compare", "FLAggregate-v0", "--policies", "fedadp[alpha=true]"],  # weighed as alpha 1.0
     "policy 'fedadp[alpha=true]': alpha=True is out of range; allowed: a real number (not NaN)"),
    (["compare", "FLSelectQueue-v0", "--policies", "cos-trim[k=true]"],  # trimmed one device
     "policy 'cos-trim[k=true]': k=True is out of range; allowed: an integer"),
    (["compare", "FLLearningRate-v0", "--policies", "fedavg[lr=]"],  # played the env's rate
     "policy 'fedavg[lr=]': 'lr=' has no value; allowed: key=value (key=null for None)"),
    (["compare", "FLLearningRate-v0", "--policies", "fedavg[lr=0.1,lr=0.2]"],  # played 0.2 under both
     "policy 'fedavg[lr=0.1,lr=0.2]': 'lr' is given twice; allowed: each key once"),
    (["compare", "FLLearningRate-v0", "--policies", "[lr=0.1]"],  # was "policy '' is not known"
     "policy '[lr=0.1]': expected NAME[key=value,...]"),
    (["compare", "FLLearningRate-v0", "--policies", "ppo:"],  # was "no model at model.zip" (the cwd's)
     "policy 'ppo:': PATH='' is out of range; allowed: a run folder or a model file"),
    (["data", "describe", "digits", "--alpha", "0"], "error: --alpha=0.0 is out of range"),  # was alpha=
    (["data", "describe", "digits", "--partition", "iid", "--alpha", "0.3"],
     "error: --alpha=0.3 does not apply to partition='iid'"),
    (["data", "describe", "digits", "--clients", "500"],  # the default min_size, which --min-size sets
     "error: --min-size=10 is out of range; allowed: at most len(labels)/num_clients = 2"),
    (["data", "describe", "digits", "--partition", "natural"],  # was numpy's traceback (nothing to stack)
     "--partition='natural' is out of range; allowed: 'natural' only for a data set that comes partitioned"),
    (["bench", "--sections", "gpu"], "--sections"),
    (["bench", "--sections", "ppo", "--ppo-steps", "0"], "--ppo-steps=0"),
    (["bench", "--sections", "engine", "--repeats", "0"], "--repeats=0"),
    (["bench", "--sections", "engine", "--loop-repeats", "-1"], "--loop-repeats=-1"),
    (["bench", "--sections", "engine", "--threads", "0"], "--threads='0'"),
    (["data", "describe", "digits", "--seed", "-1"], "--seed=-1"),
    (["data", "describe", "digits", "--clients", "0"], "--clients=0 is out of range"),  # was num_clients=
    (["data", "describe", "digits", "--clients", "5000"],  # was num_clients=
     "--clients=5000 is out of range; allowed: an integer from 1 to the number of samples (1438)"),
    (["fedavg", "--clients", "500"],  # was min_size=10, which fedavg has no flag for
     "--clients=500 is out of range; allowed: an integer in [1, 143] (the Dirichlet split gives each client "
     "at least 10 of the 1438 training samples of digits)"),
    (["fedavg", "--dataset", "nope"], "--dataset='nope' is out of range"),
    (["fedavg", "--seed", "-1"], "--seed=-1"),
    (["fedavg", "--model", "nope"], "--model='nope' is out of range; allowed: one of 'mlr'"),  # was models=
    (["fedavg", "--clients", "0"], "--clients=0 is out of range; allowed: an integer in [1, 1000000]"),
    (["fedavg", "--alpha", "0"], "--alpha=0.0 is out of range; allowed: a float > 0"),  # was alpha=
    (["fedavg", "--batch-size", "0"], "--batch-size=0 is out of range; allowed: an integer >= 1"),
    (["fedavg", "--epochs", "1e9"], "--epochs=1000000000.0 is out of range; allowed: a float in (0, 1000]"),
    (["fedavg", "--lr", "1e9"], "--lr=1000000000.0 is out of range; allowed: a float in (0, 100]"),
    (["bench", "--sections", "memory", "--memory-steps", "0"], "--memory-steps=0"),
    (["bench", "--sections", "memory", "--memory-kwargs", "preset"], "--memory-kwargs: expected key=value"),
    (["bench", "--sections", "memory", "--memory-envs", "FLSelect-v0,CartPole-v1"],
     "--memory-envs=['CartPole-v1']"),
    (["bench", "--sections", "vec", "--vec-ids", "FLHetero-v9"], "--vec-ids=['FLHetero-v9']"),
    (["bench", "--sections", "engine", "--ppo-env", "abc"], "--ppo-env=['abc']"),  # checked whatever runs
    (["bench", "--sections", "ppo", "--ppo-env", "FLSelect-v0,FLHetero-v0"],
     "--ppo-env='FLSelect-v0,FLHetero-v0'"),
    (["bench", "--sections", "graphs"],
     "--device='cpu' cannot run --sections graphs; allowed: a CUDA device"),
    (["bench", "--sections", "vec", "--device", "cuda:99"],
     "--device='cuda:99' is out of range; allowed: a device this machine has"),
    (["train", "FLSelect-v0", "--env-kwargs", "device=cuda:99"], "device='cuda:99' is out of range"),
    # reproduce: refused before the first section or agent runs (each took minutes to hours, then failed)
    (["reproduce", "select", "--seeds", "-1"], "--seeds='-1' is out of range"),  # was gymnasium's traceback
    (["reproduce", "select", "--agent-steps", "-1"], "--agent-steps=-1 is out of range"),
    # named --n-timesteps, a flag reproduce has not; hetero's began the run, to train for ever at its end
    (["reproduce", "select", "--agent-steps", "10000000000"], "--agent-steps=10000000000 is out of range; "
     "allowed: an integer in [0, 1000000000] (0: no agents)"),
    (["reproduce", "aggregate", "--agent-steps", "10000000000"], "--agent-steps=10000000000 is out of range"),
    (["reproduce", "hetero", "--agent-steps", "10000000000"], "--agent-steps=10000000000 is out of range; "
     "allowed: an integer in [1, 1000000000] (default: each agent's own)"),
    (["reproduce", "rates", "--agent-seeds", "x"], "--agent-seeds='x' is out of range"),
    (["reproduce", "aggregate", "--seeds", "1,1"], "--seeds='1,1' is out of range; allowed: distinct seeds"),
    (["reproduce", "hetero", "--rounds", "0"], "--rounds=0 is out of range"),
    (["reproduce", "hetero", "--out", ""], "--out='' is out of range; allowed: a folder path"),  # the default
    (["reproduce", "hetero", "--eval-seeds", "1000,3"],  # scored the agents on an episode they trained on
     "--eval-seeds='1000,3' is out of range; allowed: seeds the agents never trained on (seeds 0-8 reset "
     "their training episodes)"),
    (["reproduce", "hetero", "--eval-seeds", "8"], "--eval-seeds='8' is out of range"),  # the second stage's
    (["reproduce", "hetero", "--train-seed", "5", "--acc-seeds", "12"], "--acc-seeds='12' is out of range"),
    (["reproduce", "hetero", "--acc-seeds", ""], "--acc-seeds='' is out of range"),  # was --eval-seeds
    (["reproduce", "hetero", "--acc-policies", ""], "--acc-policies=[''] is out of range"),  # was all
    (["reproduce", "select", "--out", ""], "--out='' is out of range"),  # the working folder
    (["reproduce", "rates", "--out", "/proc/x"], "--out='/proc/x' cannot be written"),  # after the first run
    (["reproduce", "hetero", "--dataset", "nope"], "--dataset='nope' is out of range"),  # after training
    (["reproduce", "hetero", "--data-root", ""], "--data-root='' is out of range"),  # was the working folder
    (["reproduce", "hetero", "--acc-local-epochs", "-1"], "--acc-local-epochs=-1 is out of range"),
    (["reproduce", "hetero", "--acc-policies", "nope"], "--acc-policies=['nope'] is out of range; allowed: "
                                                        "labels separated by ';' among ['HAPFL PPO (fast)'"),
    (["reproduce", "hetero", "--agents", "fast,nope"],  # named preset=, without paper
     "--agents='nope' is out of range; allowed: presets among ['paper', 'fast', 'stable'] (paper: the "
     "recipe's own blocks)"),
    (["reproduce", "hetero", "--agents", " , "], "--agents='' is out of range; allowed: one or more presets"),
    (["reproduce", "hetero", "--eval-seeds", "-1"], "--eval-seeds='-1' is out of range"),
    (["reproduce", "hetero", "--threads", "0"], "--threads=0 is out of range"),
    # a name past the file system's 255 bytes was an OSError's traceback wherever a path was read
    (["train", "--resume", "y" * 300], "path 'yyyyyyyyyyyy...yy/config.yml' is out of range; allowed: a "
                                       "path the file system takes (File name too long)"),
    (["train", "FLAggregate-v0", "--run-id", "y" * 300], "allowed: a path the file system takes"),
    (["compare", "FLAggregate-v0", "--policies", f"ppo:{'y' * 300}"], "y/recipe.json' is out of range"),
    (["compare", "FLSelect-v0", "--policies", "fedavg", "--env-kwargs", f"availability_trace={'y' * 300}"],
     "path 'yyyyyyyyyyyy...yyyyyyyyyyyyy' is out of range"),
    (["compare", "FLAggregate-v0", "--policies", "fedavg", "--runs-dir", "y" * 300],
     "--runs-dir='yyy"),  # named, as a folder that cannot be written is
])
def test_user_mistakes_print_one_line_and_exit_2(args, message, capsys, tmp_path):
    code, out, err = run_cli([*args, *(["--runs-dir", tmp_path] if args[0] == "train" else [])], capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("config.yml"))  # nothing half-created


@pytest.mark.parametrize("args,message", [
    (["rates", "--agent-seeds", "3"], "--agent-seeds='3' is out of range; allowed: seeds the agents never "
                                      "trained on (seeds 0-3 reset their training episodes)"),
    (["aggregate", "--agent-seeds", "1000,2"], "--agent-seeds='1000,2' is out of range"),
    (["select", "--seeds", "10000,1"], "--seeds='10000,1' is out of range"),  # the agents' evaluation seeds
])
def test_reproduce_refuses_agent_evaluation_seeds_the_agents_train_on_before_any_section(args, message,
                                                                                          capsys, tmp_path):
    code, _, err = run_cli(["reproduce", *args, "--agent-steps", 64, "--out", tmp_path], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no section ran, no agent folder was made


def test_a_resumable_folder_keeps_the_settings_of_its_results(tmp_path):
    from fl_gym.training.sections import claim

    kwargs = {"dataset": "digits"}
    claim(tmp_path, {"--seeds": (0, 1), "--env-kwargs": kwargs, "--target": None})
    recorded = (tmp_path / "settings.json").read_text()
    claim(tmp_path, {"--seeds": [0, 1], "--env-kwargs": kwargs, "--target": None})  # a tuple as read back
    assert (tmp_path / "settings.json").read_text() == recorded
    with pytest.raises(UserError) as err:
        claim(tmp_path, {"--seeds": (0,), "--env-kwargs": kwargs, "--target": 0.9})
    assert str(err.value) == (f"--out={str(tmp_path)!r} holds results of other settings (--seeds=[0, 1] "
                              "there, [0] here; --target=None there, 0.9 here); allowed: the settings "
                              "recorded in its settings.json (to resume it), or another --out")
    assert (tmp_path / "settings.json").read_text() == recorded  # the refused run changed nothing


def test_of_runs_started_at_once_into_one_folder_only_those_of_its_settings_go_on(tmp_path):
    """``reproduce`` runs with other flags into one ``--out``, started together: one set of flags goes on."""
    from fl_gym.training.sections import claim

    start, outcomes = threading.Barrier(6), {}

    def run(seeds):
        start.wait()
        try:
            claim(tmp_path, {"--seeds": seeds})
            outcomes.setdefault("claimed", []).append(seeds)
        except UserError:
            outcomes.setdefault("refused", []).append(seeds)

    threads = [threading.Thread(target=run, args=([i % 2],)) for i in range(6)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing was there before them: nothing to warn of
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    recorded = json.loads((tmp_path / "settings.json").read_text())["--seeds"]
    assert outcomes["claimed"] == [recorded] * 3 and outcomes["refused"] == [[1 - recorded[0]]] * 3


def test_a_folder_of_results_from_before_the_settings_record_is_claimed_with_a_warning(tmp_path):
    from fl_gym.training.sections import claim

    (tmp_path / "ddfl").mkdir()
    with pytest.warns(UserWarning, match="holds results from before fl-gym recorded their settings"):
        claim(tmp_path, {"--seeds": [0]})
    (tmp_path / "new").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        claim(tmp_path, {"--seeds": [0]})  # recorded now: nothing to say
        claim(tmp_path / "new", {"--seeds": [0]})  # an empty folder: a new run
    assert (tmp_path / "new" / "settings.json").is_file()


@pytest.mark.parametrize("family,first,second,message", [
    ("select", ["--seeds", "0"], [], "--seeds=[0] there, [10000, 10001, 10002] here"),
    ("select", [], ["--env-kwargs", "dataset=synthetic"],
     "--env-kwargs={} there, {'dataset': 'synthetic'} here"),
    ("rates", ["--agent-steps", "64"], [], "--agent-steps=64 there, 0 here"),
    ("aggregate", [], ["--paper-scale"], "--paper-scale=False there, True here"),
    ("hetero", [], ["--acc-rounds", "5"], "--acc-rounds=20 there, 5 here"),
    ("hetero", [], ["--dataset", "synthetic"], "--dataset='digits' there, 'synthetic' here"),
])
def test_reproduce_refuses_a_folder_that_holds_results_of_other_settings(family, first, second, message,
                                                                         tmp_path, capsys):
    """A rerun read the folder's finished sections back: seeds 10000-10002 reported seed 0's table."""
    from fl_gym.training.hetero import results as hetero
    from fl_gym.training.learning import results as learning
    from fl_gym.training.sections import claim
    from fl_gym.training.select import results as select

    checked = {"select": select.checked_config, "hetero": hetero.checked_config,
               "rates": lambda argv: learning.checked_config("rates", argv),
               "aggregate": lambda argv: learning.checked_config("aggregate", argv)}[family]
    claim(tmp_path, checked([*first, "--out", str(tmp_path)]).settings())  # what the first run recorded
    code, _, err = run_cli(["reproduce", family, *second, "--out", tmp_path], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # nothing ran


def test_demo_refuses_a_folder_whose_agents_trained_other_steps(tmp_path, capsys):
    """A rerun with --steps 80000 reused the 40,000-step agents and printed them as 80,000-step ones."""
    from fl_gym.training.sections import claim

    claim(tmp_path, {"--steps": 40000})
    code, _, err = run_cli(["demo", "--out", tmp_path, "--steps", 80000], capsys)
    assert code == 2 and "--steps=40000 there, 80000 here" in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_reproduce_counts_the_session_that_will_resume_an_agent(tmp_path, capsys):
    folder = tmp_path / "agents" / "FLSelect-v0" / "ppo"
    runs.create_run_dir(runs.RunConfig("FLSelect-v0", n_envs=4, total_timesteps=40000), folder)
    (folder / "checkpoints").mkdir()
    with zipfile.ZipFile(folder / "checkpoints" / "model_10000_steps.zip", "w") as z:
        z.writestr("data", "{}")
    s = runs.session_seed(0, 10000)
    code, _, err = run_cli(["reproduce", "select", "--agent-steps", 40000, "--out", tmp_path, "--seeds",
                            f"10000,{s + 3}"], capsys)
    assert code == 2 and f"--seeds='10000,{s + 3}' is out of range" in err and f"{s}-{s + 3}" in err


@pytest.mark.parametrize("args", [["train", "--env", "FLSelect-v0"], ["bench", "--section", "vec"]])
def test_an_option_is_never_abbreviated(args, capsys):
    """A prefix is an unknown option, not the option it starts: ``--env`` would bind its value to
    ``--env-kwargs``."""
    with pytest.raises(SystemExit) as exited:
        main(args)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"unrecognized arguments: {args[1]}" in err


@pytest.mark.parametrize("command",
                         [["train", "FLAggregate-v0"], ["compare", "FLAggregate-v0", "--policies", "fedavg"],
                          ["fedavg"], ["benchmark", "tasks"]])
@pytest.mark.parametrize("threads", ["0", "-1", "100000"])
def test_threads_out_of_range_is_one_line(command, threads, capsys):
    assert main([*command, "--threads", threads]) == 2
    err = capsys.readouterr().err
    assert f"--threads={threads} is out of range" in err and len(err.strip().splitlines()) == 1


def test_parse_kv_types():
    assert parse_kv(["a=1", "b=0.5", "c=true", "d=[1, 2]", "e=digits"], "x") == {
        "a": 1, "b": 0.5, "c": True, "d": [1, 2], "e": "digits"}
    parsed = parse_kv(["lr=3e-4", "n=1e9", "m=-2E+3", "k=1e", "v=1.5e-2"], "x")
    assert parsed == {"lr": 3e-4, "n": 1e9, "m": -2000.0, "k": "1e", "v": 0.015}
    assert all(isinstance(parsed[k], float) for k in ("lr", "n", "m", "v"))
    # the last was played, under a label naming both ("fedavg[lr=0.1,lr=0.2]")
    with pytest.raises(ValueError, match="^x: 'lr' is given twice; allowed: each key once$"):
        parse_kv(["lr=0.1", " lr = 0.2"], "x")


def test_demo_end_to_end(tmp_path, capsys):
    code, out, _ = run_cli(["demo", "--out", tmp_path, "--steps", 256, "--episodes", 2, "--accuracy-rounds",
                            2], capsys)
    assert code == 0
    assert (tmp_path / "hetero" / "compare-timing" / "results.md").is_file()
    assert (tmp_path / "hetero" / "compare-accuracy" / "accuracy.png").is_file()
    assert "oracle" in out and "hapfl:hapfl" in out and "fedprox" in out
    assert (tmp_path / "select" / "compare" / "accuracy_vs_uploads.png").is_file() and "fedentropy" in out
    assert (tmp_path / "rates" / "compare" / "accuracy.png").is_file() and "fedent" in out
    assert (tmp_path / "aggregate" / "compare" / "results.md").is_file() and "fedadp" in out


def test_reproduce_select_writes_every_section_and_resumes(tmp_path, capsys):
    args = ["reproduce", "select", "--out", tmp_path, "--seeds", "10000", "--env-kwargs",
            "rounds_per_episode=4", "--agent-steps", 240]
    assert run_cli(args, capsys)[0] == 0
    report = (tmp_path / "report.md").read_text()
    for part in ("## fedentropy", "## matched", "## x-fedentropy", "## ddfl", "random-drop[q=",
                 "scaffold+fedentropy",
                 "moon+fedentropy", "## ppo-FLSelectPick-v0", "## ppo-FLSelectQueue-v0", "ppo:ppo",
                 "rounds to target"):
        assert part in report
    stamp = (tmp_path / "ddfl" / "results.json").stat().st_mtime
    assert run_cli(args, capsys)[0] == 0 and (tmp_path / "ddfl" / "results.json").stat().st_mtime == stamp


@pytest.mark.parametrize("family,kwargs,sections", [
    ("rates",
     ["dataset=digits", "model=mlp-small", "rounds_per_episode=2", "validation_size=50", "num_clients=20",
      "clients_per_round=5"],
     ["## mnist-pathological", "## mnist-dirichlet", "fedavg[lr=0.03]", "feddyn", "decay", "fedent"]),
    ("aggregate",
     ["dataset=digits", "model=mlp-small", "rounds_per_episode=2", "validation_size=50",
      "samples_per_client=50"],
     ["## mnist-5iid-5oneclass", "## mnist-mlr", "## fmnist-5iid-5oneclass", "fedadp", "fedcos"]),
])
def test_reproduce_learning_families_write_every_section(tmp_path, capsys, family, kwargs, sections):
    args = ["reproduce", family, "--out", tmp_path, "--seeds", "0", "--env-kwargs", *kwargs]
    if family == "rates":  # and one agent, with the plot of its decisions
        args += ["--agent-steps", 160, "--agent-seeds", "1000"]
    assert run_cli(args, capsys)[0] == 0
    report = (tmp_path / "report.md").read_text()
    for part in [*sections, "rounds to target"]:
        assert part in report
    if family == "rates":
        assert "## ppo-small" in report and (tmp_path / "ppo-small" / "decisions.png").is_file()
        assert "## FedEnt's closed form, mnist-pathological" in report and "| 2 |" in report


@pytest.mark.parametrize("family", ["rates", "aggregate"])
def test_reproduce_sections_and_target_are_chosen_and_a_preset_is_refused(tmp_path, capsys, family):
    kwargs = ["dataset=digits", "model=mlp-small", "rounds_per_episode=2", "validation_size=50"]
    kwargs += ["num_clients=20", "clients_per_round=5"] if family == "rates" else ["samples_per_client=50"]
    section = "mnist-dirichlet" if family == "rates" else "mnist-mlr"
    args = ["reproduce", family, "--out", tmp_path, "--seeds", "0", "--sections", section, "--target", 0.3,
            "--env-kwargs", *kwargs]
    assert run_cli(args, capsys)[0] == 0
    report = (tmp_path / "report.md").read_text()
    assert f"## {section}" in report and report.count("\n## ") <= 2  # the section (and FedEnt's log)
    assert json.loads((tmp_path / section / "results.json").read_text())["summary"]["fedavg"]["reached"]
    code, _, err = run_cli(["reproduce", family, "--out", tmp_path, "--env-kwargs", "preset=small"], capsys)
    assert code == 2 and "--env-kwargs preset='small' is out of range" in err
    code, _, err = run_cli(["reproduce", family, "--out", tmp_path, "--sections", "nosuch"], capsys)
    assert code == 2 and "--sections=['nosuch']" in err
    code, _, err = run_cli(["reproduce", family, "--out", tmp_path, "--target", 2], capsys)  # not "None or"
    assert code == 2 and err == "fl-gym: error: --target=2.0 is out of range; allowed: a float in (0, 1]\n"


def test_compare_refuses_a_bad_target_in_the_flags_words_before_making_its_folder(tmp_path, capsys):
    args = ["compare", "FLAggregate-v0", "--policies", "fedavg", "--seeds", "0", "--target", 0]
    code, _, err = run_cli([*args, "--runs-dir", tmp_path], capsys)
    assert code == 2 and err == "fl-gym: error: --target=0.0 is out of range; allowed: a float in (0, 1]\n"
    assert list(tmp_path.iterdir()) == []


def test_rounds_to_target_by_hand():
    from fl_gym.training.compare import _to_target
    from fl_gym.training.evaluation import Episode

    def episode(accs, seconds=1.0):
        return Episode(0, rewards=[0.0] * len(accs),
                       rounds=[{"accuracy": a, "sim_time": seconds * (t + 1)} for t, a in enumerate(accs)])

    stats = _to_target([episode([0.2, 0.6, 0.7], 2.0), episode([0.1, math.nan, 0.55], 0.5),
                        episode([0.1, 0.2, 0.3])], 0.5)
    assert stats["rounds_to_target"][0] == 3.0  # median of 2, 3 and a miss (censored: infinite)
    assert stats["time_to_target"][0] == 4.0  # median of 2 x 2 s, 3 x 0.5 s and a miss
    assert stats["reached"][0] == pytest.approx(2 / 3)
    stats = _to_target([episode([0.6]), episode([0.1]), episode([0.2])], 0.5)
    # under half
    assert math.isnan(stats["rounds_to_target"][0]) and stats["reached"][0] == pytest.approx(1 / 3)
    assert _to_target([episode([0.9])], None) == {}


def test_compare_keeps_every_seeds_curve(tmp_path):
    from fl_gym.training.compare import compare

    results = compare("FLAggregate-v0", ["fedavg"], (10000, 10001), {"rounds_per_episode": 3}, progress=False)
    assert results["code"]["torch"] == torch.__version__  # what the numbers were measured with
    curves = results["series"]["fedavg"]["accuracy"]
    assert np.asarray(curves["per_seed"]).shape == (2, 3)
    np.testing.assert_allclose(np.mean(curves["per_seed"], axis=0), curves["mean"])


def test_an_interrupted_compare_resumes_with_the_policies_it_finished(tmp_path, capsys, monkeypatch):
    from fl_gym.training import compare as module

    played, evaluate = [], module.evaluate

    def counted(make_env, make_policy, seeds, rounds):
        played.append(seeds)
        if len(played) == 2 and interrupt:
            raise KeyboardInterrupt
        return evaluate(make_env, make_policy, seeds, rounds)

    monkeypatch.setattr(module, "evaluate", counted)
    args = ["compare", "FLAggregate-v0", "--policies", "fedavg,fedadp", "--seeds", "1,2", "--rounds", 2,
            "--out", tmp_path, "--no-progress"]
    interrupt = True
    code, _, err = run_cli(args, capsys)
    assert code == 130 and f"continue with the same command and --out {tmp_path}" in err
    assert len(list((tmp_path / "episodes").iterdir())) == 1 and not (tmp_path / "results.json").exists()
    interrupt = False
    assert run_cli(args, capsys)[0] == 0
    assert len(played) == 3  # fedavg, fedadp interrupted, fedadp: fedavg's episodes were read back
    whole = tmp_path / "whole"
    assert run_cli([*args[:-3], "--out", whole, "--no-progress"], capsys)[0] == 0
    assert (json.loads((tmp_path / "results.json").read_text())["summary"]
            == json.loads((whole / "results.json").read_text())["summary"])
    played.clear()  # other seeds: nothing kept applies
    assert run_cli([*args[:4], "--seeds", "1,3", *args[6:]], capsys)[0] == 0 and len(played) == 2


def test_episodes_kept_by_other_code_are_played_again(tmp_path, monkeypatch):
    """A folder of kept episodes outlives an upgrade: the old code's numbers are not mixed with the new's."""
    from fl_gym.training import compare as module
    from fl_gym.training import provenance

    played, evaluate = [], module.evaluate
    monkeypatch.setattr(module, "evaluate", lambda *args: played.append(1) or evaluate(*args))
    run = lambda: module.compare("FLAggregate-v0", ["fedavg"], (1,), rounds=2, out_dir=tmp_path,  # noqa: E731
                                 progress=False)
    run()
    run()
    assert len(played) == 1
    upgraded = {**provenance.code_versions(), "fl_gym": "another"}
    monkeypatch.setattr(provenance, "code_versions", lambda: upgraded)
    run()
    assert len(played) == 2


@pytest.mark.parametrize("episodes", [[1], [{"seed": 1}], "abc"])
def test_kept_episodes_edited_out_of_shape_are_played_again(tmp_path, monkeypatch, episodes):
    from fl_gym.training import compare as module

    played, evaluate = [], module.evaluate
    monkeypatch.setattr(module, "evaluate", lambda *args: played.append(1) or evaluate(*args))
    run = lambda: module.compare("FLAggregate-v0", ["fedavg"], (1,), rounds=2, out_dir=tmp_path,  # noqa: E731
                                 progress=False)
    first = run()["summary"]
    [kept] = [p for p in tmp_path.rglob("*.json") if "episodes" in json.loads(p.read_text())]
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "episodes": episodes}))
    assert run()["summary"] == first and len(played) == 2
    assert len(json.loads(kept.read_text())["episodes"]) == 1  # written again whole


def test_a_finished_section_of_other_code_is_kept_with_a_warning(tmp_path, monkeypatch):
    """A reproduction resumed after an upgrade mixed the old code's sections with the new code's, unsaid."""
    from fl_gym.training import provenance, sections

    def run():
        return sections.section(tmp_path, "s", "FLAggregate-v0", ["fedavg"], (1,), {"rounds_per_episode": 2},
                                lambda _: None)

    run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = run()  # read back from the same code, quietly
    upgraded = {**provenance.code_versions(), "fl_gym": "another"}
    monkeypatch.setattr(provenance, "code_versions", lambda: upgraded)
    with pytest.warns(UserWarning, match=r"/s was computed by other code .*delete it to compute them again"):
        assert run() == kept
    (tmp_path / "s" / "results.json").write_text("[]")  # another tool's: the tables failed on it
    with pytest.raises(UserError, match=r"/s/results.json is damaged \(no 'summary'\)"):
        run()


def test_code_versions_digest_every_source_file_of_the_package(tmp_path, monkeypatch):
    from fl_gym.training import provenance as module

    module.code_versions.cache_clear()
    before = module.code_versions()
    assert len(before["fl_gym"]) == 16 and before["torch"] == torch.__version__
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "rule.py").write_text("X = 1\n")
    fake = type("Spec", (), {"submodule_search_locations": [str(package)]})
    monkeypatch.setattr(module.importlib.util, "find_spec", lambda name: fake)
    module.code_versions.cache_clear()
    one = module.code_versions()["fl_gym"]
    (package / "sub" / "rule.py").write_text("X = 2\n")  # a rule edited in a subfolder
    module.code_versions.cache_clear()
    assert module.code_versions()["fl_gym"] not in (one, before["fl_gym"])
    module.code_versions.cache_clear()


def test_code_versions_agree_between_a_checkout_and_an_installed_copy(tmp_path, monkeypatch):
    """The files were hashed in the order of their paths, which differ between the two layouts."""
    from fl_gym.training import provenance as module

    def layout(root, installed):  # a checkout holds fl_gym.envs in envs/, an installed copy in fl_gym/envs/
        folders = {name: root / ("fl_gym/" if installed and name != "fl_gym" else "")
                   / name.removeprefix("fl_gym.") for name in module.PACKAGES}
        for name, folder in folders.items():
            (folder / "sub").mkdir(parents=True, exist_ok=True)
            (folder / "sub" / "rule.py").write_text(f"NAME = {name!r}\n")
            (folder / "z.py").write_text("Z = 1\n")
        return {name: type("Spec", (), {"submodule_search_locations": [str(folder)]})
                for name, folder in folders.items()}

    digests = []
    for installed in (False, True):
        specs = layout(tmp_path / str(installed), installed)
        monkeypatch.setattr(module.importlib.util, "find_spec", specs.get)
        module.code_versions.cache_clear()
        digests.append(module.code_versions()["fl_gym"])
    module.code_versions.cache_clear()
    assert digests[0] == digests[1]


def test_kept_episodes_of_a_model_retrained_in_place_are_not_reused(tmp_path):
    from fl_gym.training.compare import policy_spec

    folder = runs.create_run_dir(runs.RunConfig("FLHeteroAlloc-v0"), tmp_path / "run")
    model = PPO("MlpPolicy", gym.make("FLHeteroAlloc-v0"), n_steps=8, batch_size=8)
    model.save(folder / "model.zip")
    before = policy_spec(f"ppo:{folder}", "FLHeteroAlloc-v0").files
    model.learn(8).save(folder / "model.zip")
    assert policy_spec(f"ppo:{folder}", "FLHeteroAlloc-v0").files not in ("", before)


def test_a_checkpoint_is_played_with_its_runs_arguments_and_seeds(tmp_path):
    """A residual agent's checkpoint was played on the plain env: scored as another policy, unwarned."""
    from fl_gym.training.compare import policy_spec

    kwargs = {"residual_policy": "oracle"}
    run = runs.RunConfig("FLHeteroIntensity-v0", env_kwargs=kwargs, n_envs=2)
    folder = runs.create_run_dir(run, tmp_path / "r")
    model = PPO("MlpPolicy", gym.make("FLHeteroIntensity-v0", **kwargs), n_steps=8, batch_size=8)
    checkpoint = folder / "checkpoints" / "model_8_steps.zip"
    model.save(checkpoint)
    with pytest.warns(UserWarning, match=r"evaluation seeds \[1\] were used to train"):
        spec = policy_spec(f"ppo:{checkpoint}", "FLHeteroIntensity-v0", (1, 9))
    assert spec.env_kwargs == kwargs
    # labelled by run and file: another run's checkpoint of the same step was the same "ppo:model_8_steps"
    assert spec.label == "ppo:r/checkpoints/model_8_steps"
    model.save(folder / "model.zip")
    assert policy_spec(f"ppo:{folder / 'model.zip'}", "FLHeteroIntensity-v0", (9,)).label == "ppo:r"


def test_fixed_policy_kwargs_in_a_compare_spec(tmp_path, capsys):
    code, out, _ = run_cli(["compare", "FLSelect-v0", "--policies", "random-drop[q=0.5,seed=3]",
                            "--seeds", 10000, "--rounds", 2, "--out", tmp_path, "--no-progress"], capsys)
    assert code == 0 and "random-drop[q=0.5,seed=3]" in out
    code, _, err = run_cli(["compare", "FLSelect-v0", "--policies", "random-drop[q=2]", "--rounds", 2,
                            "--no-progress", "--out", tmp_path], capsys)
    assert code == 2 and "q=2 is out of range" in err


def test_policies_split_at_commas_outside_brackets_and_lose_surrounding_spaces():
    from fl_gym.training.cli import split_policies
    from fl_gym.training.compare import policy_spec

    assert split_policies("fedavg, random-drop[q=0.5, seed=3] ,ppo:runs/x") == [
        "fedavg", "random-drop[q=0.5, seed=3]", "ppo:runs/x"]  # " fedavg" was a policy not known
    assert split_policies(" , ,") == []
    assert policy_spec("random-drop[q=0.5, seed=3]", "FLSelect-v0").label == "random-drop[q=0.5, seed=3]"


def test_comma_separated_flags_lose_the_spaces_around_their_items(capsys):
    """``--vec-ids "FLSelect-v0, FLAggregate-v0"`` named ' FLAggregate-v0' as not registered."""
    from fl_gym.training.cli import _registered_ids, split_list

    assert split_list(" vec, memory ,") == ["vec", "memory"]
    assert _registered_ids("FLSelect-v0, FLAggregate-v0", "--vec-ids") == ["FLSelect-v0", "FLAggregate-v0"]
    assert parse_kv(["lr = 0.1", " preset=small"], "--env-kwargs") == {"lr": 0.1, "preset": "small"}
    assert main(["bench", "--sections", "engine, nope"]) == 2  # the known section passes, the other is named
    assert "--sections=['nope'] is out of range" in capsys.readouterr().err
    for flag in ("--sections", "--scenarios"):  # nothing to run was [''] and refused: it still is
        assert main(["bench", *(["--sections", "engine"] if flag == "--scenarios" else []), flag, " , "]) == 2
        assert f"{flag}=[] is out of range" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["train", "FLAggregate-v0", "--run-id", "../../escaped"], "--run-id='../../escaped' is out of range"),
    (["compare", "FLAggregate-v0", "--policies", ""], "--policies='' is out of range"),
    (["compare", "FLAggregate-v0", "--policies", "fedavg", "--rounds", "31"], "--rounds=31 is out of range"),
    (["fedavg", "--rounds", "0"], "--rounds=0 is out of range"),
    (["fedavg", "--lr", "-1"], "--lr=-1.0 is out of range"),
    (["compare", "FLAggregate-v0", "--policies", "fedavg", "--seeds", "-1"], "--seeds='-1' is out of range"),
    (["bench", "--sections", "vec", "--vec-envs", "0"], "--vec-envs='0' is out of range"),
    (["bench", "--sections", "vec", "--vec-calls", "-1"], "--vec-calls=-1 is out of range"),
    (["bench", "--sections", "turns", "--vec-turns", "4,4"], "allowed: distinct copy counts in [1, 4096]"),
    (["bench", "--sections", "turns", "--vec-turns", "0"], "--vec-turns='0' is out of range"),
    # each list of counts named by its flag: the message said only "expected comma-separated integers"
    (["bench", "--sections", "turns", "--vec-turns", "16,x"], "--vec-turns='16,x' is out of range; allowed: "
     "comma-separated integers"),
    (["bench", "--sections", "vec", "--vec-envs", "4,"], "--vec-envs='4,' is out of range"),
    (["bench", "--sections", "engine", "--threads", "one"], "--threads='one' is out of range"),
    # every count steps in one turn of the smallest size: nothing to compare
    (["bench", "--sections", "turns", "--vec-envs", "1,16"],
     "--vec-envs='1,16' has no count above the smallest"),
    # '' is a mistake, not the default (the whole suite, the default folder)
    (["benchmark", "run", "--tasks", ""], "--tasks='' is out of range"),
    (["benchmark", "run", "--out", ""], "--out='' is out of range"),
    (["benchmark", "report", "--runs", ""], "--runs='' is out of range"),
    (["bench", "--sections", "vec", "--vec-ids", ""], "--vec-ids='' is out of range; allowed: registered"),
    (["benchmark", "run", "--runs-dir", ""], "--runs-dir='' is out of range"),
    (["train", "--resume", ""], "--resume='' is out of range"),
    (["train", "FLHetero-v0", "--algo", "hapfl", "--n-envs", "0"], "--n-envs=0 is out of range"),  # a recipe
    (["train", "FLAggregate-v0", "--run-id", ""], "--run-id='' is out of range"),
    (["train", "FLAggregate-v0", "--tensorboard-log", ""], "--tensorboard-log='' is out of range"),
    # a count or a median of runs that would never finish, or exhaust memory, before any work
    (["bench", "--sections", "vec", "--vec-envs", "5000"], "allowed: copy counts in [1, 4096]"),
    (["bench", "--sections", "ppo", "--ppo-envs", "10000"], "--ppo-envs=10000 is out of range"),
    (["bench", "--sections", "engine", "--repeats", "1001"], "allowed: an integer in [1, 1000]"),
    (["fedavg", "--clients", str(10**12)], "--clients=1000000000000 is out of range"),  # 931 GiB asked
    (["fedavg", "--rounds", "100001"], "--rounds=100001 is out of range; allowed: an integer in [1, 100000]"),
    (["demo", "--out", ""], "--out='' is out of range"),
    (["demo", "--episodes", str(10**12)], "--episodes=1000000000000 is out of range"),  # a MemoryError
    # before the engine
    (["bench", "--sections", "engine,vec", "--vec-envs", "0"], "--vec-envs='0' is out of range"),
    (["bench", "--sections", "engine,memory", "--memory-envs", "FLNope-v0"], "--memory-envs=['FLNope-v0']"),
    (["data", "describe", "digits", "--out", "d_noext"], "--out='d_noext' is out of range"),
])
def test_more_bad_inputs_are_one_line_before_any_work(argv, message, capsys, tmp_path):
    assert main([*argv, *(["--runs-dir", str(tmp_path)] if argv[0] == "train" else [])]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "escaped").exists()


def test_a_flag_mistake_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--n-timesteps", "abc"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err.startswith("fl-gym train: error: argument --n-timesteps: invalid int value: 'abc'")


def test_only_user_errors_are_one_line_and_traceback_shows_them(capsys, monkeypatch):
    from fl_gym.training import cli
    from fl_gym.validation import UserError

    assert run_cli(["train", "FLNope-v0"], capsys)[:1] == (2,)
    with pytest.raises(UserError, match="env_id='FLNope-v0'"):
        main(["--traceback", "train", "FLNope-v0"])

    def bug(args):
        return np.ones(2) + np.ones(3)  # a broadcasting bug is a ValueError, not the user's mistake

    monkeypatch.setattr(cli, "cmd_envs", bug)
    with pytest.raises(ValueError, match="could not be broadcast"):
        main(["envs"])


def test_ctrl_c_in_any_command_exits_130_with_one_line(capsys, monkeypatch):
    from fl_gym.training import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_envs", interrupted)
    code, _, err = run_cli(["envs"], capsys)
    assert code == 130 and err.strip() == ("fl-gym envs: interrupted; what was finished is kept (a resumable "
                                           "command continues where it stopped when run again)")


def test_sigterm_ends_a_command_as_ctrl_c_does(capsys, monkeypatch):
    """``kill`` or a batch scheduler's stop: the interrupt's line and exit, not a silent death mid-write."""
    import os
    import signal

    from fl_gym.training import cli

    def killed(args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        return 0

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(cli, "cmd_envs", killed)
    start = time.perf_counter()
    code, _, err = run_cli(["envs"], capsys)
    assert code == 130 and time.perf_counter() - start < 4
    assert err.strip().startswith("fl-gym envs: interrupted; what was finished is kept")
    assert signal.getsignal(signal.SIGTERM) is before  # the command's handler goes with it


_SWALLOWS_CTRL_C = """
import sys, time
from pathlib import Path
from fl_gym.training.cli import exit_on_interrupt, writable
out = writable(Path(sys.argv[1]) / "made", "--out")
with exit_on_interrupt("fl-gym flower: interrupted; nothing was written"):
    print("ready", flush=True)
    for _ in range(600):  # like Flower's simulation: an interrupt is swallowed and the work goes on
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass
print("finished")
"""


@pytest.mark.parametrize("flags,expected", [
    ([], "fl-gym: warning: FLSelectQueue-v0: the server holds 10% of the training data as raw samples and "
         "sends them to every device\n"),
    (["--traceback"], "UserWarning: FLSelectQueue-v0: the server holds 10%"),
])
def test_a_warning_is_one_line_naming_no_library_code(tmp_path, flags, expected):
    """Python's form added the file and the library's code line that warned (``self._setup()``)."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "fl_gym.training.cli", *flags, "compare", "FLSelectQueue-v0", "--policies",
            "queue-all", "--seeds", "0", "--rounds", "1", "--out", str(tmp_path / "out"), "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert expected in done.stderr and ("_setup()" in done.stderr) == bool(flags)


@pytest.mark.parametrize("filename,expected", [
    ("/v/lib/python3.11/site-packages/ray/_private/worker.py", "Tip (FutureWarning, from ray)\n"),
    ("/usr/lib/python3/dist-packages/six.py", "Tip (FutureWarning, from six)\n"),
    ("/v/lib/python3.11/site-packages/fl_gym/envs/base.py", "Tip (FutureWarning)\n"),  # installed as a wheel
    ("/work/fl-gym/envs/base.py", "Tip (FutureWarning)\n"),
])
def test_a_warning_of_another_package_names_it(filename, expected):
    """Ray's tips printed as ``fl-gym: warning: ...`` read as fl-gym's advice."""
    import warnings

    from fl_gym.training.cli import _warnings_in_one_line

    with _warnings_in_one_line(False):
        line = warnings.formatwarning("Tip", FutureWarning, filename, 1)
    assert line == "fl-gym: warning: " + expected


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_ctrl_c_ends_work_that_swallows_it_at_once(tmp_path, stop):
    """``fl-gym flower``'s guard: Ctrl-C (or SIGTERM) exits 130 with one line, however the library inside
    handles it."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", _SWALLOWS_CTRL_C, str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    start = time.perf_counter()
    proc.send_signal(getattr(signal, stop))
    rest, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and time.perf_counter() - start < 5
    assert err.strip() == "fl-gym flower: interrupted; nothing was written" and "finished" not in rest
    assert not out.exists()  # the empty output folders it made go


@pytest.mark.parametrize("argv", [
    ["compare", "FLHetero-v0", "--policies", "oracle", "--out", "{blocked}/out"],
    ["generalise", "FLHetero-v0", "--policies", "oracle,inverse", "--reference", "oracle", "--out",
     "{blocked}/out"],
    ["train", "FLHeteroAlloc-v0", "--runs-dir", "{blocked}/runs"],
    ["train", "FLHeteroAlloc-v0", "--runs-dir", "{ok}/runs", "--tensorboard-log", "{blocked}/tb"],
    ["benchmark", "run", "--suite", "smoke", "--algo", "fixed", "--out", "{blocked}/bench"],
    ["data", "describe", "digits", "--out", "{blocked}/h.png"],
    ["demo", "--out", "{blocked}/demo"],
])
def test_an_unwritable_output_fails_by_name_before_any_work(argv, tmp_path, capsys, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file, not a folder")
    from fl_gym.training import compare, generalisation

    def no_work(*args, **kwargs):
        raise AssertionError("the work started before the output was checked")

    monkeypatch.setattr(compare, "compare", no_work)
    monkeypatch.setattr(generalisation, "generalisation", no_work)
    code, _, err = run_cli([a.format(blocked=blocked, ok=tmp_path) for a in argv], capsys)
    flag = next(f for f in ("--tensorboard-log", "--runs-dir", "--out") if f in argv)
    assert code == 2 and f"{flag}=" in err and "cannot be written" in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").rglob("*.yml")) == []  # no run folder


def test_a_failing_command_leaves_no_empty_output_folder(tmp_path, capsys):
    (tmp_path / "run").mkdir()  # a run folder without a model
    code, _, err = run_cli(["compare", "FLAggregate-v0", "--policies", f"ppo:{tmp_path / 'run'}", "--out",
                            str(tmp_path / "new" / "out")], capsys)
    assert code == 2 and "no model at" in err
    assert not (tmp_path / "new").exists() and (tmp_path / "run").exists()  # what it made goes, nothing else


def test_a_model_file_that_is_no_model_or_of_another_env_is_refused_in_one_line(tmp_path, capsys):
    """Both raised deep in SB3: a damaged file at load, another env's model at its first predict."""
    import gymnasium as gym

    (tmp_path / "junk.zip").write_text("junk")
    PPO("MlpPolicy", gym.make("FLHetero-v0")).save(tmp_path / "hetero.zip")
    other = ("was trained on observations of shape (6,) and actions Box(-1.0, 1.0, (12,), float32); allowed: "
             "a model of this env, whose observations have shape (76,) and actions are MultiBinary(5)")
    for path, message in ((tmp_path / "junk.zip", "is not an SB3 model; allowed: a model file"),
                          (tmp_path / "hetero.zip", other)):
        code, _, err = run_cli(["compare", "FLSelect-v0", "--policies", f"ppo:{path}", "--seeds", "100",
                                "--out", str(tmp_path / "out")], capsys)
        assert code == 2 and message in err and err.count("\n") == 1


def test_a_set_policy_acts_on_another_client_count_but_not_on_another_rows_layout_or_action(tmp_path, capsys):
    """A set policy was passed without a check: another env's rows failed in ``predict`` ("observation=
    'length 73' is out of range"), another action per row in the env ("action has shape (12,)")."""
    import gymnasium as gym

    from fl_gym.agents.ppo import build_agent

    build_agent(gym.make("FLHetero-v0"), {"policy": "SetPolicy", "n_steps": 16, "batch_size": 16}).save(
        tmp_path / "hetero.zip")
    build_agent(gym.make("FLLearningRate-v0"), {"policy": "SetPolicy", "n_steps": 16, "batch_size": 16}).save(
        tmp_path / "rates.zip")
    hetero_rows = "ClientRows(width=1, globals=0, feature_major=True, per_client_action=True)"
    rates_rows = "ClientRows(width=7, globals=3, feature_major=False, per_client_action=True)"
    for env_id, model, allowed in (("FLHeteroIntensity-v0", "hetero", f"{hetero_rows} and actions are "
                                                                      "Box(-1.0, 1.0, (6,), float32)"),
                                   ("FLAggregate-v0", "rates", f"{rates_rows} and actions are "
                                                               "Box(-1.0, 1.0, (10,), float32)")):
        code, _, err = run_cli(["compare", env_id, "--policies", f"ppo:{tmp_path / model}.zip", "--seeds",
                                "100", "--rounds", "1", "--out", str(tmp_path / "out")], capsys)
        assert code == 2 and err.count("\n") == 1 and "is a set policy of client rows" in err
        assert err.endswith(f"allowed: a model of this env, whose rows are {allowed}\n")
    code, _, _ = run_cli(["compare", "FLHetero-v0", "--policies", f"ppo:{tmp_path / 'hetero.zip'}", "--seeds",
                          "100", "--rounds", "1", "--env-kwargs", "preset=scale20", "--out",
                          str(tmp_path / "big")], capsys)
    assert code == 0


def test_an_unreachable_ray_address_fails_at_once_and_leaves_no_run_folder(tmp_path, capsys):
    import socket

    from fl_gym.integrations.ray import check_address

    with socket.socket() as closed:  # a port nothing listens on: bound, never listening
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
        start = time.perf_counter()
        code, _, err = run_cli(["train", "FLAggregate-v0", "--vec-env", "ray", "--ray-address", address,
                                "--runs-dir", str(tmp_path), "--n-timesteps", "10"], capsys)
    assert code == 2 and f"--ray-address='{address}' cannot be reached" in err and err.count("\n") == 1
    assert time.perf_counter() - start < 30 and list(tmp_path.iterdir()) == []
    with socket.socket() as head:  # a listening port passes; so do local, auto and None
        head.bind(("127.0.0.1", 0))
        head.listen()
        for ok in (f"127.0.0.1:{head.getsockname()[1]}", f"ray://127.0.0.1:{head.getsockname()[1]}",
                   "local", None):
            check_address(ok)
    with pytest.raises(ValueError, match="address='nohost' is out of range"):
        check_address("nohost")
    code, _, err = run_cli(["train", "FLAggregate-v0", "--ray-address", "local", "--runs-dir",
                            str(tmp_path)], capsys)
    assert code == 2 and err.strip().endswith("--ray-address='local' is out of range; allowed: nothing with "
                                              "--vec-env batched (it is for ray)")


def test_a_run_folder_is_locked_while_it_trains_and_a_stale_lock_is_taken_over(tmp_path):
    import os
    import subprocess
    import sys

    folder = tmp_path / "run"
    folder.mkdir()
    with runs.run_lock(folder):
        assert (folder / ".lock").read_text() == str(os.getpid())
        with pytest.raises(ValueError,
                           match=f"run folder {folder} is being trained by process {os.getpid()}"):
            with runs.run_lock(folder):
                pass
    assert not (folder / ".lock").exists()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True)
    (folder / ".lock").write_text(gone.stdout.strip())  # a process that has exited
    with runs.run_lock(folder):
        assert (folder / ".lock").read_text() == str(os.getpid())
    (folder / ".lock").write_text(gone.stdout.strip())
    (folder / ".lock.takeover").write_text(gone.stdout.strip())  # it ended while taking over a stale lock
    with pytest.raises(ValueError, match=r"cannot take its lock .*\.lock; if no process trains it, remove "):
        with runs.run_lock(folder):
            pass


@pytest.mark.parametrize("left", [None, "a process that has ended"])
def test_of_trainings_of_one_folder_started_at_once_one_holds_it(tmp_path, left):
    """One of eight racers trains at a time: a lock is never seen empty (and taken for a stale one), and
    of those that find a stale lock, one takes it over (not each removing the lock the last one made)."""
    import subprocess
    import sys

    start, inside, entered, lock = threading.Barrier(8), [], [], threading.Lock()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True)

    def train_once():
        start.wait()
        try:
            with runs.run_lock(tmp_path):
                with lock:
                    inside.append(1)
                    entered.append(len(inside))
                time.sleep(0.05)
                with lock:
                    inside.pop()
        except UserError:
            pass

    for _ in range(5):
        if left:
            (tmp_path / ".lock").write_text(gone.stdout.strip())
        threads = [threading.Thread(target=train_once) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert entered and max(entered) == 1 and sorted(p.name for p in tmp_path.iterdir()) == []


def test_damaged_or_conflicting_resumes_are_named(tmp_path, capsys):
    args = ["train", "FLHeteroAlloc-v0", "--n-timesteps", 64, "--runs-dir", tmp_path, "--save-freq",
            32, *TINY]
    assert run_cli([*args, "--run-id", "r"], capsys)[0] == 0
    folder = tmp_path / "FLHeteroAlloc-v0" / "r"
    code, _, err = run_cli(["train", "--resume", folder, "--n-timesteps", 200], capsys)
    assert code == 2 and "--n-timesteps are fixed by its config.yml" in err
    code, _, err = run_cli(["train", "FLHetero-v0", "--resume", folder], capsys)
    assert code == 2 and "ENV_ID are fixed by its config.yml" in err
    (folder / "model.zip").write_bytes(b"PK\x03\x04 truncated")
    code, _, err = run_cli(["train", "--resume", folder, "--no-progress"], capsys)
    assert code == 2 and "is marked complete (summary.json) but" in err and "model.zip is damaged" in err
    (folder / "summary.json").unlink()
    code, _, err = run_cli(["train", "--resume", folder, "--no-progress"], capsys)
    assert code == 2 and "model.zip' is out of range; allowed: a whole SB3 model file" in err
    (folder / "model.zip").unlink()
    whole = (folder / "checkpoints" / "model_32_steps.zip").read_bytes()
    # newer than the whole one at 32, and cut short: zipfile took it for an archive (its torch files' end
    # records remain), and SB3's load failed with a bare AssertionError
    passed_over = r"model_64_steps.zip is damaged \(not a whole model file\); passed over"
    for damaged in (b"damaged", whole[:-100]):
        (folder / "checkpoints" / "model_64_steps.zip").write_bytes(damaged)
        with pytest.warns(UserWarning, match=passed_over):
            code, out, _ = run_cli(["train", "--resume", folder, "--no-progress"], capsys)
        assert code == 0 and "done: 64 steps" in out  # trained on from the whole checkpoint at 32
        (folder / "summary.json").unlink()
        (folder / "model.zip").unlink()
    assert run_cli(["train", "--resume", folder, "--no-progress"], capsys)[0] == 0
    (folder / "summary.json").write_text("{")
    code, _, err = run_cli(["train", "--resume", folder, "--no-progress"], capsys)
    assert code == 2 and "summary.json is damaged" in err and err.count("\n") == 1


def test_plots_name_a_line_that_another_hides_and_use_a_log_axis_for_spans_over_100x(tmp_path):
    from matplotlib import image

    from fl_gym.training import plots

    shown = plots.legend_labels({"fedavg": [1, 2, float("nan")], "fedprox": [1, 2, float("nan")],
                                 "x": [1, 3, 4]})
    assert shown == {"fedavg": "fedavg", "fedprox": "fedprox (= fedavg)", "x": "x"}
    assert plots._log_scale([[0.5, 1.0], [200.0]]) and not plots._log_scale([[0.5, 1.0], [20.0]])
    assert not plots._log_scale([[0.0, 1.0], [500.0]])  # a zero has no log
    same = {"mean": [1, 2], "std": [0, 0]}
    path = plots.plot_bands({"a": (None, same), "b": (None, same)}, "round", "y", "t", tmp_path / "p.png")
    assert image.imread(path).shape[2] in (3, 4)


def test_a_plot_over_rounds_ticks_whole_rounds_only(tmp_path, monkeypatch):
    """Five rounds were ticked 1.0, 1.5, 2.0, ...: a round 1.5 does not exist."""
    from fl_gym.training import plots

    closed = []
    monkeypatch.setattr(plots.plt, "close", closed.append)  # keep the figure to read its axis
    rounds = {"mean": [0.1, 0.2, 0.3, 0.4, 0.5], "std": [0.0] * 5}
    plots.plot_bands({"a": (None, rounds)}, "round", "accuracy", "t", tmp_path / "p.png")
    ticks = [t for t in closed[0].axes[0].get_xticks() if 1 <= t <= 5]
    assert ticks and all(float(t).is_integer() for t in ticks)


def _leaf_commands(parser, path=()):
    """Every (sub-)command's parser with its path, e.g. ``("data", "describe")``."""
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaf_commands(sub, (*path, name))
    if path and not subs:
        yield path, parser


def test_every_numeric_flag_of_every_command_refuses_a_word_in_one_line(capsys):
    """The sweep over the CLI's flags: a word where a number belongs exits 2 with one line naming the flag."""
    from fl_gym.training.cli import build_parser

    flags = [(path, action.option_strings[-1]) for path, parser in _leaf_commands(build_parser())
             for action in parser._actions if action.option_strings and action.type in (int, float)]
    assert len(flags) > 30
    for path, flag in flags:
        with pytest.raises(SystemExit) as exit_:
            main([*path, flag, "abc"])
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 2 and len(err) == 1 and flag in err[0], (path, flag, err)


class _OneSecond:
    """``datetime`` for :mod:`fl_gym.training.runs` whose clock stands still: runs started in one second."""

    class datetime:  # noqa: N801 (the module's attribute it stands in for)
        @staticmethod
        def now():
            import datetime

            return datetime.datetime(2026, 12, 1, 10, 0, 0)


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    """A sweep launched at once: the default run id takes a suffix, and each folder keeps its own config."""
    monkeypatch.setattr(runs, "datetime", _OneSecond)
    configs = [runs.RunConfig("FLSelect-v0", hyperparams={"learning_rate": lr}) for lr in (1e-3, 3e-4, 1e-4)]
    threads_start, folders = threading.Barrier(len(configs)), {}

    def start(cfg):
        threads_start.wait()
        folders[cfg.hyperparams["learning_rate"]] = runs.new_run_dir(cfg, tmp_path)

    threads = [threading.Thread(target=start, args=(cfg,)) for cfg in configs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(f.name for f in folders.values()) == ["ppo-seed0-20261201-100000",
                                                        "ppo-seed0-20261201-100000-2",
                                                        "ppo-seed0-20261201-100000-3"]
    for lr, folder in folders.items():
        assert runs.load_run(folder).hyperparams == {"learning_rate": lr}
    with pytest.raises(UserError, match="run folder .*-2 exists; pick another --run-id"):
        runs.new_run_dir(configs[0], tmp_path, "ppo-seed0-20261201-100000-2")
    assert not runs.claim_run_dir(configs[0], folders[3e-4])  # what trains a folder either way: left as it is
    assert runs.load_run(folders[3e-4]).hyperparams == {"learning_rate": 3e-4}


def test_a_file_where_the_run_folder_goes_is_named(tmp_path):
    (tmp_path / "FLSelect-v0").mkdir()
    (tmp_path / "FLSelect-v0" / "x").touch()
    with pytest.raises(UserError, match=r"run folder .*x cannot be made \(File exists: .*x\); allowed"):
        runs.new_run_dir(runs.RunConfig("FLSelect-v0"), tmp_path, "x")


@pytest.mark.parametrize("flag,value", [("--seed", 2**32), ("--n-envs", 10**12), ("--n-timesteps", 10**12)])
def test_train_refuses_a_seed_or_copy_count_out_of_range_before_a_run_folder_exists(flag, value, tmp_path,
                                                                                     capsys):
    """A seed past 2**32 failed inside SB3's seeding; 10**12 copies built envs until memory ran out;
    10**12 steps would train for years."""
    code, _, err = run_cli(["train", "FLHeteroAlloc-v0", flag, value, "--runs-dir", tmp_path, *TINY], capsys)
    assert code == 2 and f"{flag}={value} is out of range; allowed: an integer in [" in err
    assert len(err.strip().splitlines()) == 1 and not list(tmp_path.iterdir())


def test_train_refuses_a_rollout_buffer_past_the_machines_memory(tmp_path, capsys, monkeypatch):
    """numpy allocates it unwritten: it filled through the first rollout and ran out of memory hours in."""
    monkeypatch.setattr(runs, "physical_memory", lambda: 2**20)  # 1 MiB; FLHeteroAlloc-v0's copy-step: 96 B
    args = ["train", "FLHeteroAlloc-v0", "--n-envs", 2, "--runs-dir", tmp_path, *TINY]
    code, _, err = run_cli([*args, "--hyperparams", "n_steps=16384"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
    assert re.search(r"n_steps=16384 with 2 copies needs a rollout buffer of .* GiB, more than this "
                     r"machine's .* GiB; allowed: n_steps \* n_envs at most 10,922", err), err  # 2**20 // 96
    assert run_cli([*args, "--n-timesteps", 32], capsys)[0] == 0  # 16 steps of 2 copies fit


@pytest.mark.parametrize("command", [["compare", "FLHeteroAlloc-v0", "--policies", "fedavg"],
                                     ["generalise", "FLHeteroAlloc-v0", "--policies", "fedavg"],
                                     ["flower", "FLLearningRate-v0", "--policy", "fedavg"]])
@pytest.mark.parametrize("flag", ["--out", "--runs-dir"])
def test_an_empty_output_path_is_refused_not_read_as_the_working_folder(command, flag, capsys):
    code, _, err = run_cli([*command, flag, ""], capsys)
    assert code == 2 and err.strip() == f"fl-gym: error: {flag}='' is out of range; allowed: a folder path"


def _parsers(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every sub-command's parser below it, each with its command line."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


def test_every_argument_of_every_command_says_what_it_takes_in_its_help():
    """`fl-gym fedavg --help` listed ten options with no word on any of them."""
    from test_docs import REPRODUCIBLE, family_parser  # tests/ is on sys.path

    from fl_gym.training.cli import build_parser

    commands = [*_parsers(build_parser(), "fl-gym"),
                *((f"reproduce {family}", family_parser(family)) for family in REPRODUCIBLE)]
    silent = [f"{name} {action.option_strings or action.dest}"
              for name, p in commands for action in p._actions
              if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()]
    assert silent == []
    assert len(commands) > 15
