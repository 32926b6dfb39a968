"""Generic tests over every registered env id (the toy family of tests/toy_family.py included)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import re
import signal
import warnings
import weakref

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env, data_equivalence
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import fl_gym  # noqa: F401  (registers the ids)
from fl_gym.envs.registry import (
    FAMILIES,
    Family,
    Metric,
    PolicyEntry,
    Recipe,
    Stage,
    env_ids,
    family_of,
    register_family,
    resolve,
)
from fl_gym.validation import UserError

IDS = env_ids()


def test_the_toy_family_is_registered_without_a_generic_module_knowing_it():
    assert "FLToy-v0" in IDS and "toy" in FAMILIES and family_of("FLToy-v0").name == "toy"
    register_family(FAMILIES["toy"])  # the same family again: nothing changes
    assert env_ids() == IDS


MINE = {"FLMine-v0": "toy_family:FLToyEnv"}


@pytest.mark.parametrize("entry,said", [
    ("nosuch_module:X", "(no module 'nosuch_module')"),  # ModuleNotFoundError
    ("fl_gym.envs:Nope", "(fl_gym.envs has no 'Nope')"),  # AttributeError
    ("fl_gym.envs", "'module:attribute'"),  # module 'fl_gym.envs' has no attribute ''
])
def test_an_entry_point_that_names_nothing_is_refused_by_name(entry, said):
    with pytest.raises(ValueError, match=re.escape(f"entry point={entry!r} is out of range; allowed: ")
                       + ".*" + re.escape(said)):
        resolve(entry)


def test_an_import_error_inside_the_named_module_is_its_own(tmp_path, monkeypatch):
    """A missing optional extra inside the module is not the entry point's fault: its error passes through."""
    (tmp_path / "needs_extra.py").write_text("import nosuch_extra\nX = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="nosuch_extra"):
        resolve("needs_extra:X")


def test_a_family_whose_policies_entry_point_names_no_policies_is_named_when_read():
    """``"module:attribute"`` is resolved on first use: a wrong one failed there with an AttributeError."""
    entry = "fl_gym.envs.registry:GENERIC_METRICS"
    family = Family("mine", "p", MINE, policies=entry)
    said = f"family 'mine': policies={entry!r} is out of range; allowed: a mapping of policy names"
    with pytest.raises(ValueError, match=re.escape(said)):
        family.fixed_policies("FLMine-v0")


@pytest.mark.parametrize("family,said", [
    # the toy's ids left the registry without a word
    (Family("toy", "another", {"FLOther-v0": "toy_family:FLToyEnv"}), "family.name='toy' is out of range"),
    # the registry named the new family, Gymnasium still made HAPFL's env
    (Family("mine", "p", {"FLHetero-v0": "toy_family:FLToyEnv"}), "(family 'hetero' has it)"),
    (Family("mine", "p", {"CartPole-v1": "toy_family:FLToyEnv"}), "(Gymnasium makes gymnasium.envs."),
    # an AttributeError ('list' object has no attribute 'items')
    (Family("mine", "p", ["FLMine-v0"]), "envs=['FLMine-v0'] is out of range; allowed: a mapping"),
    (Family("", "p", {}), "family.name='' is out of range; allowed: a non-empty name"),
    # a recipe whose stage injects a later stage failed when trained: KeyError: 'b'
    (Family("mine", "p", MINE, recipes=(Recipe("r", "FLMine-v0", (Stage("a", "FLMine-v0", {"policy": "b"}),
                                                               Stage("b", "FLMine-v0")), "m:c"),)),
     "recipe 'r': stage 'a': inject['policy']='b' is out of range; allowed: an earlier stage (none)"),
    (Family("mine", "p", MINE, recipes=(Recipe("r", "FLOther-v0", (), "m:c"),)),
     "recipe 'r': target='FLOther-v0' is out of range; allowed: one of the family's ids (FLMine-v0)"),
    (Family("mine", "p", MINE, recipes=(Recipe("r", "FLMine-v0", (Stage("a", "FLOther-v0"),), "m:c"),)),
     "recipe 'r': stage 'a': env_id='FLOther-v0' is out of range"),
    (Family("mine", "p", MINE, recipes=(Recipe("r", "FLMine-v0", 5, "m:c"),)),
     "recipe 'r': stages=5 is out of range; allowed: a tuple of a Stage"),
    # a metric or policy for an id the family lacks was never shown
    (Family("mine", "p", MINE, metrics=(Metric("k", "label", env_ids=("FLOther-v0",)),)),
     "metric 'k': env_ids=('FLOther-v0',) is out of range; allowed: ids of the family (FLMine-v0)"),
    (Family("mine", "p", MINE, policies={"x": PolicyEntry("m:f", "d", env_ids=("FLOther-v0",))}),
     "policy 'x': env_ids=('FLOther-v0',) is out of range"),
    (Family("mine", "p", MINE, policies={"x": PolicyEntry(5, "d")}), "policy 'x': factory=5 is out of range"),
])
def test_a_family_that_would_replace_another_or_a_gymnasium_id_is_refused(family, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        register_family(family)
    assert env_ids() == IDS and "mine" not in FAMILIES


@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_and_sb3_check_env_without_warnings(env_id):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id)
        check_env(env.unwrapped)
        sb3_check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("env_id", IDS)
def test_a_spec_serialises_to_json_and_makes_the_same_env_and_vector_env(env_id):
    """Gymnasium serialises no callables: the vector entry point is a string, as the entry point is."""
    spec = gym.make(env_id, rounds_per_episode=3).spec
    again = EnvSpec.from_json(spec.to_json())
    assert again == spec and gym.make(again).unwrapped.rounds_per_episode == 3
    vec = gym.make_vec(again, 2, vectorization_mode="vector_entry_point")
    assert vec.num_envs == 2 and vec.unwrapped.spec.id == env_id
    vec.close()


def test_the_vector_entry_points_module_names_only_registered_ids():
    from fl_gym.envs import vector_entry

    with pytest.raises(AttributeError, match="no attribute 'FLNope-v0'"):
        vector_entry.__getattr__("FLNope-v0")


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_episode_bit_for_bit_and_truncation(env_id):
    env_a, env_b = gym.make(env_id, rounds_per_episode=5), gym.make(env_id, rounds_per_episode=5)
    env_a.action_space.seed(3)
    actions = [env_a.action_space.sample() for _ in range(5)]
    assert data_equivalence(env_a.reset(seed=42), env_b.reset(seed=42), exact=True)
    for t, action in enumerate(actions):
        out_a, out_b = env_a.step(action), env_b.step(action)
        assert data_equivalence(out_a, out_b, exact=True)
        assert out_a[3] == (t == 4) and out_a[2] is False
    with pytest.raises(gym.error.ResetNeeded, match="after the episode ended"):
        env_a.unwrapped.step(actions[0])


@pytest.mark.parametrize("env_id", IDS)
def test_step_before_reset_is_a_clear_error(env_id):
    env = gym.make(env_id).unwrapped
    with pytest.raises(gym.error.ResetNeeded, match="step\\(\\) before reset\\(\\)"):
        env.step(env.action_space.sample())
    if hasattr(env, "action_masks"):  # a mask that reads the pending round says so (it was an AttributeError)
        try:
            assert env.action_masks().dtype == bool
        except gym.error.ResetNeeded as err:
            assert "action_masks() before reset()" in str(err)


@pytest.mark.parametrize("env_id", IDS)
def test_reset_options_are_refused_not_ignored(env_id):
    env = gym.make(env_id)
    env.reset(seed=0, options={})  # empty, as Gymnasium's checker passes
    with pytest.raises(ValueError,
                       match="options=\\{'scenario_seed': 3\\} is out of range; allowed: None or"):
        env.reset(seed=0, options={"scenario_seed": 3})


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_a_bad_reset_seed_is_refused_by_name(seed):
    """Gymnasium's own error for -1 or 1.5 was no ValueError and named no parameter; True seeded as 1."""
    env = gym.make("FLSelect-v0")
    message = rf"^seed={re.escape(repr(seed))} is out of range; allowed: None or an integer >= 0$"
    with pytest.raises(ValueError, match=message):
        env.reset(seed=seed)
    assert env.reset(seed=np.int64(3))[1] == {"round": 0}


@pytest.mark.parametrize("env_id", IDS)
def test_unknown_kwargs_are_rejected_naming_the_allowed_ones(env_id):
    allowed = "argument 'rounds_per_episdoe' is not accepted; allowed: .*rounds_per_episode,"
    with pytest.raises(ValueError, match=allowed):
        gym.make(env_id, rounds_per_episdoe=3)
    with pytest.raises(ValueError, match="scenario_seed=-1"):
        gym.make(env_id, scenario_seed=-1)


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_fuzz_valid_actions_keep_the_spaces_and_info_keys(env_id, seed):
    env = gym.make(env_id, rounds_per_episode=3)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    family = family_of(env_id).name
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and np.isfinite(reward)
        assert np.isfinite(env.unwrapped._observe(env.unwrapped.pending)).all()  # none diverged, none zeroed
        assert {"round", "sim_time", "round_time", "straggling_latency", "uploads",
                "reward_terms"} <= set(info)
        assert all("/" not in k or k.startswith(f"{family}/") for k in info)


def _bad_actions(space: gym.Space) -> list[np.ndarray]:
    good = np.asarray(space.sample())
    ragged = [good.ravel()[:1].tolist(), *good.ravel()[1:].tolist()]  # was numpy's "inhomogeneous shape"
    nothing = np.full(good.shape, None, object)  # was an AttributeError while the message was written
    return [np.full(good.shape, np.nan), np.full(good.shape, np.inf), np.zeros(good.size + 1, good.dtype),
            np.array(["x"] * good.size), np.zeros((2, *good.shape), good.dtype), ragged, None, nothing]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy's overflow and invalid-value warnings too
@pytest.mark.parametrize("env_id,kwargs", [
    ("FLSelect-v0", {"model": "cnn-small", "lr": 3.0}),
    ("FLSelect-v0", {"model": "cnn-small", "lr": 3.0, "reward_signal": "loss_vs_all"}),  # was a KeyError
    ("FLAggregate-v0", {"model": "cnn-small", "lr": 3.0, "reward": "loss_drop"}),
    ("FLLearningRate-v0", {"model": "ddfl-mnist-cnn", "reward": "loss_area"}),  # at its highest rates
])
def test_a_diverged_model_leaves_every_observation_in_the_space_and_the_rewards_finite(env_id, kwargs):
    """A CNN trained at too high a rate turns NaN, and the losses, norms and cosines of the family's
    observation rule with it (checked); the observation must not pass them on to an agent's network
    (they read 0), nor the rewards a NaN validation loss (it is charged the cap); and no numpy
    warning fires on the way (an infinite update norm overflowed FLAggregate's mean norm)."""
    env = gym.make(env_id, rounds_per_episode=3, **kwargs)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    vec = fl_gym.make_vec(env_id, 2, seed=0, rounds_per_episode=3, **kwargs)
    rows, raw = [obs, *vec.reset()], []
    action = getattr(env.action_space, "high", None)
    for _ in range(2):
        a = env.action_space.sample() if action is None else action
        obs, reward, _, _, _ = env.step(a)
        rows += [obs, *vec.step(np.stack([a, a]))[0]]
        raw.append(type(env.unwrapped).observe_copies([env.unwrapped])[0])
        assert np.isfinite(reward)
    assert not np.isfinite(raw).all()
    assert all(env.observation_space.contains(row) for row in rows)
    vec.close()


@pytest.mark.parametrize("env_id", IDS)
def test_rows_of_actions_are_checked_as_each_alone_and_the_first_bad_row_is_named(env_id):
    """``check_actions`` over a vector env's rows takes each row as ``check_action`` takes it alone,
    and a bad row raises the error ``check_action`` raises for it (the first such row's)."""
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    env.action_space.seed(0)
    rows = np.stack([env.action_space.sample() for _ in range(4)])
    checked = env.check_actions(rows)
    for row, alone in zip(rows, checked, strict=True):
        np.testing.assert_array_equal(alone, env.check_action(row))
        assert alone.dtype == env.check_action(row).dtype
    bad = rows.astype(np.float64)
    bad[2] = np.nan
    bad[3] = np.inf
    with pytest.raises(ValueError) as caught:
        env.check_actions(bad)
    with pytest.raises(ValueError) as alone:
        env.check_action(bad[2])
    assert str(caught.value) == str(alone.value) and "is not finite" in str(alone.value)
    with pytest.raises(ValueError, match="actions=1 is one value; allowed: rows of actions of"):
        env.check_actions(1)


def test_an_integer_that_the_spaces_dtype_would_wrap_is_out_of_range():
    """MultiBinary's dtype is int8: 257 would become 1, so it is refused, not played as a 1."""
    env = gym.make("FLSelect-v0").unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action=\[257, 0, 1, 0, 0\] is out of range; allowed: integers of"):
        env.check_action(np.array([257, 0, 1, 0, 0]))


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("which", range(8))
def test_bad_actions_raise_a_value_error_naming_the_space(env_id, which):
    env = gym.make(env_id).unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action") as err:
        env.step(_bad_actions(env.action_space)[which])
    assert str(env.action_space) in str(err.value)


@pytest.mark.parametrize("env_id", IDS)
def test_every_id_has_a_fixed_policy_that_acts_in_its_space(env_id):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    policies = family_of(env_id).fixed_policies(env_id)
    assert policies
    built = 0
    for name, entry in policies.items():
        try:
            policy = entry.build(env)
        except ValueError as err:  # a policy for other scenarios (e.g. a size this preset lacks) says so
            assert "is out of range; allowed" in str(err), name
            continue
        action, _ = policy.predict(obs, deterministic=True)
        assert env.action_space.contains(np.asarray(action).astype(env.action_space.dtype)), name
        built += 1
    assert built


@pytest.mark.parametrize("env_id", IDS)
def test_every_fixed_policy_names_its_parameters_and_a_policy_string_with_another_is_refused(env_id):
    """``NAME[key=value]`` is checked against the factory's parameters when parsed: a ``**kwargs``
    factory would let a misspelt keyword through to a ``TypeError`` in the middle of an evaluation."""
    from fl_gym.training.compare import policy_spec

    for name, entry in family_of(env_id).fixed_policies(env_id).items():
        assert entry.parameters() is not None, name
        refused = rf"policy '{re.escape(name)}\[nope=1\]': 'nope' is not one of its parameters; allowed: "
        with pytest.raises(ValueError, match=refused):
            policy_spec(f"{name}[nope=1]", env_id)


@pytest.mark.parametrize("env_id", IDS)
def test_every_fixed_policy_parameter_with_a_bad_value_is_refused_by_name_or_acts(env_id):
    """``compare --policies 'random-drop[q=x]'`` passes the string on: ``0 < q`` was a ``TypeError``."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    for name, entry in family_of(env_id).fixed_policies(env_id).items():
        for param in entry.parameters():
            for value in BAD_VALUES:
                try:
                    policy = entry.build(env, **{param: value})
                except UserError as err:  # named, or a policy for other scenarios (as in the test above)
                    assert f"{param}=" in str(err) or "is out of range; allowed" in str(err), (name, str(err))
                    continue
                action, _ = policy.predict(obs, deterministic=True)
                assert env.action_space.contains(np.asarray(action).astype(env.action_space.dtype)), \
                    (name, param, value)


@pytest.mark.parametrize("env_id", [i for i in IDS if family_of(i).name != "toy"])  # the toy's: no RowPolicy
def test_every_fixed_policy_refuses_an_observation_of_another_shape_or_not_finite(env_id):
    """Rows of another client count, or another env's observation, would be misread without a word."""
    env = gym.make(env_id)
    d = env.reset(seed=0)[0].shape[0]
    checked = 0
    for entry in family_of(env_id).fixed_policies(env_id).values():
        try:
            policy = entry.build(env)
        except ValueError:  # a policy for other scenarios, as above
            continue
        # an empty batch failed inside act() ("need at least one array to stack") or gave no actions
        for bad in (np.zeros(d + 1), np.zeros((2, d - 1)), np.zeros((1, 2, d)), np.float64(1.0),
                    np.zeros((0, d))):
            allowed = rf"observation has shape {re.escape(str(bad.shape))}; allowed: \({d},\) or \(n, {d}\)"
            with pytest.raises(ValueError, match=allowed):
                policy.predict(bad)
        # NaN or infinity made some policies' actions NaN, outside the action space; a complex number
        # lost its imaginary part; a ragged batch or text failed with numpy's words
        obs = env.reset(seed=0)[0]
        for value, said in ((np.nan, "holds nan"), (-np.inf, "holds -inf"), (1j, "holds complex128 values"),
                            ("a", "holds <U32 values")):
            bad = obs.astype(object)
            bad[-1] = value
            with pytest.raises(ValueError, match=re.escape(f"predict: observation {said}; allowed: ({d},)")):
                policy.predict(bad.tolist())
        with pytest.raises(ValueError, match=r"observation=\[\[0.0\], \[0.0, 0.0\]\] is out of range"):
            policy.predict([[0.0], [0.0, 0.0]])
        checked += 1
    assert checked


FIRST_IDS = ("FLHetero-v0", "FLSelect-v0", "FLSelectPick-v0", "FLSelectQueue-v0", "FLAggregate-v0",
             "FLLearningRate-v0")


@pytest.mark.parametrize("env_id", FIRST_IDS)
def test_every_fixed_policy_refuses_an_env_it_does_not_act_on(env_id):
    """On another family's env (or another view of its own) a policy failed deep inside: an AttributeError."""
    others = {i: gym.make(i) for i in FIRST_IDS}
    refused = 0
    for entry in family_of(env_id).fixed_policies(env_id).values():
        for other, env in others.items():
            if family_of(other) is family_of(env_id) and (not entry.env_ids or other in entry.env_ids):
                continue  # one the policy acts on
            refusal = rf": env={other} is out of range; allowed: an env of class "
            with pytest.raises(ValueError, match=refusal):
                entry.build(env)
            refused += 1
    assert refused


@pytest.mark.parametrize("env_id", IDS)
def test_a_batchable_fixed_policy_gives_each_row_of_a_batch_its_own_action(env_id):
    """What lets a vector env ask one policy for all its copies (``RowPolicy.batchable``)."""
    env = gym.make(env_id)
    env.observation_space.seed(1)
    rows = np.stack([env.observation_space.sample() for _ in range(5)])
    for name, entry in family_of(env_id).fixed_policies(env_id).items():
        try:
            policy = entry.build(env)
        except ValueError:  # a policy for other scenarios, as above
            continue
        if getattr(policy, "batchable", False):
            alone = np.stack([policy.predict(row, deterministic=True)[0] for row in rows])
            np.testing.assert_array_equal(policy.predict(rows, deterministic=True)[0], alone, err_msg=name)


@pytest.mark.parametrize("env_id", [i for i in IDS if not family_of(i).vector_clock])
def test_a_step_keeps_no_trained_round_but_the_pending_one(env_id, monkeypatch):
    """A played round's local models are freed once aggregated: before the next round trains, after the step;
    a reset frees the last episode's unplayed round before the first round of the next trains. (A timing
    backend's step trains nothing: its family's vector clock plays it.)"""
    from fl_gym.federation import Federation

    env = gym.make(env_id, rounds_per_episode=5)
    env.reset(seed=0)
    env.action_space.seed(0)
    trained, alive_at_training = [], []
    train_round = Federation.train_round

    def alive() -> int:
        gc.collect()
        return sum(ref() is not None for ref in trained)

    def spy(fed, *args, **kwargs):
        alive_at_training.append(alive())
        out = train_round(fed, *args, **kwargs)
        trained.append(weakref.ref(out))
        return out

    monkeypatch.setattr(Federation, "train_round", spy)
    for _ in range(3):
        env.step(env.action_space.sample())
    env.reset(seed=1)
    assert len(alive_at_training) >= 3 and not any(alive_at_training)
    assert alive() <= 1  # a round that trains before the decision is pending


@pytest.mark.parametrize("env_id", IDS)
def test_a_step_leaves_no_scratch_attribute_on_the_env(env_id):
    """The hooks receive the step's outcome as an argument: a step adds no attribute a reset did not make."""
    env = gym.make(env_id, rounds_per_episode=3)
    env.reset(seed=0)
    env.action_space.seed(0)
    after_reset = set(vars(env.unwrapped))
    for _ in range(2):
        env.step(env.action_space.sample())
    assert set(vars(env.unwrapped)) - after_reset == set()


REAL_TRAINING = {"hetero": {"backend": "torch", "local_epochs": 1}}  # HAPFL's accuracies need real training


@pytest.mark.parametrize("env_id", IDS)
def test_every_registered_metric_appears_in_a_steps_info(env_id):
    """What the tables, plots and TensorBoard read (``metrics_for``) is what a step reports."""
    from fl_gym.envs.registry import metrics_for
    from fl_gym.training.evaluation import flatten_info

    env = gym.make(env_id, rounds_per_episode=2, **REAL_TRAINING.get(family_of(env_id).name, {}))
    env.reset(seed=0)
    env.action_space.seed(0)
    info = flatten_info(env.step(env.action_space.sample())[4])
    learns = env.unwrapped.federation.config.train  # a timing-only federation has no accuracy
    expected = [m.key for m in metrics_for(env_id) if m.key != "return" and (learns or m.key != "accuracy")]
    assert [key for key in expected if key not in info] == []


BAD_VALUES = (None, "abc", [1, 2], float("nan"), float("inf"), float("-inf"), -1, -1e-9, 0, 10**9, 1e9, True,
              {"a": 1})


def _arguments(env_id: str) -> list[str]:
    cfg = gym.make(env_id).unwrapped.config
    own = [f.name for f in dataclasses.fields(cfg) if f.name != "scenario"]
    return own + [f.name for f in dataclasses.fields(cfg.scenario)]


def _refused_by_name_or_steps(env_id: str, name: str, value) -> None:
    """A ``ValueError`` naming ``name`` at ``gym.make``, or an env whose first steps are finite, quickly."""
    kwargs = {"rounds_per_episode": 2, name: value}
    with _answers_within(FUZZ_SECONDS, f"{env_id} with {name}={value!r}"):
        try:
            env = gym.make(env_id, **kwargs)
        except ValueError as err:
            assert f"{name}=" in str(err) or name in str(err), str(err)
            return
        obs, _ = env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(2):
            obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            assert np.all(np.isfinite(obs)) and np.isfinite(reward)
            if terminated or truncated:
                break


@pytest.mark.parametrize("env_id", IDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_fuzz_every_argument_is_refused_by_name_or_gives_an_env_that_steps(env_id, data):
    """Any keyword argument with a wrong type, a special float, a huge or a negative value: a
    ``ValueError`` naming the argument at ``gym.make``, or an env whose first steps are finite."""
    name = data.draw(st.sampled_from(_arguments(env_id)), label="argument")
    _refused_by_name_or_steps(env_id, name, data.draw(st.sampled_from(BAD_VALUES), label="value"))


@pytest.mark.slow
@pytest.mark.parametrize("env_id", IDS)
def test_every_argument_with_every_bad_value_is_refused_by_name_or_steps(env_id):
    """The fuzz test's whole grid: every argument of the id times every bad value (about 700 cases an id)."""
    for name in _arguments(env_id):
        for value in BAD_VALUES:
            _refused_by_name_or_steps(env_id, name, value)


FUZZ_SECONDS = 60  # an accepted value must not hang: a case takes well under a second on a 2-core CPU


@contextlib.contextmanager
def _answers_within(seconds: int, what: str):
    """Fail, rather than hang, when the block runs longer than ``seconds`` (SIGALRM: POSIX only)."""

    def expire(signum, frame):
        raise TimeoutError(f"{what}: no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("module",
                         ["fl_gym.envs.hetero.env", "fl_gym.envs.select.env", "fl_gym.envs.select.queue_env",
                          "fl_gym.envs.aggregate.env", "fl_gym.envs.rates.env"])
def test_the_env_docstrings_examples_run_as_written(module):
    import doctest
    import importlib

    mod = importlib.import_module(module)
    tests = [t for t in doctest.DocTestFinder().find(mod) if t.examples]
    assert tests  # every env module shows an example
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


@pytest.mark.parametrize("env_id", IDS)
def test_render_mode_is_none_only_and_render_draws_nothing(env_id):
    """``render()`` was the base class's ``NotImplementedError`` with no message; ``render_mode="human"``
    was refused as an unknown argument among forty."""
    with pytest.raises(ValueError, match=r"^render_mode='human' is out of range; allowed: None \(a round's"):
        with warnings.catch_warnings():  # Gymnasium's own warning: 'human' is not in render_modes
            warnings.simplefilter("ignore")
            gym.make(env_id, render_mode="human")
    env = gym.make(env_id)
    env.reset(seed=0)
    with warnings.catch_warnings():  # Gymnasium's: render called without a render mode
        warnings.simplefilter("ignore")
        assert env.render() is None
