"""Generalisation: the table's arithmetic, the CLI, and a short randomised training run evaluated held out."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest
from stable_baselines3 import PPO

from fl_gym.training.cli import main
from fl_gym.training.compare import compare
from fl_gym.training.generalisation import generalisation, markdown, summarise
from fl_gym.training.provenance import code_versions


def test_ratios_are_per_scenario_then_averaged_with_their_range():
    measured = [(1, "ref", 10.0, -1.0), (1, "a", 12.0, 2.0), (2, "ref", 20.0, -3.0), (2, "a", 20.0, 1.0)]
    rows = [{"variant": "v", "scenario_seed": s, "policy": p, "t": t, "r": r} for s, p, t, r in measured]
    table = summarise(rows, "ref", ["t", "r"])["v"]
    assert table["a"]["t"] == {"mean": 16.0, "ratio": pytest.approx((1.2 + 1.0) / 2), "min_ratio": 1.0,
                               "max_ratio": 1.2}
    assert table["ref"]["t"]["ratio"] == 1.0
    # a return: no ratio
    assert table["a"]["r"] == {"mean": 1.5, "ratio": None, "min_ratio": None, "max_ratio": None}


def test_a_generalisation_run_keeps_its_episodes_and_resumes_without_replaying_them(tmp_path, monkeypatch):
    from fl_gym.training import compare as module

    args = ("FLHetero-v0", ["oracle", "inverse"], (77, 78), None, (5,), {"rounds_per_episode": 3})
    first = generalisation(*args, out_dir=tmp_path, progress=False)
    assert len(list((tmp_path / "episodes").iterdir())) == 4  # one per (policy, scenario)

    def replayed(*_):
        raise AssertionError("a kept episode was played again")

    monkeypatch.setattr(module, "evaluate", replayed)
    assert generalisation(*args, out_dir=tmp_path, progress=False)["rows"] == first["rows"]


def test_each_scenario_row_is_what_compare_measures_there():
    variants = {"held-out": {}, "k": {"rounds_per_episode": 3}}
    results = generalisation("FLHetero-v0", ["oracle", "inverse"], (77, 78), variants, seeds=(5, 6),
                             env_kwargs={"rounds_per_episode": 4}, progress=False)
    alone = compare("FLHetero-v0", ["oracle", "inverse"], (5, 6),
                    {"rounds_per_episode": 3, "scenario_seed": 78}, progress=False)["summary"]
    row = next(r for r in results["rows"] if (r["variant"], r["scenario_seed"], r["policy"])
               == ("k", 78, "inverse"))
    assert row["sim_time"] == alone["inverse"]["sim_time"][0]
    assert row["straggling_latency"] == alone["inverse"]["straggling_latency"][0]
    assert results["summary"]["held-out"]["oracle"]["sim_time"]["ratio"] == 1.0


def test_generalise_cli_writes_tables_and_names_a_bad_reference(tmp_path, capsys):
    out = tmp_path / "g"
    code = main(["generalise", "FLHetero-v0", "--policies", "oracle,greedy", "--scenario-seeds", "5,6",
                 "--seeds", "1",
                 "--zero-shot", "preset=scale20", "--env-kwargs", "rounds_per_episode=3", "--out", str(out),
                 "--no-progress"])
    text = capsys.readouterr().out
    assert code == 0 and "## held-out" in text and "## preset=scale20" in text and "| greedy |" in text
    results = json.loads((out / "results.json").read_text())
    assert set(results["summary"]) == {"held-out", "preset=scale20"}
    assert results["code"]["fl_gym"] == code_versions()["fl_gym"]  # what the numbers were computed with
    assert main(["generalise", "FLHetero-v0", "--policies", "greedy", "--reference", "oracle"]) == 2
    assert "reference" in capsys.readouterr().err


@pytest.mark.parametrize("env_id,policies", [("FLHetero-v0", "oracle,greedy"), ("FLAggregate-v0", "fedavg")])
@pytest.mark.parametrize("argv,message", [
    (["--zero-shot", "preset=nosuch"], "variant 'preset=nosuch': preset='nosuch' is out of range"),
    (["--scenario-seeds", "-1"], "--scenario-seeds='-1' is out of range"),
    (["--scenario-seeds", ""], "--scenario-seeds='' is out of range"),  # not the default seeds
    (["--metrics", ""], "--metrics='' is out of range"),  # not the default metrics
])
def test_bad_variants_and_scenario_seeds_are_named_before_any_episode(env_id, policies, argv, message, capsys,
                                                                       monkeypatch, tmp_path):
    """On every family: ``--reference`` defaults to the first policy, so the line names the actual mistake."""
    from fl_gym.training import generalisation as module

    def no_episode(*args, **kwargs):
        raise AssertionError("an episode ran before the arguments were checked")

    monkeypatch.setattr(module, "compare", no_episode)
    assert main(["generalise", env_id, "--policies", policies, "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_set_agent_trained_on_randomised_scenarios_is_evaluated_on_held_out_ones(tmp_path, capsys):
    """The issue's end-to-end path, small: train on randomised federations, evaluate zero-shot."""
    code = main(["train", "FLHetero-v0", "--preset", "set", "--env-kwargs", "randomize_scenario=true",
                 "rounds_per_episode=8", "--n-timesteps", "2048", "--n-envs", "4", "--runs-dir",
                 str(tmp_path), "--run-id", "r", "--no-progress"])
    assert code == 0
    results = generalisation("FLHetero-v0", ["oracle", f"ppo:{tmp_path / 'FLHetero-v0' / 'r'}"], (4242,),
                             {"held-out": {}, "scale20": {"preset": "scale20"}}, seeds=(1000,),
                             env_kwargs={"rounds_per_episode": 8}, progress=False)
    for variant in ("held-out", "scale20"):  # the set agent acts on 12 clients as on 6, each ratio by hand
        agent, oracle = results["summary"][variant]["ppo:r"], results["summary"][variant]["oracle"]
        latency = agent["straggling_latency"]
        assert latency["ratio"] == pytest.approx(latency["mean"] / oracle["straggling_latency"]["mean"])
    assert {r["variant"] for r in results["rows"] if r["policy"] == "ppo:r"} == {"held-out", "scale20"}


