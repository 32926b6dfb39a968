"""The batched vector env: copies equal stand-alone envs, SB3's VecEnv contract, bad arguments."""

from __future__ import annotations

import dataclasses
import os
import re
import signal

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

import fl_gym
from fl_gym.envs.hetero.config import OBS_MODES
from fl_gym.envs.registry import env_ids, family_of
from fl_gym.envs.sharded import WorkerLost

IDS = env_ids()


def _actions(space: gym.Space, n: int, rng: np.random.Generator) -> np.ndarray:
    space.seed(int(rng.integers(2**31)))
    return np.stack([space.sample() for _ in range(n)])


@pytest.mark.parametrize("env_id", IDS)
def test_each_copy_plays_the_episode_of_a_standalone_env(env_id):
    """Different actions per copy, through an auto-reset. Tolerance: merged training stacks the
    copies' clients into larger batched matrix products, whose float32 rounding may differ in the
    last bit; a 1e-5 difference in the observation is rounding, a wrong partner would be O(1)."""
    _assert_copies_play_standalone_episodes(env_id)


@pytest.mark.parametrize("cap,value", [
    ("MERGED_TRAIN_CLIENTS", 7),  # chunks of 7 of the copies' 30 clients in the order of their local steps
    ("MERGED_COPIES", 2),  # turns of 2 of the 3 copies: the third steps after the first two have finished
    # 7 clients x 10 samples x MLPs 64 wide: training chunks of 7 clients, evaluation chunks of 70 pairs
    ("MERGED_VALUES", 7 * 10 * 64),
])
@pytest.mark.parametrize("env_id", ["FLAggregate-v0", "FLLearningRate-v0"])
def test_capped_merges_play_the_standalone_episodes(env_id, cap, value, monkeypatch):
    """Copies split across chunks of a merged training, or stepped in turns, still play their own episodes."""
    monkeypatch.setattr(f"fl_gym.engine.batcher.{cap}", value)
    _assert_copies_play_standalone_episodes(env_id)


@pytest.mark.parametrize("env_id,kwargs", [
    ("FLAggregate-v0", {"model": "cnn-small"}),  # grouped convolutions merged
    ("FLAggregate-v0", {"optimizer": "adam", "fednova": True, "dropout": 0.3}),
    ("FLAggregate-v0", {"availability": 0.1}),  # cohorts of one client, whose update angle is 0 either way
    ("FLSelect-v0", {"momentum": 0.9, "local_algorithm": "fedprox"}),
    ("FLSelect-v0", {"local_algorithm": "scaffold", "availability": 0.6, "deadline": 2.0, "late": "partial"}),
    ("FLSelect-v0", {"reward_signal": "loss_vs_all", "link_sigma": 0.5, "bandwidth": 1e5}),  # what-ifs
    ("FLSelectQueue-v0", {"update_stats": True, "noisy_clients": 0.3}),
])
def test_copies_play_their_twins_episodes_off_the_defaults(env_id, kwargs):
    """Models, optimisers, local algorithms (merged, or alone where stateful), device behaviour and
    what-if averages each change what the copies' requests hold: each copy still plays its twin's."""
    _assert_copies_play_standalone_episodes(env_id, n=2, rounds=2, **kwargs)


@pytest.mark.parametrize("env_id", ["FLAggregate-v0", "FLLearningRate-v0"])
def test_copies_of_a_model_with_dropout_draw_their_own_masks(env_id):
    """DDFL's MNIST CNN drops out at 0.25 and 0.5: each copy's masks are its stand-alone twin's, as
    its training runs alone (merged, the masks came from one copy's generator: differences of 0.1)."""
    _assert_copies_play_standalone_episodes(env_id, n=2, rounds=2, model="ddfl-mnist-cnn")


def test_merged_calls_hold_at_most_the_values_budget(monkeypatch):
    """Training chunks of clients, evaluation groups of models and chunks of samples: ``MERGED_VALUES``."""
    from fl_gym.engine import batcher

    monkeypatch.setattr(batcher, "MERGED_VALUES", 7 * 10 * 64)  # 7 clients x batches of 10 x MLPs 64 wide
    trained, evaluated = [], []
    train, evaluate = batcher.train_cohort, batcher.evaluate_stack
    monkeypatch.setattr(batcher, "train_cohort", lambda members, *args, **kwargs: trained.append(
        members[0].stack.k) or train(members, *args, **kwargs))
    monkeypatch.setattr(batcher, "evaluate_stack", lambda stack, x, y, parts, batch_size, **kwargs: (
        evaluated.append((stack.k, batch_size)) or evaluate(stack, x, y, parts, batch_size, **kwargs)))
    vec = fl_gym.make_vec("FLAggregate-v0", 3, seed=0, rounds_per_episode=2)
    # each model (4,810 values) is over the budget, so it evaluates alone, 70 samples a chunk
    vec.reset()  # validates the 3 initial models, trains the 3 x 10 clients
    assert (trained, evaluated) == ([7, 7, 7, 7, 2], [(1, 70)] * 3)
    vec.step(np.zeros((3, 10), np.float32))  # 3 test and 3 validation models
    assert evaluated[3:] == [(1, 70)] * 6
    vec.close()


def _assert_copies_play_standalone_episodes(env_id: str, n: int = 3, rounds: int = 3, **kwargs) -> None:
    vec, solo = _vector_and_twins(env_id, n, rounds_per_episode=rounds, **kwargs)
    rng = np.random.default_rng(0)
    for _ in range(rounds + 2):
        _assert_step_is_each_twins_step_within_tolerance(vec, solo, _actions(vec.action_space, n, rng))
    vec.close()


def _vector_and_twins(env_id: str, n: int, **kwargs) -> tuple:
    """A batched env of ``n`` copies seeded from 5 and its stand-alone twins, reset alike (checked)."""
    vec = fl_gym.make_vec(env_id, n, seed=5, monitor=False, **kwargs)
    solo = [gym.make(env_id, **kwargs) for _ in range(n)]
    obs = vec.reset()
    for i, env in enumerate(solo):
        np.testing.assert_allclose(obs[i], env.reset(seed=5 + i)[0], rtol=0, atol=1e-5)
    return vec, solo


def _assert_step_is_each_twins_step_within_tolerance(vec, solo, actions) -> None:
    """A vector step of copies that train equals each twin's step (a finished twin resets, as the copy)."""
    obs, rewards, dones, infos = vec.step(actions)
    for i, env in enumerate(solo):
        o, r, terminated, truncated, _ = env.step(actions[i])
        assert dones[i] == (terminated or truncated)
        if dones[i]:
            np.testing.assert_allclose(infos[i]["terminal_observation"], o, rtol=0, atol=1e-5)
            assert infos[i]["TimeLimit.truncated"] == (truncated and not terminated)
            o, _ = env.reset()
        np.testing.assert_allclose(obs[i], o, rtol=0, atol=1e-5)
        assert rewards[i] == pytest.approx(r, abs=1e-5)


def test_training_copies_of_different_client_counts_stepped_and_reset_alone_play_their_twins_episodes():
    """Copies that train, with client counts drawn per episode (``num_clients_range``) so that they
    differ in one merged step; one copy stepped alone and one reset alone in between: each plays the
    episode of its stand-alone twin (training within float tolerance)."""
    kwargs = {"rounds_per_episode": 3, "randomize_scenario": True, "num_clients_range": (6, 12)}
    n, rng = 3, np.random.default_rng(0)
    vec, solo = _vector_and_twins("FLSelect-v0", n, **kwargs)
    counts = set()

    def step_all():
        _assert_step_is_each_twins_step_within_tolerance(vec, solo, _actions(vec.action_space, n, rng))
        counts.add(tuple(env.unwrapped.federation.num_clients for env in vec.envs))

    for _ in range(3):
        step_all()
    action = _actions(vec.action_space, 1, rng)[0]
    np.testing.assert_allclose(vec.envs[1].step(action)[0], solo[1].step(action)[0], rtol=0, atol=1e-5)
    np.testing.assert_allclose(vec.envs[2].reset(seed=77)[0], solo[2].reset(seed=77)[0], rtol=0, atol=1e-5)
    for _ in range(3):
        step_all()
    assert any(len(set(c)) > 1 for c in counts) and len(counts) > 1
    vec.close()


