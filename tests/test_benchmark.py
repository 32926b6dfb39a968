"""The benchmark: tasks and seed rules, the fixed policies its tasks add, the pipeline end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import fl_gym  # noqa: F401
from fl_gym.baselines.aggregate import CleanWeightsPolicy
from fl_gym.baselines.rates import CleanRatePolicy
from fl_gym.baselines.select import (
    CleanKeepPolicy,
    CleanQueuePolicy,
    ConfidentPickPolicy,
    CosTrimPolicy,
    EntropyCutPickPolicy,
    EntropyCutPolicy,
    EntropyTrimPolicy,
)
from fl_gym.envs.select.spaces import PickLayout, SelectLayout
from fl_gym.training import benchmark
from fl_gym.training.benchmark.protocol import score_policy
from fl_gym.training.benchmark.tasks import (
    TRAIN_SCENARIOS,
    TUNING_SCENARIOS,
    TUNING_SEEDS,
    Task,
    all_tasks,
    suite,
)
from fl_gym.training.cli import main, parse_seed_list
from fl_gym.training.compare import policy_spec

CORE = suite("core-v1")
# the tasks of the suites with stored references
BENCHMARKED = [t for t in all_tasks().values() if "smoke" not in t.suites]
STORED = sorted({s for t in BENCHMARKED for s in t.suites})


def test_core_suite_has_a_task_on_every_registered_env_but_the_one_lever_views():
    assert {t.env_id for t in CORE} == {"FLHetero-v0", "FLSelect-v0", "FLSelectPick-v0", "FLSelectQueue-v0",
                                        "FLAggregate-v0", "FLLearningRate-v0"}


@pytest.mark.parametrize("task", all_tasks().values(), ids=lambda t: t.name)
def test_seed_sets_are_disjoint(task):
    low, high = TRAIN_SCENARIOS
    assert all(low <= s < high for s in TUNING_SCENARIOS)
    assert not any(low <= s < high for s in task.test_scenarios)
    # a run's env copies are seeded seed + i, and from seed + steps done on a resume: far below these
    assert min(task.eval_seeds) > 10 * task.budget + 1000 and min(TUNING_SEEDS) > 10 * task.budget + 1000
    assert not set(task.eval_seeds) & set(TUNING_SEEDS)


@pytest.mark.parametrize("task", BENCHMARKED, ids=lambda t: t.name)
def test_every_task_builds_passes_check_env_and_names_known_policies(task):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for split in ("test", "extrapolation"):
            check_env(gym.make(task.env_id, **task.test_kwargs(task.test_scenarios[0], split)).unwrapped)
        train = gym.make(task.env_id, **task.train_kwargs())
        train.reset(seed=0)
        assert low_high(train.unwrapped.federation.scenario_seed)
    assert [str(w.message) for w in caught if "sends them to every device" not in str(w.message)] == []
    for spec in (*task.heuristics, *(c for cands in task.tuned.values() for c in cands), *task.uppers):
        policy_spec(spec, task.env_id)  # a ValueError for a name the family does not know


@pytest.mark.parametrize("task", BENCHMARKED, ids=lambda t: t.name)
def test_every_tasks_hyperparameter_blocks_build_an_agent_that_acts(task):
    """The block of each algorithm a task names (``ppo`` and its ``algo_hyperparams``) trains on its env."""
    from fl_gym.agents.ppo import build_agent, load_hyperparams

    env = gym.make(task.env_id, **task.train_kwargs())
    obs, _ = env.reset(seed=0)
    for algo in ("ppo", *task.algo_hyperparams):
        env_id, _, preset = task.hyperparams_for(algo).partition("/")
        agent = build_agent(env, load_hyperparams(env_id, preset or None), algo, seed=0)
        assert env.action_space.contains(agent.predict(obs, deterministic=True)[0])


def test_the_algorithm_check_passes_the_blocks_a_task_names():
    """``benchmark run``'s check before any training refuses only what could not train."""
    from fl_gym.training.benchmark.protocol import check_algo

    check_algo([all_tasks()["pick-noisy"]], "recurrent-ppo")  # its own bench-lstm block
    check_algo(suite("smoke"), "ppo")
    refused = (r"^--algo='recurrent-ppo' is out of range for tasks lr-noisy \(lr-noisy: hyperparameter "
               r"policy='SetPolicy' .*; allowed: .* recurrent-ppo: pick-noisy$")
    with pytest.raises(ValueError, match=refused):
        check_algo([all_tasks()["lr-noisy"], all_tasks()["pick-noisy"]], "recurrent-ppo")


def low_high(seed: int) -> bool:
    return TRAIN_SCENARIOS[0] <= seed < TRAIN_SCENARIOS[1]