def test_a_flat_agent_is_listed_as_unable_on_another_client_count(tmp_path):
    PPO("MlpPolicy", gym.make("FLHetero-v0"), n_steps=16, batch_size=16).save(tmp_path / "flat.zip")
    results = generalisation("FLHetero-v0", ["oracle", f"ppo:{tmp_path / 'flat.zip'}"], (9,),
                             {"held-out": {}, "big": {"preset": "scale20"}}, seeds=(1,),
                             env_kwargs={"rounds_per_episode": 2}, progress=False)
    assert "ppo:flat" in results["summary"]["held-out"] and "ppo:flat" not in results["summary"]["big"]
    assert "was trained on observations of shape (6,)" in results["unable"]["big"]["ppo:flat"]
    assert "| ppo:flat | cannot act:" in markdown(results)


def test_an_error_that_is_no_refusal_is_raised_not_listed_as_unable(monkeypatch):
    """Only a ``UserError`` (a policy that does not fit the variant) reads as "cannot act"; another
    ``ValueError`` is a bug in the policy or the env, and a table would hide it."""
    import fl_gym.training.generalisation as module

    def broken(env_id, policies, *args, **kwargs):
        if policies == ["inverse"]:
            raise ValueError("a bug")
        return compare(env_id, policies, *args, **kwargs)

    monkeypatch.setattr(module, "compare", broken)
    with pytest.raises(ValueError, match="a bug"):
        generalisation("FLHetero-v0", ["oracle", "inverse"], (9,), seeds=(1,),
                       env_kwargs={"rounds_per_episode": 2}, progress=False)


@pytest.mark.parametrize("which,kwargs,message", [
    ("compare", dict(policies="oracle"), "--policies='oracle' is out of range; allowed: a list of one"),
    ("compare", dict(policies=[]), "--policies=[] is out of range"),  # was an empty table
    ("compare", dict(seeds=(-1,)), "--seeds=(-1,) is out of range"),  # was gymnasium's Error
    ("compare", dict(seeds=(1, 1)), "--seeds=(1, 1) is out of range; allowed: a list of one or"),
    ("compare", dict(env_kwargs="x"), "env_kwargs='x' is out of range; allowed: None or a mapping"),
    # an unwritable folder failed after every episode
    ("compare", dict(out_dir="/proc/fl-gym"), "out_dir='/proc/fl-gym' cannot be written"),
    ("generalisation", dict(policies="oracle"), "--policies='oracle' is out of range"),
    ("generalisation", dict(variants="x"), "variants='x' is out of range; allowed: None or a mapping of"),
    ("generalisation", dict(variants={"v": 3}), "variants['v']=3 is out of range"),
    ("generalisation", dict(scenario_seeds=(9, 9)), "scenario_seeds=(9, 9) is out of range"),
    ("generalisation", dict(out_dir="/proc/fl-gym"), "out_dir='/proc/fl-gym' cannot be written"),
])
def test_the_python_functions_check_their_arguments_before_any_episode(which, kwargs, message, monkeypatch):
    """What the command line checks for its flags, ``compare()`` and ``generalisation()`` check too."""
    import fl_gym.training.compare as module

    monkeypatch.setattr(module, "evaluate", lambda *a, **k: pytest.fail("an episode ran"))
    run = {"compare": lambda **kw: compare("FLHetero-v0", **{"policies": ["oracle"], "seeds": (1,), **kw}),
           "generalisation": lambda **kw: generalisation(
               "FLHetero-v0", **{"policies": ["oracle"], "scenario_seeds": (9,), "seeds": (1,),
                                 "progress": False, **kw})}[which]
    with pytest.raises(ValueError, match=re.escape(message)):
        run(**kwargs)