@pytest.mark.parametrize("env_id", IDS)
def test_a_family_observes_its_copies_as_each_observes_itself(env_id):
    """``observe_copies`` over copies of different scenarios (their own scales, client counts where the
    family allows them) equals each env's own observation bit for bit, at reset and after steps."""
    kwargs = {"rounds_per_episode": 4}
    if gym.make(env_id).unwrapped.any_client_count:
        kwargs["num_clients_range"] = (6, 12)
    envs = [gym.make(env_id, scenario_seed=i, randomize_scenario=True, **kwargs) for i in range(3)]
    rng = np.random.default_rng(0)
    own = np.array([env.reset(seed=i)[0] for i, env in enumerate(envs)])
    unwrapped = [env.unwrapped for env in envs]
    for _ in range(3):
        np.testing.assert_array_equal(type(unwrapped[0]).observe_copies(unwrapped), own)
        actions = _actions(envs[0].action_space, len(envs), rng)
        own = np.array([env.step(a)[0] for env, a in zip(envs, actions, strict=True)])


class _Negated(gym.ActionWrapper):
    """Plays ``-action``: a wrapper a vector env must not step around."""

    def action(self, action):
        return -np.asarray(action)


@pytest.mark.parametrize("env_id", ["FLHetero-v0", "FLAggregate-v0"])
def test_copies_behind_an_action_wrapper_play_the_wrapped_action(env_id):
    """A copy whose step is played ahead (a timing clock, or rounds merged and observed together) would
    skip its action wrapper: behind one, the copies step through their wrappers as stand-alone envs do."""
    from fl_gym.envs.vectorize import batched_vec_env

    def make():
        return _Negated(gym.make(env_id, rounds_per_episode=3))

    vec, solo = batched_vec_env([make] * 2), [make() for _ in range(2)]
    vec.seed(5)
    obs = vec.reset()
    for i, env in enumerate(solo):
        np.testing.assert_allclose(obs[i], env.reset(seed=5 + i)[0], rtol=0, atol=1e-5)
    rng = np.random.default_rng(0)
    for _ in range(4):
        _assert_step_is_each_twins_step_within_tolerance(vec, solo, _actions(vec.action_space, 2, rng))
    vec.close()


@pytest.mark.parametrize("turn,flushes", [
    # one training, update statistics, then the averages and the evaluation of the models they make
    # (every copy's test and validation sets)
    (None, 4),
    (3, 8),  # turns of 3 and 1 copies: a training, statistics, averages and an evaluation each
])
def test_training_statistics_averages_and_evaluation_merge_across_the_copies_of_a_turn(turn, flushes,
                                                                                       monkeypatch):
    """A copy hands in its training with its statistics, and its averages with its evaluation: two
    hand-offs a step (each a switch back to the batcher), four engine calls a turn."""
    if turn is not None:
        monkeypatch.setattr("fl_gym.engine.batcher.MERGED_COPIES", turn)
    vec = fl_gym.make_vec("FLAggregate-v0", 4, seed=0, rounds_per_episode=2)
    vec.reset()
    handed = _hand_offs(monkeypatch)
    before = vec.batcher.flushes
    vec.step(np.zeros((4, 10), np.float32))
    assert vec.batcher.flushes - before == flushes
    # each copy's averages with the test and validation sets, then the next round's training, played ahead
    assert [handed[i] for i in range(4)] == [[["AverageRequest", "EvalRequest", "EvalRequest"],
                                             ["TrainRequest", "StatsRequest"]]] * 4


@pytest.mark.parametrize("device,graphs,turn", [
    ("cpu", "0", "MERGED_COPIES"),
    ("cuda", "0", "MERGED_COPIES_GPU"),  # launch-bound: more copies per merged call
    ("cuda", "1", "MERGED_COPIES"),  # replays of graphs captured for the CPU's turns were faster
    ("cpu", "1", "MERGED_COPIES"),
])
def test_copies_merge_in_larger_turns_on_a_gpu_unless_graphs_replay(device, graphs, turn, monkeypatch):
    """Built without touching the device: the turn is read off its type and the graphs switch."""
    from fl_gym.engine import batcher

    monkeypatch.setenv("FL_GYM_CUDA_GRAPHS", graphs)
    assert batcher.MERGED_COPIES != batcher.MERGED_COPIES_GPU
    assert batcher.CohortBatcher(4, torch.device(device)).turn == getattr(batcher, turn)


def _hand_offs(monkeypatch) -> dict[int, list[list[str]]]:
    """Each copy's hand-offs to its batcher from now on: the kinds of the requests of each."""
    from fl_gym.engine.batcher import CohortBatcher

    handed: dict[int, list[list[str]]] = {}
    submit = CohortBatcher._submit_all
    monkeypatch.setattr(CohortBatcher, "_submit_all", lambda self, requests: handed.setdefault(
        self._current, []).append([type(r).__name__ for r in requests]) or submit(self, requests))
    return handed


# each phase's lead request, and the requests a copy hands in with it (which read what it writes)
PHASES = {"ProbeRequest": set(), "TrainRequest": {"StatsRequest", "EvalRequest"},
          "AverageRequest": {"EvalRequest"}}


@pytest.mark.parametrize("env_id", IDS)
def test_a_copy_hands_in_each_phase_of_its_round_at_once(env_id, monkeypatch):
    """The probe, the training with its statistics and local evaluations, the averages with the
    evaluation of the models they make: one hand-off each (a switch back to the batcher) in a step.
    Copies that train nothing have no batcher."""
    vec = fl_gym.make_vec(env_id, 2, seed=0, rounds_per_episode=3)
    vec.reset()
    if vec.batcher is None:
        assert not vec.envs[0].unwrapped.federation.config.train
        return
    handed = _hand_offs(monkeypatch)
    vec.step(_actions(vec.action_space, 2, np.random.default_rng(0)))
    assert sorted(handed) == [0, 1]
    for lists in handed.values():
        leads = [names[0] for names in lists]
        assert {"TrainRequest", "AverageRequest"} <= set(leads) and len(leads) == len(set(leads))
        assert all(set(names[1:]) <= PHASES[names[0]] for names in lists)
    vec.close()


# the default; a cap that splits the merged evaluation into chunks
@pytest.mark.parametrize("rows", [None, 16])
def test_a_copys_several_evaluations_run_in_one_flush_and_equal_each_run_alone(rows, monkeypatch):
    if rows is not None:  # 4 models: 4 samples per chunk instead of the 512 of each evaluation alone
        monkeypatch.setattr("fl_gym.engine.batcher.MERGED_EVAL_ROWS", rows)
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=1, rounds_per_episode=2)
    vec.reset()
    feds = [env.unwrapped.federation for env in vec.envs]
    requests = [fed._global_requests() + fed._validation_requests() for fed in feds]
    assert [len(r) for r in requests] == [2, 2]  # the test split and the validation set
    before = vec.batcher.flushes
    merged = vec.batcher.run(lambda i: feds[i]._run_all(requests[i]))
    # four requests of one architecture on one data set: one engine call
    assert vec.batcher.flushes - before == 1
    for copy_requests, results in zip(requests, merged, strict=True):
        for request, result in zip(copy_requests, results, strict=True):
            alone = request.run()
            np.testing.assert_allclose(result.accuracy.numpy(), alone.accuracy.numpy(), rtol=0, atol=1e-6)
            np.testing.assert_allclose(result.loss.numpy(), alone.loss.numpy(), rtol=0, atol=1e-5)
    vec.close()