def test_normalized_score_reads_the_references():
    refs = {"aggregate-noisy": {"refs": {"test": {"ref_min": 0.80, "ref_max": 0.84}}}}
    assert benchmark.normalized_score("aggregate-noisy", 0.86, refs=refs) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="task='nosuch'"):
        benchmark.normalized_score("nosuch", 0.5, refs=refs)
    with pytest.raises(ValueError, match="split='train' is out of range; allowed: test"):
        benchmark.normalized_score("aggregate-noisy", 0.5, split="train", refs=refs)
    assert benchmark.normalized_score("aggregate-noisy", [0.80, 0.82], refs=refs) == pytest.approx([0.0, 0.5])


def _test_range(ref: object) -> dict:
    """Hand-made references of aggregate-noisy whose test split's range is ``ref``."""
    return {"aggregate-noisy": {"refs": {"test": ref}}}


@pytest.mark.parametrize("args,said", [
    (([1], 0.5), r"task=\[1\] is out of range"), (("aggregate-noisy", "x"), "value='x'"),
    (("aggregate-noisy", True), "value=True"), (("aggregate-noisy", 0.5, ["t"]), r"split=\['t'\]"),
    (("aggregate-noisy", 0.5, "test", 5), "refs=5 is out of range; allowed: None or a mapping"),
    (("aggregate-noisy", 0.5, "test", {"aggregate-noisy": 1}), r"refs\['aggregate-noisy'\]=1"),
    (("aggregate-noisy", 0.5, "test", _test_range(5)),
     r"refs\['aggregate-noisy'\]\['refs'\]\['test'\]=5 is out of range; allowed: a mapping with finite"),
    (("aggregate-noisy", 0.5, "test", _test_range({"ref_min": "a", "ref_max": 1})),
     r"\['test'\]=\{'ref_min': 'a', 'ref_max': 1\} is out of range"),
    (("aggregate-noisy", 0.5, "test", _test_range({"ref_min": True, "ref_max": 2})),
     r"\['test'\]=\{'ref_min': True"),
])
def test_normalized_score_names_a_bad_argument(args, said):
    """Each was a ``TypeError``, ``KeyError`` or ``AttributeError``, or (``True``) a score of 1."""
    with pytest.raises(ValueError, match=said):
        benchmark.normalized_score(*args)


@pytest.mark.parametrize("change,said", [
    (dict(budget="x"), "task 't': budget='x' is out of range; allowed: an integer"),  # a TypeError
    # the reference was found in the string, and the heuristics played were its letters
    (dict(heuristics="fedavg"), "task 't': heuristics='fedavg' is out of range; allowed: a tuple"),
    (dict(test_scenarios=(1.5,)), "task 't': test_scenarios=(1.5,) is out of range"),
])
def test_a_task_of_the_wrong_types_is_named(change, said):
    task = dict(name="t", env_id="FLAggregate-v0", doc="d", env_kwargs={}, budget=10, reference="fedavg",
                heuristics=("fedavg",))
    Task(**task)
    with pytest.raises(ValueError, match=re.escape(said)):
        Task(**{**task, **change})


def test_a_family_whose_tasks_entry_point_names_no_tasks_is_named(monkeypatch):
    """A wrong entry point failed where first read ('Metric' object has no attribute 'name')."""
    from fl_gym.envs.registry import FAMILIES, Family

    entry = "fl_gym.envs.registry:GENERIC_METRICS"
    monkeypatch.setitem(FAMILIES, "mine", Family("mine", "p", {}, tasks=entry))
    said = f"family 'mine': tasks={entry!r} is out of range; allowed: the entry point of a tuple of Task"
    with pytest.raises(ValueError, match=re.escape(said)):
        all_tasks()


def test_score_policy_names_a_task_that_is_not_one():
    with pytest.raises(ValueError, match=r"task=0 is out of range; allowed: a Task"):
        score_policy(0, "fedavg")


@pytest.mark.parametrize("suite_name", STORED)
def test_stored_references_cover_the_suite_and_normalise_their_own_policies(suite_name):
    refs = benchmark.stored_references(suite_name)
    assert set(refs) == {t.name for t in suite(suite_name)}
    for name, record in refs.items():
        ref = record["refs"]["test"]
        best = np.mean(record["policies"][ref["best"]]["test"])
        fedavg = np.mean(record["policies"][record["reference"]]["test"])
        assert benchmark.normalized_score(name, best) == pytest.approx(1.0)
        assert benchmark.normalized_score(name, fedavg) == pytest.approx(0.0, abs=1e-12)
        assert all(np.mean(record["policies"][spec]["test"]) <= ref["ref_max"] for spec in record["fixed"])


# ---- the fixed policies the tasks add --------------------------------------------------------


def test_entropy_trim_drops_the_most_uncertain_soft_labels():
    soft = np.array([[0.9, 0.1], [0.5, 0.5], [0.6, 0.4], [1.0, 0.0]])
    policy = EntropyTrimPolicy(SelectLayout(4, 2), k=2)
    assert policy.keep(soft, np.ones(4)).tolist() == [True, False, False, True]
    assert EntropyTrimPolicy(SelectLayout(4, 2), k=9).keep(soft, np.ones(4)).sum() == 1  # at least one kept


def test_entropy_cut_drops_every_soft_label_above_the_threshold():
    # entropies 0.469, 1, 0.971, 0 bits (c = 2)
    soft = np.array([[0.9, 0.1], [0.5, 0.5], [0.6, 0.4], [1.0, 0.0]])
    keep = {h: EntropyCutPolicy(SelectLayout(4, 2), h=h).keep(soft, np.ones(4)).tolist()
            for h in (0.99, 0.97, 0.1)}
    assert keep == {0.99: [True, False, True, True], 0.97: [True, False, False, True],
                    0.1: [False, False, False, True]}  # the least uncertain is always kept
    with pytest.raises(ValueError, match="h=0 is out of range"):
        EntropyCutPolicy(SelectLayout(4, 2), h=0)


def test_entropy_cut_pick_avoids_clients_whose_last_soft_label_looked_corrupted():
    layout = PickLayout(4, 2)
    rows = np.array([[0.5, 0.5, 1, 0.0, 1, 0, 0],  # uncertain
                     [1.0, 0.0, 1, 0.0, 1, 0, 0],  # certain
                     [0.0, 0.0, 0, 1.0, 1, 0, 0],  # never trained: counts as clean
                     [0.55, 0.45, 1, 0.0, 1, 0, 0]])  # entropy 0.993 bits
    obs = np.concatenate([rows.ravel(), np.zeros(6)])
    for seed in range(5):
        picked = EntropyCutPickPolicy(layout, m=2, h=0.95, seed=seed).pick(obs)
        assert picked.tolist() == [False, True, True, False]
        topped = EntropyCutPickPolicy(layout, m=3, h=0.95, seed=seed).pick(obs)
        assert topped.sum() == 3 and topped[1] and topped[2]


def test_confident_pick_trades_certainty_against_staleness():
    layout = PickLayout(3, 2)
    rows = np.array([[0.5, 0.5, 1, 0.0, 1, 0, 0],  # uncertain, fresh
                     [1.0, 0.0, 1, 0.0, 1, 0, 0],  # certain, fresh
                     [0.5, 0.5, 1, 0.9, 1, 0, 0]])  # uncertain, stale
    obs = np.concatenate([rows.ravel(), np.zeros(6)])
    assert ConfidentPickPolicy(layout, m=1, w=0.0).pick(obs).tolist() == [False, True, False]
    assert ConfidentPickPolicy(layout, m=1, w=2.0).pick(obs).tolist() == [False, False, True]


def test_privileged_policies_leave_out_exactly_the_noisy_clients():
    env = gym.make("FLAggregate-v0", noisy_clients=0.3, rounds_per_episode=2)
    obs, _ = env.reset(seed=0)
    noisy = env.unwrapped.federation.noisy
    action, _ = CleanWeightsPolicy(env).predict(obs)
    assert np.array_equal(action == -1, noisy) and np.all(action[~noisy] == 0)

    env = gym.make("FLSelect-v0", noisy_clients=0.3, rounds_per_episode=2)
    obs, _ = env.reset(seed=0)
    keep = CleanKeepPolicy(env).predict(obs)[0].astype(bool)
    clean = ~env.unwrapped.federation.noisy[env.unwrapped.candidate_ids]
    assert np.array_equal(keep, clean) or (not clean.any() and keep.all())

    env = gym.make("FLLearningRate-v0", noisy_clients=0.3, lr_min=0.01, rounds_per_episode=2)
    env.reset(seed=0)
    rates = CleanRatePolicy(env, lr=0.2).rates(env.unwrapped.round_stats)
    ids = env.unwrapped.round_stats.clients
    np.testing.assert_allclose(rates, np.where(env.unwrapped.federation.noisy[ids], 0.01, 0.2))

    env = gym.make("FLSelectQueue-v0", noisy_clients=0.3, rounds_per_episode=2)
    obs, _ = env.reset(seed=0)
    assert np.array_equal(CleanQueuePolicy(env).predict(obs)[0], ~env.unwrapped.federation.noisy)