def test_evaluations_of_different_metrics_run_apart_each_with_its_own():
    """A copy's soft labels and another's scores of the same models, in one flush: two engine calls."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=1, rounds_per_episode=2)
    vec.reset()
    feds = [env.unwrapped.federation for env in vec.envs]
    asked = [fed._eval_request(fed._stack(fed.archs[0], 1), fed.x_test, fed.y_test, [fed.eval_indices],
                               soft_labels=i == 0) for i, fed in enumerate(feds)]
    for fed, request in zip(feds, asked, strict=True):
        request.stack.flat.copy_(fed.global_models[0])
    before = vec.batcher.flushes
    (soft,), (scores,) = vec.batcher.run(lambda i: feds[i]._run_all([asked[i]]))
    assert vec.batcher.flushes - before == 2
    assert soft.accuracy.isnan().all() and not soft.soft_labels.isnan().any()
    assert scores.soft_labels.isnan().all() and not scores.accuracy.isnan().any()
    vec.close()


def test_copies_averages_run_in_one_engine_call_before_the_evaluations_of_the_models_they_make():
    """Three copies' aggregations (every row; a subset that leaves out a NaN row, through FedAdam's
    server step; FedNova's share of the start) handed in with the evaluation of the model each makes:
    one engine call of the averages, each the one its request makes alone, then one evaluation
    (float rounding of the larger batched products)."""
    from fl_gym.aggregation import ServerConfig, ServerOptimizer
    from fl_gym.engine.batcher import AverageRequest

    vec = fl_gym.make_vec("FLAggregate-v0", 3, seed=2, rounds_per_episode=2)
    vec.reset()  # each copy's pending round has trained its 10 clients
    feds = [env.unwrapped.federation for env in vec.envs]
    members = [env.unwrapped.pending.cohort.members[0] for env in vec.envs]
    kept = [None, np.array([0, 3, 4, 8]), np.arange(1, 10)]
    weights = [np.full(10, 0.1), np.array([0.1, 0.2, 0.3, 0.4]), np.full(9, 0.125)]
    rests = [None, None, -0.125]  # the rows' weights sum to 1.125: FedNova takes 0.125 of the start away
    for block in members[1].stack.blocks:  # a diverged update left out: it must not reach the product
        block[1] = float("nan")

    def request(i: int) -> AverageRequest:
        step = ServerOptimizer(ServerConfig("fedadam")).apply if i == 1 else (lambda start, average: average)
        start = members[i].start
        return AverageRequest(members[i].stack, kept[i], weights[i], start, rests[i],
                              lambda average: step(start, average), torch.empty_like(start))

    requests = [request(i) for i in range(3)]
    evaluations = [feds[i]._test_request(feds[i].archs[0], requests[i].into, feds[i].eval_indices)
                   for i in range(3)]
    before = vec.batcher.flushes
    merged = vec.batcher.run(lambda i: feds[i]._run_all([requests[i], evaluations[i]]))
    assert vec.batcher.flushes - before == 2  # the averages, then the evaluations
    for i, (model, evaluation) in enumerate(merged):
        alone = request(i).run()
        rows = members[i].stack.rows()[kept[i] if kept[i] is not None else slice(None)]
        by_hand = torch.as_tensor(weights[i], dtype=rows.dtype) @ rows + (rests[i] or 0.0) * members[i].start
        if i != 1:  # FedAdam's step is not the average
            torch.testing.assert_close(alone, by_hand, rtol=0, atol=1e-6)
        assert torch.equal(model, alone)
        assert model.data_ptr() == requests[i].into.data_ptr()
        expected = feds[i]._test_request(feds[i].archs[0], alone, feds[i].eval_indices).run()
        np.testing.assert_allclose(evaluation.loss.numpy(), expected.loss.numpy(), rtol=0, atol=1e-5)
    what_if = AverageRequest(members[0].stack, None, weights[0], members[0].start, None)  # no step, no into
    torch.testing.assert_close(what_if.average(), merged[0][0], rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"^AverageRequest.run: a what-if \(no step, no into\) has only"):
        what_if.run()
    vec.close()


def test_a_copys_diverged_update_reaches_no_other_copys_average():
    """Copy 1 aggregates an update that diverged (NaN): its next global model is NaN, as it is alone,
    and the others' are the ones they make alone, finite (one product over every copy's rows would
    carry the NaN into them all: 0 x NaN)."""
    from fl_gym.engine.batcher import AverageRequest

    vec = fl_gym.make_vec("FLAggregate-v0", 3, seed=2, rounds_per_episode=2)
    vec.reset()
    feds = [env.unwrapped.federation for env in vec.envs]
    members = [env.unwrapped.pending.cohort.members[0] for env in vec.envs]
    for block in members[1].stack.blocks:
        block[4] = float("nan")

    def request(i: int) -> AverageRequest:
        start = members[i].start
        return AverageRequest(members[i].stack, None, np.full(10, 0.1), start, None, lambda average: average,
                              torch.empty_like(start))

    merged = vec.batcher.run(lambda i: feds[i]._run_all([request(i)]))
    assert merged[1][0].isnan().all()
    for i in (0, 2):
        assert torch.equal(merged[i][0], request(i).run())
    vec.close()


def test_a_copys_federation_called_outside_a_vector_step_runs_its_request_alone():
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=4, rounds_per_episode=2)
    vec.reset()
    alone = gym.make("FLAggregate-v0", rounds_per_episode=2)
    alone.reset(seed=4)
    before = vec.batcher.flushes
    assert vec.envs[0].unwrapped.federation.validation() == alone.unwrapped.federation.validation()
    assert vec.batcher.flushes == before
    vec.close()


@pytest.mark.parametrize("error,ran", [
    (RuntimeError("copy 1 failed"), [0, 1, 2]),  # the others still run, one after the other; raised after
    (KeyboardInterrupt(), [0, 1]),  # Ctrl-C reaches the caller at once: copy 2 never starts
])
def test_the_batcher_runs_copies_in_turn_and_passes_a_copy_error_to_the_caller(error, ran):
    from fl_gym.engine.batcher import CohortBatcher

    batcher, order = CohortBatcher(3), []

    def fn(i):
        order.append(i)
        if i == 1:
            raise error
        return i * 10

    with pytest.raises(type(error)) as caught:
        batcher.run(fn)
    assert caught.value is error  # the copy's own exception ("copy 1 failed"), re-raised in the caller
    assert order == ran
    assert batcher.run(lambda i: i * 10) == [0, 10, 20]  # and the batcher is usable afterwards


@pytest.mark.parametrize("error", [RuntimeError("copy 1 failed"), KeyboardInterrupt()])
def test_a_step_that_stops_after_copies_played_asks_for_a_reset_and_one_before_does_not(error, monkeypatch):
    """An error in copy 1's aggregation comes after copies 0 and 2 played (a RuntimeError lets them
    finish; Ctrl-C stops copy 0 after its federation counted the round, before its env did): their
    results are lost and the copies disagree, so the next step says to reset instead of playing on
    (it raised the federation's "round 1 is not pending", or stepped on silently). A bad action,
    refused before any copy plays, leaves the env stepping."""
    vec = fl_gym.make_vec("FLAggregate-v0", 3, seed=0, rounds_per_episode=4)
    vec.reset()
    actions = np.zeros((3, 10), np.float32)
    with pytest.raises(ValueError, match="is not finite"):
        vec.step(np.full((3, 10), np.nan, np.float32))
    vec.step(actions)
    monkeypatch.setattr(vec.envs[1].unwrapped.federation, "finish_round", lambda *_, **__: _raise(error))
    with pytest.raises(type(error)):
        vec.step(actions)
    monkeypatch.undo()
    with pytest.raises(gym.error.ResetNeeded, match=r"stopped partway .* call reset\(\)"):
        vec.step(actions)
    vec.reset()
    assert [env.unwrapped.rounds_played for env in vec.envs] == [0, 0, 0]
    vec.step(actions)
    vec.close()


def _raise(error: BaseException) -> None:
    raise error


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
@pytest.mark.parametrize("env_id", ["FLSelect-v0", "FLAggregate-v0", "FLLearningRate-v0"])
def test_copies_keep_their_lasting_state_in_one_pool_that_stops_growing(env_id, device):
    """Each round's cohorts, global models and probe gradients reuse the pool's buffers, across
    auto-resets too (episodes of 2 rounds), so it holds what the copies hold at once, no more.
    On a GPU too (scripts/gpu-checks.sh runs it there): a pool that never found a buffer free
    would grow every round, and every take would pass all it holds."""
    vec = fl_gym.make_vec(env_id, 3, seed=0, monitor=False, rounds_per_episode=2, device=device)
    pools = {id(fed.buffers): fed.buffers for fed in vec.get_attr("federation")}
    assert len(pools) == 1
    (pool,) = pools.values()
    vec.reset()
    actions = _actions(vec.action_space, 3, np.random.default_rng(0))
    sizes = []
    for _ in range(6):
        vec.step(actions)
        sizes.append(len(pool))
    vec.close()
    assert sizes[2:] == [sizes[1]] * 4 and sizes[1] >= 3  # at least every copy's global model


def test_a_batched_run_is_reproducible_bit_for_bit():
    def run():
        vec = fl_gym.make_vec("FLAggregate-v0", 3, seed=2, rounds_per_episode=3)
        out = [vec.reset()] + [vec.step(np.full((3, 10), 0.5, np.float32))[0] for _ in range(4)]
        vec.close()
        return np.stack(out)

    np.testing.assert_array_equal(run(), run())


def test_sharded_env_plays_the_episodes_of_the_unsharded_one():
    """Two worker processes of two and one copies; the same tolerance as the stand-alone test."""
    n, rounds = 3, 2
    sharded = fl_gym.make_vec("FLSelectPick-v0", n, seed=7, workers=2, rounds_per_episode=rounds)
    single = fl_gym.make_vec("FLSelectPick-v0", n, seed=7, rounds_per_episode=rounds)
    assert sharded.shards == [[0, 1], [2]]
    np.testing.assert_allclose(sharded.reset(), single.reset(), rtol=0, atol=1e-5)
    rng = np.random.default_rng(3)
    for _ in range(rounds + 1):
        actions = _actions(sharded.action_space, n, rng)
        a, b = sharded.step(actions), single.step(actions)
        np.testing.assert_allclose(a[0], b[0], rtol=0, atol=1e-5)
        np.testing.assert_array_equal(a[2], b[2])
        for x, y in zip(a[3], b[3], strict=True):
            assert x.keys() == y.keys()
            if "terminal_observation" in x:
                np.testing.assert_allclose(x["terminal_observation"], y["terminal_observation"], atol=1e-5)
    sharded.set_attr("probe_attribute", 4, indices=[2, 0])
    assert sharded.get_attr("probe_attribute", indices=[2, 0]) == [4, 4]
    assert sharded.get_attr("family", indices=[2, 1]) == ["select", "select"]
    masks = sharded.env_method("action_masks")
    np.testing.assert_array_equal(np.stack(masks), np.stack(single.env_method("action_masks")))
    with pytest.raises(AttributeError):
        sharded.get_attr("no_such_attribute", indices=[0, 2])  # both shards fail; both replies are read
    assert sharded.get_attr("family", indices=[0, 2]) == ["select", "select"]  # no stale reply in a pipe
    sharded.close()
    single.close()


def test_seeds_give_each_copy_a_distinct_reproducible_stream():
    a = fl_gym.make_vec("FLLearningRate-v0", 3, seed=11).reset()
    b = fl_gym.make_vec("FLLearningRate-v0", 3, seed=11).reset()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[1], a[2])


def test_vec_env_contract_attributes_methods_and_masks():
    vec = fl_gym.make_vec("FLSelectPick-v0", 2, seed=0, rounds_per_episode=2)
    vec.reset()
    assert vec.get_attr("family") == ["select", "select"]
    vec.set_attr("probe_attribute", 3, indices=[1])
    assert vec.get_attr("probe_attribute", indices=[1]) == [3]
    masks = vec.env_method("action_masks")
    assert len(masks) == 2 and masks[0].dtype == bool
    from stable_baselines3.common.monitor import Monitor
    assert vec.env_is_wrapped(Monitor) == [True, True]


@pytest.mark.parametrize("workers", [1, 2])
def test_copy_indices_count_from_the_end_as_in_a_list_and_others_are_refused_by_name(workers):
    """Out of range was an IndexError (one process) or a KeyError (sharded, -1 too)."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=workers, rounds_per_episode=2)
    vec.reset()
    vec.set_attr("probe_attribute", 7, indices=-1)
    assert vec.get_attr("probe_attribute", indices=[1]) == [7] == vec.get_attr("probe_attribute", indices=-1)
    for indices in ([5], [-3], ["a"], 2):
        shown = re.escape(str(indices if isinstance(indices, list) else [indices]))
        with pytest.raises(ValueError, match=rf"^indices={shown} is out of range; allowed: copy indices in "
                                             r"\[-2, 2\)"):
            vec.get_attr("rounds_played", indices=indices)
    with pytest.raises(ValueError, match=r"^indices=1.5 is out of range; allowed: copy indices in \[-2, 2\)"):
        vec.get_attr("rounds_played", indices=1.5)  # was TypeError: 'float' object is not iterable
    vec.close()


@pytest.mark.parametrize("algo", ["ppo", "maskable-ppo"])
def test_sb3_agents_train_on_the_batched_env(algo):
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

    env_id = "FLSelectPick-v0" if algo == "maskable-ppo" else "FLLearningRate-v0"
    vec = fl_gym.make_vec(env_id, 4, seed=0, rounds_per_episode=4)
    cls = MaskablePPO if algo == "maskable-ppo" else PPO
    model = cls("MlpPolicy", vec, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    start = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(128)
    assert model.num_timesteps >= 128  # four rollouts of 4 copies x 16 steps, each followed by an update
    assert any(not torch.equal(a, b.detach()) for a, b in zip(start, model.policy.parameters(), strict=True))
    infos = vec.step(_actions(vec.action_space, 4, np.random.default_rng(1)))[3]
    assert all("accuracy" in info for info in infos)


def test_batched_env_matches_dummy_vec_env_on_a_shared_action_sequence():
    dummy = DummyVecEnv([lambda: gym.make("FLLearningRate-v0")] * 2)
    dummy.seed(3)
    batched = fl_gym.make_vec("FLLearningRate-v0", 2, seed=3, monitor=False)
    np.testing.assert_allclose(dummy.reset(), batched.reset(), atol=1e-5)
    actions = np.zeros((2, 5), np.float32)
    for _ in range(3):
        np.testing.assert_allclose(dummy.step(actions)[0], batched.step(actions)[0], atol=1e-5)


@pytest.mark.parametrize("kwargs,name", [(dict(env_id="FLSelect-v0", n_envs=0), "n_envs"),
                                         (dict(env_id="FLNope-v0", n_envs=2), "env_id"),
                                         (dict(env_id="FLSelect-v0", n_envs=2, workers=0), "workers"),
                                         (dict(env_id="FLSelect-v0", n_envs=2, workers=3), "workers"),
                                         (dict(env_id="FLSelect-v0", n_envs=2, seed=-1), "seed")])
def test_bad_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=f"{name}="):
        fl_gym.make_vec(**kwargs)


def test_mixed_ids_are_refused():
    from fl_gym.envs.vector import BatchedVecEnv

    with pytest.raises(ValueError, match="env_fns="):
        BatchedVecEnv([lambda: gym.make("FLSelect-v0"), lambda: gym.make("FLAggregate-v0")])


def test_envs_of_another_package_are_refused():
    """Not an ``AttributeError`` from inside the vector env: the argument and what is allowed."""
    from fl_gym.envs.vector import BatchedVecEnv

    with pytest.raises(ValueError, match="env_id='CartPole-v1' is out of range; allowed: a registered fl"):
        fl_gym.make_vec("CartPole-v1", 2)
    with pytest.raises(ValueError, match=r"env_fns=\['CartPole-v1'\] .* allowed: constructors of an fl-gym"):
        BatchedVecEnv([lambda: gym.make("CartPole-v1")] * 2)


def test_seeds_are_checked_when_given_not_at_the_next_reset():
    vec = fl_gym.make_vec("FLHetero-v0", 2)
    for bad in (-1, "a"):
        message = f"seed={bad!r} is out of range; allowed: an integer in [0, "
        with pytest.raises(ValueError, match=re.escape(message)):
            vec.seed(bad)
    with pytest.raises(ValueError, match=r"seeds=-5 is out of range; allowed: an integer in \[0, "):
        vec.seed_copies([1, -5])
    assert vec.seed(3) == [3, 4]
    np.testing.assert_array_equal(vec.reset()[1], gym.make("FLHetero-v0").reset(seed=4)[0])


@pytest.mark.parametrize("workers", [1, 2])
def test_reset_options_are_checked_when_given_not_at_the_next_reset(workers):
    """SB3's ``set_options`` stored anything: 5 failed at the reset as "'int' object is not subscriptable",
    and so did Gymnasium's ``reset(options=5)`` on the vector entry point; a short list, an IndexError."""
    vec = fl_gym.make_vec("FLHetero-v0", 2, workers=workers)
    allowed = "is out of range; allowed: None, a dict, or a list of 2 dicts, one per copy"
    for bad in (5, [{}], [{}, 5]):
        with pytest.raises(ValueError, match=re.escape(f"options={bad!r} {allowed}")):
            vec.set_options(bad)
    vec.set_options([{}, None])
    vec.reset()
    vec.close()
    env = gym.make_vec("FLHetero-v0", 2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match=r"^options=5 is out of range"):
        env.reset(options=5)
    env.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_batch_of_actions_is_one_row_per_copy(workers):
    """A third row for two copies would be dropped, as SB3's DummyVecEnv drops it."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=workers, rounds_per_episode=2)
    vec.reset()
    for actions in (np.zeros((3, 10), np.float32), np.zeros((1, 10), np.float32), np.float32(0)):
        with pytest.raises(ValueError, match=rf"actions has shape {re.escape(str(actions.shape))}; "
                                             "allowed: 2 rows, one per copy"):
            vec.step(actions)
    ragged = [np.zeros(10, np.float32), np.zeros(9, np.float32)]  # was numpy's "inhomogeneous shape"
    with pytest.raises(ValueError, match=r"^actions=\[.*\] is out of range; allowed: 2 rows, one per copy "):
        vec.step(ragged)
    vec.step(np.zeros((2, 10), np.float32))  # still steps after the refusals
    vec.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_calls_out_of_sb3s_order_raise_gymnasiums_error_instead_of_hanging_or_mixing_replies(workers):
    """A sharded env waited forever for a step_wait() without step_async(), and read one call's replies
    as the next call's; both envs now refuse the call and stay usable."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=workers, rounds_per_episode=2)
    vec.reset()
    actions = np.zeros((2, 10), np.float32)
    with pytest.raises(gym.error.NoAsyncCallError, match=r"step_wait\(\) before step_async\(actions\)"):
        vec.step_wait()
    vec.step_async(actions)
    other = np.tile(np.linspace(-1, 1, 10, dtype=np.float32), (2, 1))  # other aggregation weights
    for call in (lambda: vec.step_async(other), vec.reset, lambda: vec.get_attr("rounds_played")):
        with pytest.raises(gym.error.AlreadyPendingCallError, match=r"\(\) while a step is in flight"):
            call()
    _, rewards, dones, _ = vec.step_wait()
    assert vec.get_attr("rounds_played") == [1, 1] and not dones.any()  # the one step, played once
    twin = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=workers, rounds_per_episode=2)
    twin.reset()
    np.testing.assert_array_equal(rewards, twin.step(actions)[1])  # with the first actions, not the refused
    twin.close()
    vec.step_async(actions)
    vec.close()  # with a step in flight: its replies are read, not taken for close's
    for call in (lambda: vec.step(actions), vec.reset, lambda: vec.env_method("action_masks")):
        with pytest.raises(gym.error.ClosedEnvironmentError, match=r"\(\) after close\(\)"):
            call()
    vec.close()  # a second close does nothing