def test_the_queue_envs_update_statistics_by_hand_and_the_cos_trim_filter():
    env = gym.make("FLSelectQueue-v0", noisy_clients=0.3, update_stats=True, rounds_per_episode=3)
    obs, _ = env.reset(seed=0)
    layout, seen = env.unwrapped.layout, []
    assert obs.shape == (8 * 20 + 3,) and layout.row[-2:] == ("update_cos", "mean_update_cos")
    for _ in range(2):
        angle = env.unwrapped._pending.trained.stats.update_angle
        seen.append((1 + np.cos(angle)) / 2)
        np.testing.assert_allclose(layout.column(obs, "update_cos"), seen[-1], rtol=1e-6)
        np.testing.assert_allclose(layout.column(obs, "mean_update_cos"), np.mean(seen, axis=0), rtol=1e-6)
        keep = CosTrimPolicy(env, k=3, smooth=False).predict(obs)[0]
        assert keep.sum() == 17 and np.all(seen[-1][keep == 0].max() <= seen[-1][keep == 1].min() + 1e-6)
        obs, *_ = env.step(keep)
    plain = gym.make("FLSelectQueue-v0", rounds_per_episode=3)
    assert plain.observation_space.shape == (6 * 20 + 3,)
    with pytest.raises(ValueError, match="column='mean_update_cos' is out of range"):
        CosTrimPolicy(plain)
    with pytest.raises(ValueError, match="k=20"):
        CosTrimPolicy(env, k=20)
    assert policy_spec("cos-trim", "FLSelectQueue-v0").env_kwargs == {"update_stats": True}  # compare runs it


def test_a_seeded_fixed_policy_plays_a_different_pattern_per_evaluation_seed():
    from fl_gym.training.evaluation import evaluate

    spec = policy_spec("random-drop[q=0.5]", "FLSelect-v0")
    episodes = evaluate(lambda: gym.make("FLSelect-v0", rounds_per_episode=4), spec.factory, [1, 2, 1])
    kept = [[r["select/kept_share"] for r in e.rounds] for e in episodes]
    assert kept[0] == kept[2] and kept[0] != kept[1]


# ---- the pipeline, end to end on the smoke suite ----------------------------------------------


def test_a_searched_upper_reference_takes_the_best_candidate_of_each_federation_by_hand():
    from fl_gym.training.benchmark.protocol import per_federation_best

    a = [[0.5, 0.9], [0.7, 0.9]]  # (seeds, federations): means 0.6, 0.9
    b = [[0.8, 0.1], [0.6, 0.3]]  # means 0.7, 0.2
    scores, returns = per_federation_best([a, b], [[[1, 2], [3, 4]], [[5, 6], [7, 8]]])
    assert scores == [[0.8, 0.9], [0.6, 0.9]] and returns == [[5, 2], [7, 4]]
    task = all_tasks()["lr-noisy"]
    assert len(task.uppers) > 1 and task.upper_name.startswith("best per federation of {clean[")


def test_agent_kwargs_reach_the_agents_env_alone_and_only_the_familys_may_be_given():
    base = all_tasks()["hetero-drift"]
    task = dataclasses.replace(base, agent_kwargs={"residual_policy": "oracle"})
    assert task.train_kwargs()["residual_policy"] == "oracle" and "residual_policy" not in task.test_kwargs(1)
    with pytest.raises(ValueError, match="agent_kwargs=\\['lr'\\]"):
        dataclasses.replace(base, agent_kwargs={"lr": 0.1})


def test_parse_seed_list():
    assert parse_seed_list("0-2,5", "--seeds") == (0, 1, 2, 5)
    assert len(parse_seed_list("0-9999", "--seeds")) == 10_000
    for bad in ("a", "3-1", "1,1", "-1", "0-2,5-4"):
        with pytest.raises(ValueError, match="--seeds="):
            parse_seed_list(bad, "--seeds")
    # checked before they are listed: the first filled the memory (a MemoryError's traceback)
    for bad in ("0-99999999999", "0-10000", "2147483648", "0-9998,10000-10001"):
        with pytest.raises(ValueError, match=re.escape(f"--seeds={bad!r} is out of range; allowed: distinct "
                                                       "seeds in [0, 2147483647], at most 10,000")):
            parse_seed_list(bad, "--seeds")


def test_benchmark_run_and_report_end_to_end(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["benchmark", "run", "--suite", "smoke", "--algo", "fixed", "--out", str(out)]) == 0
    refs = json.loads((out / "references.json").read_text())["smoke-aggregate"]
    assert refs["tuned"]["fedadp-alpha"]["chosen"] in ("fedadp[alpha=2]", "fedadp[alpha=10]")
    assert np.asarray(refs["policies"]["fedavg"]["test"]).shape == (2, 2)  # (evaluation seeds, federations)
    hetero = json.loads((out / "references.json").read_text())["smoke-hetero"]  # a searched upper reference
    searched = [np.array(hetero["policies"][c]["test"]) for c in ("clairvoyant", "oracle")]
    best = [max(searched, key=lambda s: s[:, f].mean())[:, f] for f in range(2)]  # per federation
    assert hetero["policies"][hetero["upper"]]["test"] == np.stack(best, axis=1).tolist()
    assert main(["benchmark", "run", "--suite", "smoke", "--algo", "ppo", "--seeds", "0-1", "--out", str(out),
                 "--no-progress"]) == 0
    with warnings.catch_warnings():  # finished runs are not redone, and they are this code's: no warning
        warnings.simplefilter("error")
        assert main(["benchmark", "run", "--suite", "smoke", "--algo", "ppo", "--seeds", "0", "--out",
                     str(out), "--no-progress"]) == 0
    assert main(["benchmark", "report", "--suite", "smoke", "--runs", str(out), "--reps", "200"]) == 0
    assert main(["benchmark", "report", "--suite", "smoke", "--runs", str(out), "--out", str(tmp_path / "r"),
                 "--reps", "200"]) == 0
    assert (tmp_path / "r" / "report.md").read_text() == (out / "report.md").read_text()
    report = json.loads((out / "report.json").read_text())
    suite_rows = report["splits"]["test"]["suite"]
    assert set(suite_rows) == {"best fixed", "reference (FedAvg)", "upper reference", "ppo"}
    assert suite_rows["best fixed"]["iqm"][0] == pytest.approx(1.0)
    assert suite_rows["reference (FedAvg)"]["iqm"][0] == pytest.approx(0.0, abs=1e-12)
    assert suite_rows["ppo"]["runs"] == 2
    ppo = next(r for r in report["splits"]["test"]["tasks"]["smoke-aggregate"] if r["method"] == "ppo")
    ref = refs["refs"]["test"]
    seeds = [np.mean(json.loads((out / "smoke-aggregate" / f"ppo-seed{s}"
                                 / "scores.json").read_text())["scores"]
                     ["test"]) for s in (0, 1)]
    assert ppo["per_run"] == pytest.approx([(v - ref["ref_min"]) / (ref["ref_max"] - ref["ref_min"])
                                            for v in seeds])
    assert f"| {ppo['normalised']:.2f} ({ppo['per_run'][0]:.2f}, {ppo['per_run'][1]:.2f}) |" in (
        out / "report.md").read_text()
    rows = report["splits"]["test"]["tasks"]["smoke-aggregate"]
    start = next(r for r in rows if r["method"] == "ppo start")
    # the imitation start of the smoke block, scored alike
    begun = [np.mean(json.loads((out / "smoke-aggregate" / f"ppo-seed{s}" / "scores.json").read_text())
                     ["start"]["scores"]["test"]) for s in (0, 1)]
    assert start["role"] == "agent's start (imitation)"
    assert start["per_run"] == pytest.approx([(v - ref["ref_min"]) / (ref["ref_max"] - ref["ref_min"])
                                              for v in begun])
    assert (out / "smoke-aggregate" / "ppo-seed0" / "imitated.zip").is_file()
    assert json.loads(report["env_specs"]["smoke-aggregate"])["id"] == "FLAggregate-v0"
    assert json.loads(report["env_specs"]["smoke-hetero"])["kwargs"]["obs_mode"] == "history"
    assert (out / "smoke-hetero" / "ppo-seed1" / "scores.json").is_file()
    for name in ("report.md", "report.csv", "profile_test.png", "profile_extrapolation.png"):
        assert (out / name).is_file()
    assert "IQM [95 % CI]" in capsys.readouterr().out
    from fl_gym.training.provenance import code_versions

    done = sorted(out.glob("*/*-seed*/scores.json"))
    this = json.dumps(code_versions(), sort_keys=True)
    assert report["codes"] == {this: len(done)} and f"scored them (runs): {this} ({len(done)})." in (
        out / "report.md").read_text()
    assert list(report["machines"].values()) == [len(done)]  # one machine, this one
    assert json.loads(next(iter(report["machines"])))["cpus"] == os.cpu_count()
    assert report["reference_codes"] == {this: len(suite("smoke"))}  # pinned above by this code
    older = {**json.loads(done[0].read_text()), "code": {"fl_gym": "older"}}  # a run scored before an upgrade
    done[0].write_text(json.dumps(older))
    with pytest.warns(UserWarning, match="its agent runs were scored by 2 codes"):
        assert main(["benchmark", "report", "--suite", "smoke", "--runs", str(out), "--reps", "200"]) == 0
    assert json.loads((out / "report.json").read_text())["codes"] == {this: len(done) - 1,
                                                                       '{"fl_gym": "older"}': 1}