@pytest.mark.parametrize("workers", [1, 2])
def test_the_vector_envs_answer_get_images_as_dummy_vec_env_does_for_unrendered_envs(workers):
    """SB3's VecEnv.get_images raised a bare NotImplementedError (VecVideoRecorder and render() call it)."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=workers, rounds_per_episode=3)
    dummy = DummyVecEnv([lambda: gym.make("FLAggregate-v0", rounds_per_episode=3)] * 2)
    with pytest.warns(UserWarning, match="render mode is None"):
        expected = dummy.get_images()
    assert vec.get_images() == expected == [None, None]
    vec.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_gymnasium_vector_env_calls_gets_and_sets_on_its_copies_as_sync_vector_env(workers):
    """``call``, ``get_attr``, ``set_attr`` and ``render`` of ``SyncVectorEnv`` had been missing."""
    vec = gym.make_vec("FLAggregate-v0", 2, vectorization_mode="vector_entry_point", workers=workers,
                       rounds_per_episode=3)
    sync = gym.make_vec("FLAggregate-v0", 2, vectorization_mode="sync", rounds_per_episode=3)
    for env in (vec, sync):
        env.reset(seed=0)
        assert env.call("get_wrapper_attr", "rounds_per_episode") == (3, 3)  # a method, with its argument
        assert env.call("rounds_played") == env.get_attr("rounds_played") == (0, 0)  # an attribute
        env.set_attr("tag", ["a", "b"])
        assert env.get_attr("tag") == ("a", "b")
        env.set_attr("tag", "c")
        assert env.get_attr("tag") == ("c", "c")
        assert env.render() == (None, None)
    with pytest.raises(ValueError, match=r"values=\['a'\] is out of range; allowed: 2 values, one per copy"):
        vec.set_attr("tag", ["a"])
    vec.close()
    sync.close()


def test_a_sharded_step_cut_short_while_waiting_stays_in_flight_for_the_next_step_wait(monkeypatch):
    """Ctrl-C in step_wait left the replies in the pipes, and the next step read the old step's."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=2, rounds_per_episode=3)
    vec.reset()
    actions = np.zeros((2, 10), np.float32)
    vec.step_async(actions)

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(vec.workers[0], "receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        vec.step_wait()
    monkeypatch.undo()
    with pytest.raises(gym.error.AlreadyPendingCallError):
        vec.step_async(actions)
    vec.step_wait()
    assert vec.get_attr("rounds_played") == [1, 1]
    vec.step(actions)
    assert vec.get_attr("rounds_played") == [2, 2]
    vec.close()


def test_a_killed_worker_is_named_and_close_still_joins_the_others():
    """A worker killed (out of memory, say) gave a BrokenPipeError, and close() an EOFError."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=2, rounds_per_episode=3)
    vec.reset()
    os.kill(vec.workers[1].process.pid, signal.SIGKILL)
    vec.workers[1].process.join()
    with pytest.raises(WorkerLost, match=r"worker process \d+ of this vector env has ended \(exit code -9\)"):
        vec.step(np.zeros((2, 10), np.float32))
    vec.close()
    assert vec.closed and not any(w.process.is_alive() for w in vec.workers)


def test_ctrl_c_reaching_the_workers_leaves_them_to_the_parent():
    """Ctrl-C goes to every process of the terminal's group: the workers died printing a
    ``KeyboardInterrupt`` traceback each, while the parent was closing them anyway."""
    vec = fl_gym.make_vec("FLAggregate-v0", 2, seed=0, workers=2, rounds_per_episode=3)
    vec.reset()
    actions = np.zeros((2, 10), np.float32)
    vec.step_async(actions)
    for worker in vec.workers:
        os.kill(worker.process.pid, signal.SIGINT)
    vec.step_wait()
    vec.step(actions)
    assert vec.get_attr("rounds_played") == [2, 2]
    vec.close()
    assert [w.process.exitcode for w in vec.workers] == [0, 0]


def test_a_script_without_the_main_guard_is_told_so(tmp_path):
    """A worker imports the script first and died starting workers of its own; the caller read
    "has ended (exit code 1), and its copies with it; close() the env and build a new one"."""
    import subprocess
    import sys

    script = tmp_path / "noguard.py"
    script.write_text('import fl_gym\nfl_gym.make_vec("FLAggregate-v0", 2, workers=2).close()\n')
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("fl_gym.envs.sharded.WorkerLost: worker process")
    assert last.endswith('before it answered: a script that starts workers needs its code under '
                         '`if __name__ == "__main__":`; else its traceback above says why')


def test_a_copy_its_worker_cannot_build_raises_its_own_error_in_the_caller_and_no_worker_is_left():
    """A bad argument raised in the worker processes, which died printing its traceback, and the caller
    got ``WorkerLost`` ("close() the env and build a new one") for an env it never received."""
    import multiprocessing as mp

    before = set(mp.active_children())  # another test's workers, if any are alive
    with pytest.raises(ValueError, match=r"^lr=-1 is out of range; allowed: a float in \(0, 100\]$"):
        fl_gym.make_vec("FLAggregate-v0", 2, workers=2, lr=-1)
    assert not set(mp.active_children()) - before


def test_gymnasium_make_vec_uses_the_batched_env_with_same_step_autoreset():
    from gymnasium.vector import AutoresetMode

    env = gym.make_vec("FLLearningRate-v0", 2, vectorization_mode="vector_entry_point", rounds_per_episode=2)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    solo = [gym.make("FLLearningRate-v0", rounds_per_episode=2) for _ in range(2)]
    obs, _ = env.reset(seed=4)
    for i, s in enumerate(solo):
        np.testing.assert_allclose(obs[i], s.reset(seed=4 + i)[0], atol=1e-5)
    actions = np.zeros((2, 5), np.float32)
    for _ in range(3):
        obs, rewards, terminated, truncated, infos = env.step(actions)
        for i, s in enumerate(solo):
            o, r, _, tr, _ = s.step(actions[i])
            assert truncated[i] == tr and rewards[i] == pytest.approx(r, abs=1e-5)
            if tr:
                assert infos["_final_obs"][i]
                np.testing.assert_allclose(infos["final_obs"][i], o, atol=1e-5)
                o, _ = s.reset()
            np.testing.assert_allclose(obs[i], o, atol=1e-5)
    assert env.observation_space.shape == (2, 47) and env.action_space.shape == (2, 5)
    env.close()


@pytest.mark.parametrize("kwargs", [{}, {"randomize_scenario": True, "num_clients_range": (6, 12)}])
def test_gymnasiums_vector_infos_hold_each_copys_arrays_whatever_their_lengths(kwargs):
    """Gymnasium batches an info key into one array of the first copy's shape, which failed on the ids a
    selection kept (how many differs between copies) and on copies of different client counts."""
    env = gym.make_vec("FLSelect-v0", 3, vectorization_mode="vector_entry_point", rounds_per_episode=3,
                       **kwargs)
    solo = [gym.make("FLSelect-v0", rounds_per_episode=3, **kwargs) for _ in range(3)]
    env.reset(seed=0)
    for i, s in enumerate(solo):
        s.reset(seed=i)
    env.action_space.seed(0)
    lengths = set()
    for _ in range(2):
        actions = env.action_space.sample()
        infos = env.step(actions)[4]
        for i, s in enumerate(solo):
            info = s.step(actions[i])[4]
            for key, value in info.items():
                if isinstance(value, np.ndarray):  # merged training may move a float's last bit
                    batched = np.asarray(infos[key][i], np.float64)
                    np.testing.assert_allclose(batched, value.astype(np.float64), rtol=1e-5, atol=1e-6,
                                               err_msg=key)
            lengths.add(len(info["select/kept"]))
    assert len(lengths) > 1  # the case that failed
    env.close()


def test_gymnasiums_vector_reset_takes_a_numpy_seed_and_refuses_other_types_by_name():
    """A NumPy integer seed raised a TypeError, and a string was read as a list of seeds."""
    env = gym.make_vec("FLHetero-v0", 2, vectorization_mode="vector_entry_point")
    np.testing.assert_array_equal(env.reset(seed=np.int64(3))[0], env.reset(seed=[3, 4])[0])
    for seed in (True, 3.0, "a", -1):
        allowed = rf"^seed={re.escape(repr(seed))} is out of range; allowed: an integer"
        with pytest.raises(ValueError, match=allowed):
            env.reset(seed=seed)
    with pytest.raises(ValueError, match=r"^seeds=\[1\] is out of range; allowed: 2 seeds, one per copy"):
        env.reset(seed=[1])
    env.close()


def test_evaluation_runs_the_seeds_side_by_side_as_their_solo_episodes():
    """``evaluate`` steps the seeds as copies of one batched env; episodes that end at the target
    early (different lengths per seed) wait for the others and equal the stand-alone ones."""
    from fl_gym.training.compare import policy_spec
    from fl_gym.training.evaluation import evaluate, run_episode

    kwargs = dict(rounds_per_episode=6, target_accuracy=0.75, stop_at_target=True)
    spec = policy_spec("fedadp", "FLAggregate-v0")
    seeds = [3, 4, 5]
    batched = evaluate(lambda: gym.make("FLAggregate-v0", **kwargs), spec.factory, seeds)
    for seed, episode in zip(seeds, batched, strict=True):
        env = gym.make("FLAggregate-v0", **kwargs)
        solo = run_episode(env, spec.factory(env), seed)
        assert episode.seed == seed and len(episode.rewards) == len(solo.rewards)
        np.testing.assert_allclose(episode.rewards, solo.rewards, rtol=0, atol=1e-5)
        assert episode.series("accuracy") == pytest.approx(solo.series("accuracy"), abs=1e-5)
    assert len({len(e.rewards) for e in batched}) > 1  # the test covers episodes of different lengths


TIMING = [env_id for env_id in IDS if family_of(env_id).vector_clock]


INJECTED = [("FLHeteroAlloc-v0", {"intensity_policy": "inverse", "obs_mode": "extended"}),
            ("FLHeteroAlloc-v0", {"intensity_policy": "random"}),
            ("FLHeteroIntensity-v0", {"allocation_policy": "oracle", "obs_mode": "extended"}),
            ("FLHeteroIntensity-v0", {"allocation_policy": "random"})]


TIMING_CASES = ([(i, {"obs_mode": m}) for i in TIMING for m in OBS_MODES] + INJECTED
                + [(TIMING[0], {"randomize_scenario": True}),
                   (TIMING[0], {"residual_policy": "oracle"}),
                   (TIMING[0], {"randomize_scenario": True, "num_clients_range": (6, 14),
                                "obs_mode": "history"}),
                   (TIMING[0], {"obs_mode": "history", "load_persistence": 0.9, "sigma_drift": 0.5}),
                   (TIMING[0], {"randomize_scenario": True, "num_clients_range": (6, 14),
                                "load_persistence": 0.9, "sigma_drift": 0.5}),
                   # links that take time: the round's communication, timed over rows
                   (TIMING[0], {"bandwidth": 2e5, "bandwidth_heterogeneity": 4.0,
                                "download_ratio": 2.0, "aggregation_time": 0.5})])


def _phase_step(env, action):
    """``env``'s step through its federation's phases (``FLEnv.play``, then the observation), as every
    family that trains steps: the reference a timing clock's rows must equal."""
    u = env.unwrapped
    reward, terminated, truncated, info = u.play(action)
    return u.observation(), reward, terminated, truncated, info


@pytest.mark.parametrize("env_id,kwargs", TIMING_CASES)
def test_timing_copies_play_the_standalone_episode_bit_for_bit(env_id, kwargs):
    """The family's vector clock plays every copy's step as arrays; observations, rewards and
    every info value equal those of the stand-alone env stepped through the federation's phases
    exactly, through auto-resets (which, with ``randomize_scenario``, bring new device profiles
    and partitions, and with ``num_clients_range`` copies of different client counts, padded to
    the widest), with the views' injected policies asked in one batch (fixed ones by name) or per
    copy (``random``: each copy's stream). The copies hold the state their own steps would have
    left: a copy's pending round, built when read, is its twin's, and a copy stepped alone in
    between plays on as its twin."""
    n, rounds = 3, 3
    vec = fl_gym.make_vec(env_id, n, seed=5, monitor=False, rounds_per_episode=rounds, **kwargs)
    assert vec._clock is None and vec._clock_class is not None  # built at the first reset
    solo = [gym.make(env_id, rounds_per_episode=rounds, **kwargs) for _ in range(n)]
    obs = vec.reset()
    for i, env in enumerate(solo):
        np.testing.assert_array_equal(obs[i], env.reset(seed=5 + i)[0])
    rng = np.random.default_rng(0)
    counts = set()
    for _ in range(2 * rounds + 1):
        _assert_vector_step_is_each_twins_step(vec, solo, _actions(vec.action_space, n, rng))
        counts.add(tuple(env.unwrapped.federation.num_clients for env in vec.envs))
    if "num_clients_range" in kwargs:  # the copies' client counts differed, and changed at the resets
        assert len(counts) > 1 and any(len(set(c)) > 1 for c in counts)
    for copy, twin in zip(vec.envs, solo, strict=True):
        _assert_same_record(copy.unwrapped._pending, twin.unwrapped._pending)
    action = _actions(vec.action_space, 1, rng)[0]
    np.testing.assert_array_equal(vec.envs[1].step(action)[0], _phase_step(solo[1], action)[0])
    for _ in range(rounds):
        _assert_vector_step_is_each_twins_step(vec, solo, _actions(vec.action_space, n, rng))


@pytest.mark.parametrize("env_id,kwargs", TIMING_CASES)
def test_a_timing_envs_own_step_is_its_clocks_one_row_and_the_phases_episode(env_id, kwargs):
    """A stand-alone timing env steps as the one row of its family's vector clock (the federation's
    phases play no step of it) and plays the phases' episode bit for bit: observations, rewards and
    every info value and its type, through resets, with a step through the phases in between."""
    rounds = 3
    alone, twin = (gym.make(env_id, rounds_per_episode=rounds, **kwargs) for _ in range(2))
    phase_steps, play = [], alone.unwrapped._play

    def spy(*args):
        phase_steps.append(args)
        return play(*args)

    alone.unwrapped._play = spy
    np.testing.assert_array_equal(alone.reset(seed=7)[0], twin.reset(seed=7)[0])
    rng = np.random.default_rng(1)
    for t in range(2 * rounds + 2):
        action = _actions(alone.action_space, 1, rng)[0]
        mine = _phase_step(alone, action) if t == rounds + 1 else alone.step(action)
        theirs = _phase_step(twin, action)
        _assert_same_step(mine, theirs)
        if mine[2] or mine[3]:
            np.testing.assert_array_equal(alone.reset()[0], twin.reset()[0])
    assert len(phase_steps) == 1  # the one step asked of the phases
    _assert_same_record(alone.unwrapped.pending, twin.unwrapped.pending)  # built from the clock's row


def _assert_same_step(mine, theirs):
    """Two steps' ``(obs, reward, terminated, truncated, info)`` equal exactly, info's values of one type."""
    np.testing.assert_array_equal(mine[0], theirs[0])
    assert mine[1:4] == theirs[1:4] and type(mine[1]) is type(theirs[1])
    assert list(mine[4]) == list(theirs[4])
    for key, value in theirs[4].items():
        assert type(mine[4][key]) is type(value), key
    _assert_same_values(mine[4], theirs[4])


def _assert_same_values(mine, theirs):
    """Every value of the info ``theirs`` equals ``mine``'s under its key (dicts by ==, arrays exactly)."""
    for key, value in theirs.items():
        if isinstance(value, dict):
            assert mine[key] == value, key
        else:
            np.testing.assert_array_equal(mine[key], value, err_msg=key)


def _assert_vector_step_is_each_twins_step(vec, solo, actions):
    obs, rewards, dones, infos = vec.step(actions)
    for i, env in enumerate(solo):
        o, r, terminated, truncated, info = _phase_step(env, actions[i])
        assert dones[i] == (terminated or truncated) and rewards[i] == np.float32(r)
        if dones[i]:
            np.testing.assert_array_equal(infos[i]["terminal_observation"], o)
            o, _ = env.reset()
        np.testing.assert_array_equal(obs[i], o)
        assert list(info) == [k for k in infos[i] if k not in ("TimeLimit.truncated", "terminal_observation")]
        _assert_same_values(infos[i], info)


def _assert_same_record(a, b):
    """Two records (dataclasses of arrays, numbers and records) with equal fields, exactly."""
    assert type(a) is type(b)
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if dataclasses.is_dataclass(x):
            _assert_same_record(x, y)
        else:
            np.testing.assert_array_equal(x, y, err_msg=field.name)


@pytest.mark.parametrize("env_id", ["FLHeteroAlloc-v0", "FLSelect-v0"])
def test_a_bad_action_of_one_copy_raises_that_copys_error_before_any_copy_plays(env_id):
    """The copies' actions are checked as rows (by a timing clock, or before merged rounds): one copy's
    out-of-range action raises the error its own step would, no copy has played the round, and the
    next step plays as the stand-alone twins do."""
    vec, solo = _vector_and_twins(env_id, 3)
    rng = np.random.default_rng(0)
    actions = _actions(vec.action_space, 3, rng)
    bad = actions.copy()
    bad[1, 0] = 2 if env_id == "FLSelect-v0" else vec.action_space.nvec[0]  # one past the largest value
    with pytest.raises(ValueError) as caught:
        vec.step(bad)
    with pytest.raises(ValueError) as alone:
        vec.envs[1].unwrapped.check_action(bad[1])
    assert str(caught.value) == str(alone.value) and "is out of range" in str(caught.value)
    assert [env.unwrapped.rounds_played for env in vec.envs] == [0, 0, 0]
    _assert_step_is_each_twins_step_within_tolerance(vec, solo, actions)
    vec.close()


@pytest.mark.parametrize("batchable,calls", [(True, [(4, 6)]), (False, [(6,)] * 4)])
def test_timing_copies_ask_a_shared_batchable_policy_once_and_any_other_once_per_copy(batchable, calls):
    """One object injected into every copy that decides each row as alone (``batchable``) gets one
    call with the copies' rows when their rounds open; otherwise each copy asks its own."""
    from fl_gym.baselines.hetero import GreedyBySpeedPolicy

    seen = []

    class Counting(GreedyBySpeedPolicy):
        def predict(self, observation, *args, **kwargs):
            seen.append(np.shape(observation))
            return super().predict(observation, *args, **kwargs)

    Counting.batchable = batchable
    spec = gym.make("FLHeteroAlloc-v0").unwrapped.hetero
    vec = fl_gym.make_vec("FLHeteroIntensity-v0", 4, seed=0, allocation_policy=Counting(spec))
    vec.reset()
    seen.clear()
    vec.step(_actions(vec.action_space, 4, np.random.default_rng(0)))
    assert seen == calls


def test_auto_workers_one_per_core_with_eight_copies_each_and_one_for_timing_copies():
    import os

    from fl_gym.envs.vector import BatchedVecEnv
    from fl_gym.envs.vectorize import auto_workers, batched_vec_env

    cores = os.cpu_count() or 1
    assert auto_workers(7) == 1 and auto_workers(64) == min(cores, 8) and auto_workers(64, trains=False) == 1
    vec = batched_vec_env([lambda: gym.make("FLHetero-v0")] * 16, workers=None)  # timing: never sharded
    assert isinstance(vec, BatchedVecEnv)
    vec.close()


def test_each_copy_takes_its_own_seed_through_the_public_vector_protocol():
    env = gym.make_vec("FLHetero-v0", 3, vectorization_mode="vector_entry_point")
    obs, _ = env.reset(seed=[7, 3, 11])
    for i, seed in enumerate((7, 3, 11)):
        np.testing.assert_array_equal(obs[i], gym.make("FLHetero-v0").reset(seed=seed)[0])
    with pytest.raises(ValueError, match="seeds=\\[1\\] is out of range; allowed: 3 seeds, one per copy"):
        fl_gym.make_vec("FLHetero-v0", 3).seed_copies([1])


@pytest.mark.parametrize("kwargs,name", [({"n_envs": 0}, "n_envs"), ({"n_envs": 10**12}, "n_envs"),
                                         ({"seed": -1}, "seed"), ({"seed": 2**32}, "seed"),
                                         ({"monitor": "no"}, "monitor")])
def test_make_vec_refuses_copies_and_seeds_out_of_range_before_building_any(kwargs, name):
    """10**12 copies would build envs until memory ran out; a seed past 2**32 fails inside SB3's seeding;
    ``monitor="no"`` read as True."""
    arguments = {"env_id": "FLAggregate-v0", "n_envs": 2, **kwargs}
    allowed = "True or False" if name == "monitor" else r"an integer in \["
    message = rf"{name}={kwargs[name]!r} is out of range; allowed: {allowed}"
    with pytest.raises(ValueError, match=message):
        fl_gym.make_vec(**arguments)


def test_make_vec_names_env_kwargs_and_gymnasiums_num_envs_when_refusing_them():
    """``env_kwargs=[...]`` was the ``TypeError`` of merging it; Gymnasium's ``num_envs`` read n_envs."""
    with pytest.raises(ValueError, match=r"^env_kwargs=\[1\] is out of range; allowed: None or a mapping"):
        fl_gym.make_vec("FLAggregate-v0", 2, env_kwargs=[1])
    with pytest.raises(ValueError, match=r"^num_envs=0 is out of range; allowed: an integer in \[1, "):
        gym.make_vec("FLAggregate-v0", 0, vectorization_mode="vector_entry_point")


@pytest.mark.parametrize("env_id,kwargs", [(i, {}) for i in IDS]
                         + [("FLAggregate-v0", {"dataset": "synthetic"})])
def test_every_copys_requests_merge_whatever_the_copy_count(env_id, kwargs):
    """Copies built alike hand in requests that merge (the same data tensors, model and rules, a
    generated data set's too): a step of four copies makes the engine calls of a step of two."""
    from fl_gym.training.vec_bench import engine_calls_per_step

    calls = []
    for n in (2, 4):
        vec = fl_gym.make_vec(env_id, n, seed=0, rounds_per_episode=3, **kwargs)
        if vec.batcher is None:  # copies that train nothing (a timing backend) make no engine calls
            assert not vec.envs[0].unwrapped.federation.config.train
            vec.close()
            return
        vec.reset()
        vec.action_space.seed(0)
        calls.append(engine_calls_per_step(vec, 3))
        vec.close()
    assert calls[0] == calls[1] >= 4  # a training, its statistics, the averages, their evaluation


def test_merged_trainings_of_a_fixed_cohort_share_one_graph_key_as_the_rate_decays(monkeypatch):
    """What lets a GPU replay one CUDA graph per step (``FL_GYM_CUDA_GRAPHS=1``): every round of
    ``FLAggregate-v0`` trains the same cohort, so its merged training has one shape, though the
    learning rate it trains with decays from round to round (a graph copies the rates in)."""
    from fl_gym.engine import batcher
    from fl_gym.engine.graphs import shape_key

    calls = []

    def recorded(members, x, y, schedule, lr, optimizer, **kwargs):
        calls.append((shape_key(members[0], x, y, schedule, lr, optimizer, kwargs["algorithm"]), lr.clone()))
        return train_cohort(members, x, y, schedule, lr, optimizer, **kwargs)

    train_cohort = batcher.train_cohort
    monkeypatch.setattr(batcher, "train_cohort", recorded)
    vec = fl_gym.make_vec("FLAggregate-v0", 3, seed=5, monitor=False, rounds_per_episode=4)
    vec.reset()
    vec.action_space.seed(0)
    for _ in range(3):
        vec.step(np.stack([vec.action_space.sample() for _ in range(3)]))
    vec.close()
    keys, rates = zip(*calls, strict=True)
    assert len(keys) >= 3 and len(set(keys)) == 1
    assert rates[1][0] < rates[0][0]


def test_the_batchers_synchronize_runs_after_each_turns_engine_calls_before_their_time_is_read():
    vec = fl_gym.make_vec("FLSelect-v0", 2, seed=0, monitor=False)
    vec.reset()
    seen = []
    vec.batcher.synchronize = lambda: seen.append(vec.batcher.engine_seconds)
    before = vec.batcher.engine_seconds
    vec.step(np.stack([vec.action_space.sample() for _ in range(2)]))
    assert seen and seen[0] == before  # called before the turn's time was added
    assert vec.batcher.engine_seconds > seen[-1]
    vec.close()


def test_copies_of_other_spaces_or_no_env_are_refused_when_the_vector_env_is_built():
    """Copies of 10 and 12 clients built (the first copy's spaces) and failed at reset in numpy's stack;
    an env where SB3 wants a function, or a function returning None, failed with an AttributeError."""
    from fl_gym.envs.sharded import ShardedVecEnv
    from fl_gym.envs.vector import BatchedVecEnv

    ten, twelve = (lambda: gym.make("FLAggregate-v0")), (lambda: gym.make("FLAggregate-v0", num_clients=12))
    other = (r"^env_fns\[2\] builds observations of shape \(87,\) and actions Box\(-1.0, 1.0, \(12,\), "
             r"float32\); allowed: copy 0's, of shape \(73,\)")
    with pytest.raises(ValueError, match=other):
        BatchedVecEnv([ten, ten, twelve])
    with pytest.raises(ValueError, match=other):  # the shards' spaces, compared in the caller
        ShardedVecEnv([ten, ten, twelve, twelve], workers=2)
    with pytest.raises(ValueError, match=r"^env_fns=\['OrderEnforcing'\] is out of range; allowed: func"):
        BatchedVecEnv([gym.make("FLAggregate-v0")])
    with pytest.raises(ValueError, match=r"^env_fns=\['NoneType'\] is out of range; allowed: functions that"):
        BatchedVecEnv([lambda: None])