def test_a_finished_run_of_other_code_is_kept_with_a_warning(tmp_path):
    """A suite resumed after an upgrade scored its runs with two codes in one report, unsaid."""
    from fl_gym.training.benchmark.protocol import run_agent
    from fl_gym.training.provenance import code_versions

    task = all_tasks()["smoke-aggregate"]
    done = tmp_path / task.name / "ppo-seed0" / "scores.json"
    done.parent.mkdir(parents=True)
    record = {"algo": "ppo", "seed": 0, "scores": {"test": [[0.5]], "extrapolation": [[0.4]]}}
    for code, said in ((code_versions(), None), ({"fl_gym": "older"}, "'older'"), (None, "not recorded")):
        done.write_text(json.dumps({**record, **({"code": code} if code else {})}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert run_agent(task, "ppo", 0, tmp_path, progress=False)["scores"] == record["scores"]
        messages = [str(w.message) for w in caught]
        if said is None:  # this code's record: read back quietly
            assert messages == []
        else:
            assert len(messages) == 1 and "was computed by other code" in messages[0] and said in messages[0]


def test_agents_run_before_the_references_say_to_pin_them_and_the_report_names_the_command(tmp_path, capsys):
    """The run said "done; fl-gym benchmark report ...", and that report then failed, naming no ``--out``."""
    out = tmp_path / "bench"
    assert main(["benchmark", "run", "--suite", "smoke", "--tasks", "smoke-hetero", "--seeds", "0",
                 "--out", str(out), "--no-progress"]) == 0
    pin = f"fl-gym benchmark run --suite smoke --algo fixed --out {out}"
    assert f"done; next: {pin}, then fl-gym benchmark report" in capsys.readouterr().out
    assert main(["benchmark", "report", "--suite", "smoke", "--runs", str(out)]) == 2
    assert f"pin them with {pin}" in capsys.readouterr().err


GOOD = {"algo": "ppo", "seed": 0, "scores": {"test": [[0.5, 0.6]], "extrapolation": [[0.4, 0.3]]}}


@pytest.mark.parametrize("edit,said", [
    (dict(seed="x"), " is damaged (algo='ppo', seed='x'; not a name and a seed)"),
    (dict(algo=5), " is damaged (algo=5, seed=0; not a name and a seed)"),
    (dict(scores=5), " is damaged (scores of split 'test' are not a list of rows of finite numbers)"),
    # the statistics read NaN as a run the task lacks: such a run was left out without a word
    (dict(scores={"test": [[0.5, float("nan")]], "extrapolation": [[0.4]]}), " is damaged (scores of split"),
    (dict(scores={"test": [[0.5]]}), " is damaged (scores of split 'extrapolation' are not"),  # a split cut
    (dict(scores={"test": [[0.5, None]], "extrapolation": [[0.4]]}), " is damaged (scores of split 'test'"),
    (dict(scores={"test": [[0.5], [0.5, 0.6]], "extrapolation": [[0.4]]}), " is damaged (scores of split"),
    (dict(scores={"test": [], "extrapolation": [[0.4]]}), " is damaged (scores of split 'test'"),
    (dict(start=5), ": start is damaged (no 'scores')"),
    (dict(start={"scores": {"test": [[True]], "extrapolation": [[0.4]]}}), ": start is damaged (scores of"),
])
def test_a_report_names_a_scores_record_edited_out_of_shape(tmp_path, capsys, edit, said):
    """Such a record failed inside the statistics, with a ``KeyError`` or ``TypeError``'s traceback."""
    from fl_gym.training.benchmark.protocol import read_record

    task = suite("core-v1")[0].name
    path = tmp_path / task / "ppo-seed0" / "scores.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(GOOD))
    assert read_record(path) == GOOD
    path.write_text(json.dumps({**GOOD, **edit}))
    assert main(["benchmark", "report", "--suite", "core-v1", "--runs", str(tmp_path), "--reps", "100"]) == 2
    assert f"{path}{said}" in capsys.readouterr().err


@pytest.mark.parametrize("suite_name", ["core-v1", "devices-v1"])
def test_every_stored_reference_has_the_shape_a_report_reads(suite_name):
    from fl_gym.training.benchmark.protocol import require_reference

    for task, record in benchmark.stored_references(suite_name).items():
        require_reference(task, record)


@pytest.mark.parametrize("edit,said", [
    (lambda r: r.update(refs={}), "refs of split 'test' are not ref_min, ref_max and a best among the"),
    (lambda r: r["refs"]["extrapolation"].update(ref_min="a"), "refs of split 'extrapolation' are not"),
    (lambda r: r["refs"]["test"].update(best="nope"), "refs of split 'test' are not"),
    (lambda r: r["refs"]["test"].update(ref_max=float("inf")), "refs of split 'test' are not"),
    (lambda r: r.update(policies=5), "policies are not each policy's rows of scores per split"),
    (lambda r: r["policies"]["fedavg"].update(test="x"), "policies are not"),
    (lambda r: r.update(reference="nope"), "reference='nope' is not among the policies"),
    (lambda r: r.update(upper=["x"]), "upper=['x'] is not among the policies"),
    (lambda r: r.update(fixed=5), "fixed is not a list of policies, or tuned not each tuning's chosen"),
    (lambda r: r["tuned"].update(x=5), "fixed is not a list of policies, or tuned not"),
    (lambda r: r.update(returns={"fedavg": r["returns"]["fedavg"]}), "returns are not the reference's and"),
])
def test_a_report_names_references_edited_out_of_shape(tmp_path, capsys, edit, said):
    """Such references failed inside the report with a ``KeyError``, ``TypeError`` or ``ValueError``."""
    refs = benchmark.stored_references("core-v1")
    task = suite("core-v1")[-1].name
    edit(refs[task])
    (tmp_path / "references.json").write_text(json.dumps(refs))
    assert main(["benchmark", "report", "--suite", "core-v1", "--runs", str(tmp_path), "--reps", "100"]) == 2
    assert f"{tmp_path / 'references.json'}: {task} is damaged ({said}" in capsys.readouterr().err


def test_references_of_valid_json_but_another_shape_are_named_as_damaged(tmp_path, capsys):
    """``[]`` in ``references/TASK.json`` was gathered into ``references.json`` as the task's record, and
    the report then failed with a ``TypeError``'s traceback."""
    out = tmp_path / "bench"
    pin = ["benchmark", "run", "--suite", "smoke", "--algo", "fixed", "--tasks", "smoke-hetero",
           "--out", str(out)]
    assert main(pin) == 0
    task = out / "references" / "smoke-hetero.json"
    task.write_text("[]")
    capsys.readouterr()
    assert main(pin) == 2
    assert f"{task} is damaged (no 'refs'); allowed: JSON as fl-gym writes it" in capsys.readouterr().err
    gathered = out / "references.json"
    gathered.write_text(json.dumps({"smoke-hetero": {"refs": {}}, "smoke-aggregate": []}))
    assert main(["benchmark", "report", "--suite", "smoke", "--runs", str(out)]) == 2
    assert f"{gathered}: smoke-hetero is damaged (no 'policies')" in capsys.readouterr().err
    gathered.write_text("null")  # was the TypeError of looking a task up in None
    assert main(["benchmark", "report", "--suite", "smoke", "--runs", str(out)]) == 2
    assert f"{gathered}: tasks=[] is out of range; allowed: a record for every task of smoke (missing " \
           "['smoke-hetero', 'smoke-aggregate'])" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["benchmark", "run", "--suite", "nosuch"], "suite='nosuch'"),
    (["benchmark", "run", "--suite", "smoke", "--tasks", "nosuch"], "--tasks=['nosuch']"),
    (["benchmark", "run", "--suite", "smoke", "--seeds", "x"], "--seeds='x'"),
    (["benchmark", "run", "--suite", "smoke", "--algo", "nosuch"], "--algo='nosuch'"),
    # found task by task, the run stopped at smoke-aggregate after training smoke-hetero
    (["benchmark", "run", "--suite", "smoke", "--algo", "recurrent-ppo", "--seeds", "0"],
     "--algo='recurrent-ppo' is out of range for tasks smoke-aggregate (smoke-aggregate: hyperparameter "
     "'imitate' is out of range for algo='recurrent-ppo'; allowed: algo 'ppo'); allowed: --algo ppo, or "
     "--tasks among those with a block for recurrent-ppo: smoke-hetero"),
    (["benchmark", "run", "--suite", "smoke", "--algo", "maskable-ppo", "--seeds", "0"],
     "for maskable-ppo: none"),
    (["benchmark", "report", "--suite", "smoke", "--reps", "3"], "--reps=3"),
    (["benchmark", "report", "--suite", "smoke", "--runs", "/nonexistent/runs"],
     "--runs='/nonexistent/runs'"),
    (["benchmark", "tasks", "--suite", "smoke", "--tasks", "nosuch"], "--tasks=['nosuch']"),
])
def test_benchmark_cli_errors_are_one_line(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()



def test_a_new_method_is_scored_like_the_fixed_policies():
    from fl_gym.baselines.aggregate import FedAvgWeightsPolicy

    task = all_tasks()["smoke-aggregate"]
    mine = score_policy(task, lambda env: FedAvgWeightsPolicy(env))
    np.testing.assert_array_equal(mine, score_policy(task, "fedavg"))
    assert mine.shape == (len(task.eval_seeds), len(task.test_scenarios))


@pytest.mark.parametrize("call,message", [
    (lambda out: benchmark.run("smoke", "ppo", [-1], out), "seeds=[-1] is out of range"),  # once a task began
    (lambda out: benchmark.run("smoke", "ppo", [], out), "seeds=[] is out of range"),  # nothing, and no word
    (lambda out: benchmark.run("smoke", "ppo", [0], "/proc/x"), "out='/proc/x' cannot be written"),
    (lambda out: benchmark.suite_tasks("smoke", "smoke-hetero"), "--tasks='smoke-hetero' is out of range"),
    (lambda out: benchmark.report("smoke", out, reps=0), "reps=0 is out of range"),
    (lambda out: score_policy(all_tasks()["smoke-aggregate"], 3), "policy=3 is out of range"),
    (lambda out: score_policy(all_tasks()["smoke-aggregate"], lambda env: 3),  # was 'int' has no 'predict'
     "make_policy(env)=3 is out of range; allowed: an object with SB3's predict(observation, state, "),
])
def test_the_python_functions_name_a_bad_argument_before_any_training(call, message, tmp_path, monkeypatch):
    """What ``fl-gym benchmark`` checks for its flags, the functions behind it check too."""
    import fl_gym.training.benchmark as module

    monkeypatch.setattr(module, "run_agent", lambda *a, **k: pytest.fail("an agent trained"))
    with pytest.raises(ValueError, match=re.escape(message)):
        call(tmp_path)


def test_task_headroom_by_hand():
    from fl_gym.training.benchmark.report import task_headroom

    record = {"reference": "a", "upper": "u", "refs": {"test": {"ref_min": 0.5, "ref_max": 0.6, "best": "b"}},
              "policies": {"a": {"test": [[0.4, 0.6], [0.5, 0.5]]},  # runs (seed means) 0.5, 0.5
                           "b": {"test": [[0.6, 0.6], [0.5, 0.7]]},  # runs 0.6, 0.6
                           "u": {"test": [[0.8, 0.8], [0.8, 0.8]]}}}
    room = task_headroom(record, "test")
    assert room["spread"] == pytest.approx(0.1) and room["upper"] == pytest.approx(3.0)
    assert room["spread_in_se"] == float("inf")  # no spread between the runs of either
    assert room["seed_sd"] == pytest.approx(np.mean([np.std([0.4, 0.5], ddof=1), np.std([0.6, 0.5], ddof=1)]))
    assert np.isnan(room["reward_snr"])
    record["returns"] = {"a": {"test": [[1.0, 1.0], [1.0, 1.0]]}, "b": {"test": [[2.0, 3.0], [2.0, 1.0]]}}
    paired = np.array([1.0, 2.0, 1.0, 0.0])
    assert task_headroom(record, "test")["reward_snr"] == pytest.approx(paired.mean() / paired.std(ddof=1))


def test_pinning_refuses_a_split_where_no_fixed_policy_beats_the_reference():
    from fl_gym.training.benchmark.protocol import task_references

    lone = dataclasses.replace(all_tasks()["smoke-aggregate"], heuristics=("fedavg",), tuned={})
    with pytest.raises(ValueError,
                       match="task='smoke-aggregate': on its test split no fixed policy beats the "
                             "reference 'fedavg'"):
        task_references(lone, say=lambda _: None)


def test_pick_devices_agent_picks_by_scores_while_the_fixed_policies_pick_sets():
    """FedCS may pick fewer than m clients: only the agent is bound to the scores' exactly m."""
    task = all_tasks()["pick-devices"]
    agent = gym.make(task.env_id, **task.train_kwargs())
    fixed = gym.make(task.env_id, **task.test_kwargs(task.test_scenarios[0]))
    assert isinstance(agent.action_space, gym.spaces.Box)
    assert isinstance(fixed.action_space, gym.spaces.MultiBinary)
    assert fixed.unwrapped.federation.config.behaviour.deadline == 8.0


def test_a_task_header_names_its_upper_reference_or_says_it_has_none():
    from fl_gym.training.benchmark.report import _upper

    assert _upper(1.375) == "upper reference at 1.38" and _upper(float("nan")) == "no upper reference"


def test_processes_that_pin_other_tasks_into_one_folder_all_reach_its_references(tmp_path, monkeypatch):
    """The second process's gathering lands between the first's and its write: the first's write,
    gathered before the second's task was pinned, must not be the last word."""
    record = benchmark.stored_references("core-v1")
    monkeypatch.setattr(benchmark, "task_references", lambda task, say: record[task.name])
    first, second = (t.name for t in suite("core-v1")[:2])
    writes = []
    real_write = benchmark.write_json

    def write_json(path, data, **kwargs):
        if path.name == "references.json" and not writes:  # the first process is about to write
            writes.append(sorted(data))
            benchmark.references("core-v1", tmp_path, [second], say=lambda _: None)  # the second, meanwhile
        return real_write(path, data, **kwargs)

    monkeypatch.setattr(benchmark, "write_json", write_json)
    benchmark.references("core-v1", tmp_path, [first], say=lambda _: None)
    assert writes == [[first]]  # what the first had gathered when the second pinned its task
    assert sorted(json.loads((tmp_path / "references.json").read_text())) == sorted([first, second])
