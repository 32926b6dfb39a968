from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch

from fl_gym import (
    BehaviourConfig,
    ClockConfig,
    Federation,
    FederationConfig,
    MutualDistillation,
    OptimizerConfig,
    PFedMeConfig,
    RoundLoad,
    RoundPlan,
    ServerConfig,
    partition_scheme,
)
from fl_gym.engine.algorithms import ALGORITHMS
from fl_gym.records import ClientResults, LocalStats


def test_fedavg_sanity_on_digits():
    """Measured 0.933-0.953 at round 10 over scenario seeds 0-5; pinned with margin."""
    fed = Federation(FederationConfig(num_clients=10, partition=partition_scheme("dirichlet", alpha=0.5)))
    reports = [fed.run_round(RoundPlan.make(10, lr=0.05, epochs=2)) for _ in range(10)]
    assert reports[0].accuracy < reports[-1].accuracy
    assert reports[-1].accuracy >= 0.90
    assert reports[-1].round == 10
    assert reports[-1].clock == pytest.approx(sum(r.round_time for r in reports))


def _same(a, b) -> bool:
    """Equal records, field by field (NaN equal to NaN; nested records, such as a companion's, alike)."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x is None or y is None:
            if x is not y:
                return False
        elif dataclasses.is_dataclass(x):
            if not _same(x, y):
                return False
        elif not np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True):
            return False
    return True


def test_same_seeds_give_the_same_rounds_bit_for_bit(tiny_config):
    cfg = tiny_config.replace(soft_labels=True, eval_local=True, optimizer=OptimizerConfig(momentum=0.9))
    runs = []
    for _ in range(2):
        fed = Federation(cfg, scenario_seed=3)
        fed.reset(seed=11)
        plan = RoundPlan.make(4, lr=np.array([0.1, 0.05, 0.02, 0.07]), epochs=np.array([1, 2, 0.5, 3]))
        runs.append([fed.run_round(plan) for _ in range(3)] + [fed.global_models[0].clone()])
    for a, b in zip(runs[0][:-1], runs[1][:-1], strict=True):
        assert _same(a, b)
    assert torch.equal(runs[0][-1], runs[1][-1])
    other = Federation(cfg, scenario_seed=3)
    other.reset(seed=12)
    assert not torch.equal(other.global_models[0], runs[0][-1])


def test_reset_restarts_the_episode_but_keeps_the_scenario(tiny_config):
    fed = Federation(tiny_config, scenario_seed=1)
    sizes, speed = fed.sizes.copy(), fed.profiles.speed.copy()
    fed.reset(seed=5)
    first = fed.run_round(RoundPlan.make(4, lr=0.05))
    fed.reset(seed=5)
    again = fed.run_round(RoundPlan.make(4, lr=0.05))
    assert _same(first, again)
    assert np.array_equal(sizes, fed.sizes) and np.array_equal(speed, fed.profiles.speed)


def test_timing_only_federation_reports_times_without_learning(tiny_config):
    fed = Federation(tiny_config.replace(train=False), scenario_seed=0)
    rep = fed.run_round(RoundPlan.make(4, lr=0.05, selected=np.array([1, 1, 0, 1], bool)))
    assert fed.global_models == []
    assert math.isnan(rep.accuracy) and np.all(np.isnan(rep.loss))
    assert np.isnan(rep.client_time[2]) and np.all(rep.client_time[[0, 1, 3]] > 0)
    assert rep.round_time == pytest.approx(np.nanmax(rep.client_time))
    assert rep.straggling_latency == pytest.approx(np.nanmax(rep.client_time) - np.nanmin(rep.client_time))
    with pytest.raises(ValueError, match=r"train=False .*timing-only federation takes no probes"):
        fed.probe(np.array([0, 1]))
    evaluation = fed.evaluate()  # no models: NaN, as its reports (it was a zip() error)
    assert evaluation.accuracy.shape == (1,) and np.isnan(evaluation.accuracy).all()
    assert np.isnan(evaluation.loss).all() and math.isnan(evaluation.companion_accuracy)
    assert all(math.isnan(v) for v in fed.validation())


@pytest.mark.parametrize("clients", [[4], [-1], [[0]], [], [True, False, True, False]])
def test_probe_refuses_client_ids_out_of_range_and_a_mask(tiny_config, clients):
    """Not an IndexError from the data's rows, nor a mask read as the ids 0 and 1: what is allowed."""
    fed = Federation(tiny_config, scenario_seed=0)
    message = (f"clients={clients} is out of range; allowed: a non-empty 1-D array of integer client ids in "
               "0..3 (not a mask)")
    with pytest.raises(ValueError, match=re.escape(message)):
        fed.probe(np.array(clients))
    assert fed.probe(np.array([0, 3])).grad.shape == (2, fed.archs[0].num_params)


@pytest.mark.parametrize("models", [torch.zeros(3, 5), torch.zeros(2, 5), "x"])
def test_probe_refuses_models_of_another_shape_by_name(tiny_config, models):
    """Not torch's split_with_sizes error from deep in the probe."""
    fed = Federation(tiny_config, scenario_seed=0)
    size = fed.archs[0].num_params
    with pytest.raises(ValueError, match=rf"^models=.* allowed: a tensor of shape \(2, {size}\) \(a first"):
        fed.probe(np.array([0, 3]), models)
    assert fed.probe(np.array([0, 3]), fed.global_models[0].expand(2, -1)).grad.shape == (2, size)


def test_round_times_follow_the_cost_model():
    clock = ClockConfig(seconds_per_unit=1e-3, sigma_dyn=0, sigma_drift=0, bandwidth=1e5,
                        aggregation_time=0.5)
    cfg = FederationConfig(num_clients=3, partition=partition_scheme("iid"), train=False, clock=clock,
                           model_costs=(2.0,), batch_size=10)
    fed = Federation(cfg, scenario_seed=0)
    plan = RoundPlan.make(3, lr=0.1, epochs=np.array([1, 2, 3]), aggregate=np.array([1, 1, 0], bool))
    opened = fed.open_round(plan.selected, load=RoundLoad.still(3))
    rep = fed.finish_round(fed.train_round(opened, plan))
    train = 1e-3 * 2.0 * fed.sizes * np.array([1, 2, 3]) / fed.profiles.speed
    nbytes = fed.archs[0].num_bytes
    np.testing.assert_allclose(rep.train_time, train)
    np.testing.assert_allclose(rep.upload_time, [nbytes / 1e5, nbytes / 1e5, 0.0])
    np.testing.assert_allclose(rep.client_time, train + nbytes / 1e5 + rep.upload_time)
    assert rep.round_time == pytest.approx(rep.client_time.max() + 0.5)
    assert rep.upload_bytes == 2 * nbytes


def test_partial_participation_and_aggregation_flags(tiny_config):
    fed = Federation(tiny_config, scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.05, selected=np.array([1, 1, 1, 0], bool),
                          aggregate=np.array([1, 0, 1, 0], bool))
    rep = fed.run_round(plan)
    assert rep.aggregated.tolist() == [True, False, True, False]
    assert rep.weights[1] == 0 and rep.weights[3] == 0
    assert rep.weights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(rep.weights[[0, 2]], fed.sizes[[0, 2]] / fed.sizes[[0, 2]].sum())
    assert np.isnan(rep.loss[3]) and not np.isnan(rep.loss[1])
    assert np.all((rep.update_angle[:3] >= 0) & (rep.update_angle[:3] <= math.pi))


def test_plan_weights_override_and_one_client_gives_its_model(tiny_config):
    fed = Federation(tiny_config, scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.05, weight=np.array([0.0, 0.0, 1.0, 0.0]))
    rep = fed.run_round(plan)
    assert rep.weights.tolist() == [0.0, 0.0, 1.0, 0.0]


def test_weights_whose_sum_overflows_give_the_shares_of_their_ratios(tiny_config):
    """1e308 + 1e308 is inf: the shares were 0 and the global model the zero vector (10 % accuracy)."""
    huge, scaled = Federation(tiny_config, scenario_seed=0), Federation(tiny_config, scenario_seed=0)
    weight = np.array([1e308, 1e308, 1e300, 0.0])
    report = huge.run_round(RoundPlan.make(4, lr=0.05, weight=weight))
    expected = scaled.run_round(RoundPlan.make(4, lr=0.05, weight=weight / weight.max()))
    assert report.weights.tolist() == expected.weights.tolist() and report.weights[0] == pytest.approx(0.5)
    assert torch.equal(huge.global_models[0], scaled.global_models[0])


def test_model_group_without_members_keeps_its_weights_bit_for_bit(tiny_config):
    cfg = tiny_config.replace(models=("mlp-small", "mlp-medium"))
    fed = Federation(cfg, scenario_seed=0)
    untouched = fed.global_models[1].clone()
    rep = fed.run_round(RoundPlan.make(4, lr=0.05, model=0))
    assert torch.equal(untouched, fed.global_models[1])
    assert np.isnan(rep.global_accuracy).sum() == 0 and len(rep.global_accuracy) == 2
    fed.run_round(RoundPlan.make(4, lr=0.05, model=np.array([0, 1, 0, 1])))
    assert not torch.equal(untouched, fed.global_models[1])


def test_soft_labels_and_local_accuracy(tiny_config):
    fed = Federation(tiny_config.replace(soft_labels=True, eval_local=True), scenario_seed=0)
    rep = fed.run_round(RoundPlan.make(4, lr=0.05, epochs=2))
    np.testing.assert_allclose(rep.soft_labels.sum(1), np.ones(4), rtol=1e-5)
    assert np.all((rep.local_accuracy >= 0) & (rep.local_accuracy <= 1))


@pytest.mark.parametrize("changes", [
    dict(algorithm="fedprox", prox_mu=0.1),
    dict(algorithm="pfedme", eval_local=True),
    dict(server=ServerConfig("fedadam", lr=0.01)),
    dict(server=ServerConfig("fedavgm", momentum=0.5)),
    dict(algorithm="feddyn", feddyn_alpha=0.01),
    dict(optimizer=OptimizerConfig("adam"), aggregation="uniform"),
    dict(companion="mlp-small", models=("mlp-small", "mlp-medium"), aggregation="entropy_acc"),
    dict(models=("cnn-small",), local_test="holdout"),
])
def test_algorithms_run_and_learn(tiny_config, changes):
    fed = Federation(tiny_config.replace(**changes), scenario_seed=0)
    lr = 1e-3 if "optimizer" in changes else 0.05
    reports = [fed.run_round(RoundPlan.make(4, lr=lr, epochs=2, model=np.array([0, 0, 0, 0])))
               for _ in range(4)]
    assert reports[-1].accuracy > 0.3
    assert np.all(np.isfinite(reports[-1].loss))


def test_local_accuracy_of_a_holdout_split_scores_the_clients_held_out_training_samples(tiny_config):
    """The holdout parts index the training set (they were read as test-set indices: wrong samples, or an
    IndexError past the test set's length)."""
    fed = Federation(tiny_config.replace(local_test="holdout", eval_local=True), scenario_seed=0)
    arch, start = fed.archs[0], fed.global_models[0].clone()
    rep = fed.run_round(RoundPlan.make(4, lr=1e-12))  # the trained models are the start, to float rounding
    module = arch.module()
    torch.nn.utils.vector_to_parameters(start, module.parameters())
    with torch.no_grad():
        expected = [float((module(fed.x_train[p]).argmax(1) == fed.y_train[p]).float().mean())
                    for p in fed.test_parts]
    assert max(int(p.max()) for p in fed.test_parts) >= len(fed.y_test)  # beyond the test set: it would fail
    np.testing.assert_allclose(rep.local_accuracy, expected, atol=1e-6)
    held = np.concatenate([p.numpy() for p in fed.test_parts])
    assert not np.intersect1d(held, np.concatenate([p.numpy() for p in fed.train_parts])).size


def test_companion_mutual_learning_reports_both_models():
    cfg = FederationConfig(num_clients=4, models=("mlp-small", "mlp-medium"), companion="mlr",
                           aggregation="entropy_acc", model_costs=(3.5, 13.0, 1.0),
                           clock=ClockConfig(sigma_dyn=0, sigma_drift=0))
    fed = Federation(cfg, scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.05, model=np.array([0, 1, 1, 0]), epochs=np.array([1, 2, 1, 2]))
    rep = fed.run_round(plan)
    lite = rep.companion
    assert not math.isnan(lite.global_accuracy)
    assert np.all(np.isfinite(lite.loss)) and np.all(np.isfinite(lite.accuracy))
    assert lite.weights.sum() == pytest.approx(1.0)
    for m in (0, 1):  # size groups are weighted within themselves
        assert rep.weights[plan.model == m].sum() == pytest.approx(1.0)
    probe = fed.clock.epoch_time(fed.sizes, 1.0, RoundLoad.still(4))
    np.testing.assert_allclose(rep.probe_time, probe)
    np.testing.assert_allclose(rep.train_time, rep.epochs * probe * (np.array([3.5, 13.0, 13.0, 3.5]) + 1.0))


def test_synthetic_natural_partition():
    cfg = FederationConfig(dataset="synthetic", dataset_kwargs={"num_users": 8, "seed": 1}, num_clients=8,
                           partition=partition_scheme("natural"), models=("mlr",), local_test="matched")
    fed = Federation(cfg)
    rep = fed.run_round(RoundPlan.make(8, lr=0.05))
    assert np.all(np.isfinite(rep.loss))


@pytest.mark.parametrize("changes,param", [
    (dict(num_clients=0), "num_clients"), (dict(models=("resnet",)), "models"),
    (dict(algorithm="fedsgd"), "algorithm"), (dict(algorithm="feddyn", feddyn_alpha=0.0), "feddyn_alpha"),
    (dict(batch_size=0), "batch_size"), (dict(aggregation="entropy_acc", local_test="none"), "aggregation"),
    (dict(model_costs=(1.0, 2.0)), "model_costs"), (dict(dataset="imagenet"), "dataset"),
    (dict(partition=partition_scheme("natural")), "partition"), (dict(partition="iid"), "partition"),
    (dict(local_test="all"), "local_test"),
    (dict(companion="mlr", algorithm="pfedme"), "algorithm"),
    (dict(companion="resnet"), "companion"),  # was named models=
    (dict(server_data_fraction=1.0), "server_data_fraction"), (dict(device="gpu"), "device"),
])
def test_bad_config_names_the_parameter(changes, param):
    with pytest.raises(ValueError, match=f"{param}="):
        FederationConfig(**changes)


def test_a_device_this_machine_lacks_is_refused_when_the_config_is_made():
    """Not in torch's driver error once the data is loaded: ``cuda:<count>`` is one past the last device."""
    with pytest.raises(ValueError,
                       match=r"device='cuda:\d+' is out of range; allowed: a device this machine has"):
        FederationConfig(device=f"cuda:{torch.cuda.device_count()}")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device here"):
            FederationConfig(device="cuda")


@pytest.mark.parametrize("field,value,match", [
    ("selected", np.zeros(4, bool), "plan.selected"), ("model", np.full(4, 3), "plan.model"),
    ("epochs", np.full(4, -1.0), "plan.epochs"), ("lr", np.zeros(4), "plan.lr"),
    ("lr", np.ones(3), "plan.lr has shape"), ("weight", np.full(4, -1.0), "plan.weight"),
    ("selected", np.array([0, 1, 2, 3]), "plan.selected has dtype int64; allowed: bool"),
    ("epochs", np.full(4, 1e9), "allowed: a round whose batch schedule fits in memory, at most 268,435,456"),
])
def test_bad_plans_are_rejected_before_anything_runs(tiny_config, field, value, match):
    fed = Federation(tiny_config, scenario_seed=0)
    plan = dataclasses.replace(RoundPlan.make(4, lr=0.05), **{field: value})
    with pytest.raises(ValueError, match=match):
        fed.run_round(plan)
    assert fed.round == 0


def test_a_phase_given_another_object_names_what_it_takes(tiny_config):
    """A string or a dict for a plan or a round was an ``AttributeError`` deep in the phase."""
    fed = Federation(tiny_config, scenario_seed=0)
    with pytest.raises(ValueError, match="^plan={'lr': 0.05} is out of range; allowed: a RoundPlan"):
        fed.run_round({"lr": 0.05})
    opened = fed.open_round()
    with pytest.raises(ValueError, match="^train_round: opened=4 is out of range; allowed: the OpenedRound"):
        fed.train_round(4, RoundPlan.make(4, lr=0.05))
    trained = fed.train_round(opened, RoundPlan.make(4, lr=0.05))
    with pytest.raises(ValueError, match="^trained=None is out of range; allowed: the TrainedRound"):
        fed.finish_round(None)
    with pytest.raises(ValueError, match=re.escape("weight='x' is out of range; allowed: numbers (could")):
        fed.finish_round(trained, weight="x")  # numpy's "could not convert string to float" alone
    assert fed.round == 0
    fed.finish_round(trained)  # the refusals left the round pending
    assert fed.round == 1


def test_aggregate_must_be_subset_of_selected(tiny_config):
    fed = Federation(tiny_config)
    plan = RoundPlan.make(4, lr=0.05, selected=np.array([1, 0, 1, 1], bool), aggregate=np.ones(4, bool))
    with pytest.raises(ValueError, match="plan.aggregate"):
        fed.run_round(plan)


def test_server_data_is_class_balanced_and_disjoint():
    cfg = FederationConfig(num_clients=5, partition=partition_scheme("iid"), server_data_fraction=0.1)
    fed = Federation(cfg)
    labels = fed.y_train.numpy()
    counts = np.bincount(labels[fed.server_indices], minlength=10)
    assert np.all(counts == counts[0]) and counts[0] == int(0.1 * len(labels) / 10)
    clients = np.concatenate([p.numpy() for p in fed.train_parts])
    assert not np.intersect1d(clients, fed.server_indices).size
    assert len(clients) + len(fed.server_indices) == len(labels)
    assert len(Federation(cfg.replace(server_data_fraction=0.0)).server_indices) == 0


def test_a_server_share_larger_than_the_smallest_class_is_refused_by_name():
    """An equal share of every class cannot take more of a class than it has (was numpy's sampling error)."""
    cfg = FederationConfig(num_clients=5, partition=partition_scheme("iid"))
    smallest = int(np.bincount(Federation(cfg).y_train.numpy()).min())
    with pytest.raises(ValueError, match=rf"server_data_fraction=0.99 is out of range; allowed: a float in "
                                         rf"\[0, 0\.\d+\] .* smallest class has {smallest} samples"):
        Federation(cfg.replace(server_data_fraction=0.99))


def test_assign_data_grows_a_working_set():
    cfg = FederationConfig(num_clients=4, partition=partition_scheme("shards", shards_per_client=1),
                           server_data_fraction=0.1)
    fed = Federation(cfg)
    before = fed.label_entropy[0]
    grown = np.concatenate([fed.train_parts[0].numpy(), fed.server_indices[:40]])
    fed.assign_data(0, grown)
    assert fed.sizes[0] == len(grown) and fed.label_entropy[0] > before
    assert fed.histogram[0].sum() == len(grown)
    table = fed.partition_report.table().splitlines()  # the report follows the new partition too
    assert table[1].split()[:2] == ["0", str(len(grown))]
    rep = fed.run_round(RoundPlan.make(4, lr=0.05))
    assert np.isfinite(rep.loss[0])
    with pytest.raises(ValueError, match="client=9"):
        fed.assign_data(9, grown)
    with pytest.raises(ValueError, match="indices of client 1"):
        fed.assign_data(1, np.array([10**9]))


def test_phases_compose_to_run_round_bit_for_bit(tiny_config):
    """open -> train -> finish with the plan's decisions is run_round; a later decision can change them."""
    cfg = tiny_config.replace(soft_labels=True)
    plan = RoundPlan.make(4, lr=0.05, epochs=np.array([1, 2, 1, 2]))
    whole, phased = Federation(cfg, scenario_seed=2), Federation(cfg, scenario_seed=2)
    for fed in (whole, phased):
        fed.reset(seed=4)
    a = whole.run_round(plan)
    trained = phased.train_round(phased.open_round(plan.selected), plan)
    assert np.all(np.isfinite(trained.stats.soft_labels)) and np.all(np.isfinite(trained.stats.update_angle))
    b = phased.finish_round(trained)
    assert _same(a, b) and torch.equal(whole.global_models[0], phased.global_models[0])
    later = Federation(cfg, scenario_seed=2)
    later.reset(seed=4)
    trained = later.train_round(later.open_round(plan.selected), plan)
    keep = np.array([True, False, True, False])
    rep = later.finish_round(trained, aggregate=keep, weight=np.array([1.0, 0.0, 3.0, 0.0]))
    assert rep.aggregated.tolist() == keep.tolist() and rep.weights.tolist() == [0.25, 0.0, 0.75, 0.0]
    np.testing.assert_array_equal(rep.update_angle, a.update_angle)  # angles are known before the decision


def test_a_weight_summing_to_0_over_the_aggregated_clients_is_refused_before_the_round_changes(tiny_config):
    """The error comes before the clock, the local algorithm or the global model moves: the round stays
    pending, and finishing it then plays what a federation that never saw the bad weight plays."""
    plan = RoundPlan.make(4, lr=0.05)
    feds = [Federation(tiny_config, scenario_seed=2) for _ in range(2)]
    for fed in feds:
        fed.reset(seed=3)
    trained = [fed.train_round(fed.open_round(plan.selected), plan) for fed in feds]
    before = feds[0].global_models[0].clone()
    with pytest.raises(ValueError, match=r"weight=\[0.0, 0.0\] sums to 0 over aggregated clients \[1, 3\]"):
        feds[0].finish_round(trained[0], aggregate=np.array([0, 1, 0, 1], bool),
                             weight=np.array([1.0, 0, 1, 0]))
    assert (feds[0].round, feds[0].elapsed) == (0, 0.0) and torch.equal(feds[0].global_models[0], before)
    weight = np.array([1.0, 2.0, 3.0, 4.0])
    a, b = (fed.finish_round(t, weight=weight) for fed, t in zip(feds, trained, strict=True))
    assert _same(a, b) and torch.equal(feds[0].global_models[0], feds[1].global_models[0])


@pytest.mark.parametrize("subsets,weight,match", [
    (np.ones((2, 5), bool), None, r"subsets has shape \(2, 5\)"),  # read the first 4 columns
    (np.array([[0, 1, 2, 3]]), None, r"subsets has shape \(1, 4\) and dtype int64"),  # ids read as a mask
    ("x", None, r"subsets has shape \(1, 1\)"),  # an IndexError
    (np.ones((1, 4), bool), np.ones(3), r"weight has shape \(3,\)"),  # an IndexError
    (np.ones((1, 4), bool), np.array([1.0, -1.0, 1.0, 1.0]), r"weight=\[1.0, -1.0, 1.0, 1.0\] is out of"),
    (np.ones((1, 4), bool), np.array([np.nan, 1.0, 1.0, 1.0]), r"weight=\[nan, 1.0, 1.0, 1.0\] is out of"),
    (np.ones((1, 4), bool), "x", r"weight='x' is out of range; allowed: numbers"),  # numpy's message
])
def test_what_if_averages_check_their_subsets_and_weights_as_finish_round_does(tiny_config, subsets, weight,
                                                                               match):
    """Each was answered (wrongly) or failed deep inside: a negative weight averaged, a NaN one gave NaN."""
    fed = Federation(tiny_config.replace(validation_size=100))
    fed.reset(seed=0)
    plan = RoundPlan.make(4, lr=0.05)
    trained = fed.train_round(fed.open_round(plan.selected), plan)
    with pytest.raises(ValueError, match=match):
        fed.validate_averages(trained, subsets, weight)
    assert fed.validate_averages(trained, np.zeros((0, 4), bool)).shape == (0, 2)  # nothing asked: no rows
    np.testing.assert_array_equal(fed.validate_averages(trained, [[1, 0, 1, 0]]),
                                  fed.validate_averages(trained, np.array([True, False, True, False])))


def test_what_if_averages_keep_the_first_model_where_none_of_its_clients_trained(tiny_config):
    """Every client trains the second model: each subset keeps the first (it was a StopIteration)."""
    fed = Federation(tiny_config.replace(validation_size=100, models=("mlp-small", "mlp-medium")))
    fed.reset(seed=0)
    plan = RoundPlan.make(4, lr=0.05, model=1)
    trained = fed.train_round(fed.open_round(plan.selected), plan)
    unchanged = fed.validation()
    np.testing.assert_array_equal(fed.validate_averages(trained, np.eye(4, dtype=bool)), [unchanged] * 4)


@pytest.mark.parametrize("load", [RoundLoad.still(3), "x", RoundLoad(np.ones(4), np.ones(4), -np.ones(4)),
                                  RoundLoad(np.full(4, np.nan), np.ones(4), np.ones(4))])
def test_a_given_load_is_checked_when_the_round_opens(tiny_config, load):
    """A load of 3 clients did not broadcast, a string was an AttributeError, and a factor <= 0 or NaN
    failed only at the clock's advance, after the round had trained."""
    fed = Federation(tiny_config, scenario_seed=0)
    with pytest.raises(ValueError, match=r"^load=.* allowed: a RoundLoad of three \(4,\) arrays of finite "
                                         r"factors > 0 \(RoundLoad.still\(4\): every factor 1\)$"):
        fed.open_round(load=load)
    assert fed.open_round(load=RoundLoad.still(4)).load.noise.tolist() == [1.0] * 4


@pytest.mark.parametrize("call,match", [
    (lambda fed: fed.advance(-1.0), r"round_time=-1.0 is out of range"),  # the clock ran backwards
    (lambda fed: fed.advance(float("nan")), r"round_time=nan is out of range"),  # every later time NaN
    (lambda fed: fed.advance("x"), r"round_time='x' is out of range"),  # a TypeError
    (lambda fed: fed.assign_data(0, np.array([1.5])), r"non-empty 1-D integer array"),  # an IndexError
    (lambda fed: fed.assign_many({"x": np.array([1])}), r"client='x' is out of range"),  # a TypeError
    (lambda fed: fed.assign_many([(0, np.array([1]))]), r"assignment=.* allowed: a mapping of client ids"),
    (lambda fed: fed.expected_times(fed.open_round(), -1.0), r"epochs=-1.0 is out of range"),  # times < 0
    (lambda fed: fed.expected_times(fed.open_round(), True), r"epochs=True is out of range"),  # was 1 epoch
    (lambda fed: fed.expected_times(fed.open_round(), 1.0, model=5), r"model=5 is out of range"),
    (lambda fed: fed.assign_data(np.array([0]), np.array([1])), r"client=array\(\[0\]\) is out of range"),
    (lambda fed: fed.generator(0.5), r"key=0.5 is out of range; allowed: an integer in \[0, 2\*\*64\)"),
    (lambda fed: fed.train_clients(RoundPlan.make(4, lr=0.05), np.ones(4, int), None), r"key=None"),
    (lambda fed: fed.train_clients(RoundPlan.make(4, lr=0.05), 3, 0), r"steps=3 is out of range; allowed: "
                                                                         r"a \(4,\) array of integer local"),
    (lambda fed: fed.train_clients(RoundPlan.make(4, lr=0.05), np.full(4, -1), 0), r"steps=array"),
    (lambda fed: fed.train_clients(RoundPlan.make(4, lr=0.05), np.ones(4), 0), r"steps=array"),  # floats
])
def test_the_clock_data_and_expected_times_refuse_values_that_would_corrupt_them(tiny_config, call, match):
    fed = Federation(tiny_config)
    fed.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        call(fed)
    assert (fed.round, fed.elapsed) == (0, 0.0)


def test_finish_round_refuses_client_ids_for_its_aggregate_mask(tiny_config):
    """``aggregate=[0, 2, 3, 1]`` was read as a mask: clients 1-3 aggregated, not the ones named."""
    fed = Federation(tiny_config, scenario_seed=0)
    trained = fed.train_round(fed.open_round(), RoundPlan.make(4, lr=0.05))
    with pytest.raises(ValueError, match=r"^aggregate has shape \(4,\) and dtype int64; allowed: a mask of "
                                         r"shape \(4,\), bool or 0/1 \(not client ids\)$"):
        fed.finish_round(trained, aggregate=np.array([0, 2, 3, 1]))
    assert fed.finish_round(trained, aggregate=[1, 0, 1, 1]).aggregated.tolist() == [True, False, True, True]


def test_a_zero_weight_leaves_a_diverged_update_out_of_the_average(tiny_config):
    """A weight of 0 means the update does not count: a NaN update given 0 leaves the global model
    what leaving the client out of ``aggregate`` gives (0 x NaN in the product made it NaN)."""
    plan = RoundPlan.make(4, lr=0.05)
    feds = [Federation(tiny_config, scenario_seed=2) for _ in range(2)]
    weight = np.array([1.0, 0.0, 2.0, 3.0])
    for fed, aggregate in zip(feds, (None, np.array([True, False, True, True])), strict=True):
        fed.reset(seed=3)
        trained = fed.train_round(fed.open_round(plan.selected), plan)
        member = trained.cohort.members[0]
        row = int(np.flatnonzero(trained.cohort.clients(member) == 1)[0])
        for block in member.stack.blocks:
            block[row] = float("nan")  # client 1 diverged
        fed.finish_round(trained, aggregate=aggregate, weight=weight)
    assert torch.isfinite(feds[0].global_models[0]).all()
    assert torch.equal(feds[0].global_models[0], feds[1].global_models[0])


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_local_evaluation_scores_the_personal_models_training_leaves_else_the_trained_rows(tiny_config,
                                                                                          algorithm):
    """pFedMe's personal models (evaluated after its training), every other algorithm's trained rows
    (evaluated in the training's engine call): the local accuracy and soft labels of those models."""
    cfg = tiny_config.replace(algorithm=algorithm, eval_local=True, soft_labels=True)
    fed = Federation(cfg, scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.05)
    trained = fed.train_round(fed.open_round(plan.selected), plan)
    member = trained.cohort.members[0]
    assert (member.personal is not None) == ALGORITHMS[algorithm].personal_models
    clients = trained.cohort.clients(member)

    def scores(models):
        tests = [fed.test_parts[i] for i in clients]
        accuracy = fed._evaluate(models, fed.x_test, fed.y_test, tests).accuracy
        own = fed._evaluate(models, fed._train_x, fed._train_y, [fed._rows[i] for i in clients],
                            soft_labels=True)
        return accuracy.numpy(), own.soft_labels.numpy()

    accuracy, soft_labels = scores(member.stack if member.personal is None else member.personal)
    np.testing.assert_array_equal(trained.stats.local_accuracy[clients], accuracy)
    np.testing.assert_array_equal(trained.stats.soft_labels[clients], soft_labels)
    if member.personal is not None:  # the rows' own scores differ: the test tells which models were scored
        assert not np.array_equal(scores(member.stack)[1], soft_labels)


def test_open_round_draws_candidates_from_the_sampler(tiny_config):
    fed = Federation(tiny_config.replace(train=False), scenario_seed=0)
    fed.reset(seed=1, sampler=np.random.default_rng(7))
    opened = fed.open_round(2)
    expected = np.sort(np.random.default_rng(7).permutation(4)[:2])
    assert np.flatnonzero(opened.candidates).tolist() == expected.tolist()
    assert np.all(opened.probe_time == 0)  # no companion and no probe cost
    with pytest.raises(ValueError, match="plan.selected=.*is out of range; allowed: a subset of round 1"):
        fed.train_round(opened, RoundPlan.make(4, lr=0.1))
    with pytest.raises(ValueError, match="candidates=5 is out of range"):
        fed.open_round(5)


@pytest.mark.parametrize("candidates", [np.array([0, 2, 3, 1]), np.array([0.5, 1, 1, 1]), True, "x"])
def test_open_round_refuses_client_ids_for_a_mask_and_a_bool_for_a_count(tiny_config, candidates):
    """Ids were read as a mask (``[0, 2, 3, 1]`` drew clients 1-3), and True as one candidate."""
    fed = Federation(tiny_config.replace(train=False), scenario_seed=0)
    allowed = r"allowed: an int, or a mask of shape \(4,\), bool or 0/1 \(not client ids\), with at least one"
    with pytest.raises(ValueError, match=rf"^candidates has shape .* {allowed} client$"):
        fed.open_round(candidates)
    assert fed.open_round(np.array([1, 0, 1, 1])).candidates.tolist() == [True, False, True, True]


@pytest.mark.parametrize("refused", [5, np.zeros(4, bool), np.array([0, 2, 3, 1]), "load"])
def test_a_refused_opening_leaves_every_stream_where_it_was(tiny_config, refused):
    """Device behaviour's availability and links were drawn before the candidates were checked."""
    behaviour = BehaviourConfig(availability=0.5, availability_persistence=0.5, link_sigma=0.5)
    config = tiny_config.replace(train=False, behaviour=behaviour)
    twins = [Federation(config, scenario_seed=0) for _ in range(2)]
    for fed in twins:
        fed.reset(seed=3, sampler=np.random.default_rng(7))
    with pytest.raises(ValueError, match=r"^(candidates|load)"):
        if isinstance(refused, str):
            twins[0].open_round(2, load=RoundLoad.still(3))
        else:
            twins[0].open_round(refused)
    for _ in range(3):  # the behaviour chains' next steps, the candidates' and the load's draws: the twin's
        opened, twin = (fed.open_round(2) for fed in twins)
        np.testing.assert_array_equal(opened.candidates, twin.candidates)
        np.testing.assert_array_equal(opened.load.drift, twin.load.drift)
        plan = RoundPlan.make(4, lr=0.1, selected=opened.candidates)
        times = [fed.finish_round(fed.train_round(o, plan)).download_time
                 for fed, o in zip(twins, (opened, twin), strict=True)]
        np.testing.assert_array_equal(*times)


RAGGED = [1, [0], 1, 1]


@pytest.mark.parametrize("name,call", [
    ("candidates", lambda fed, trained: fed.open_round(RAGGED)),
    ("selected", lambda fed, trained: RoundPlan.make(4, lr=0.1, selected=RAGGED)),
    ("aggregate", lambda fed, trained: fed.finish_round(trained, aggregate=RAGGED)),
    ("clients", lambda fed, trained: fed.probe([0, [1]])),
    ("assignment[0]", lambda fed, trained: fed.assign_data(0, [1, [2]])),
    ("subsets", lambda fed, trained: fed.validate_averages(trained, [[True] * 4, [True] * 3])),
])
def test_a_ragged_list_is_refused_by_name_where_arrays_come_in(tiny_config, name, call):
    """numpy's "inhomogeneous shape" message named neither the parameter nor what it takes."""
    fed = Federation(tiny_config, scenario_seed=0)
    trained = fed.train_round(fed.open_round(), RoundPlan.make(4, lr=0.1))
    message = rf"^{re.escape(name)}=\[.*\] is out of range; allowed: .+ \(.+\)$"  # (numpy's words)
    with pytest.raises(ValueError, match=message):
        call(fed, trained)
    assert fed.round == 0


def test_a_finished_round_cannot_be_finished_again(tiny_config):
    fed = Federation(tiny_config.replace(train=False), scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.1)
    trained = fed.train_round(fed.open_round(), plan)
    fed.finish_round(trained)
    with pytest.raises(ValueError, match="finish_round: round 1 is not pending"):
        fed.finish_round(trained)


def test_a_round_opened_before_a_reset_cannot_be_trained_or_finished_after_it(tiny_config):
    """It was: round 1 again after the reset, so its stale updates entered the new episode's models."""
    fed = Federation(tiny_config, scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.1)
    opened = fed.open_round()
    trained = fed.train_round(opened, plan)
    fed.reset(seed=1)
    start = fed.global_models[0].clone()
    stale = r"round 1 of episode 1 is not pending \(the federation was reset since, to episode 2\)"
    with pytest.raises(ValueError, match="finish_round: " + stale):
        fed.finish_round(trained)
    with pytest.raises(ValueError, match="train_round: " + stale):
        fed.train_round(opened, plan)
    assert torch.equal(fed.global_models[0], start) and fed.round == 0
    fed.finish_round(fed.train_round(fed.open_round(), plan))  # the new episode's own round plays
    assert fed.round == 1 and fed.episode == 2


def test_a_round_opened_again_supersedes_the_one_before(tiny_config):
    """The earlier opening's candidates and load were trained under the later opening's draws."""
    fed = Federation(tiny_config, scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.1)
    first = fed.open_round()
    trained = fed.train_round(first, plan)
    second = fed.open_round(2)
    superseded = r"round 1 is not pending \(a round was opened since it, 1 more time\(s\)\); allowed: "
    with pytest.raises(ValueError, match="train_round: " + superseded):
        fed.train_round(first, plan)
    with pytest.raises(ValueError, match="finish_round: " + superseded):
        fed.finish_round(trained)
    assert fed.round == 0 and fed.openings == second.opening == 2
    fed.finish_round(fed.train_round(second, RoundPlan.make(4, lr=0.1, selected=second.candidates)))
    assert fed.round == 1


def test_scaffold_keeps_the_server_variate_the_mean_of_the_clients(tiny_config):
    fed = Federation(tiny_config.replace(algorithm="scaffold"), scenario_seed=0)
    plan = RoundPlan.make(4, lr=0.05, aggregate=np.array([1, 1, 0, 1], bool))
    reports = [fed.run_round(plan) for _ in range(3)]
    variates = fed.algorithm.clients["mlp-small"]
    torch.testing.assert_close(fed.algorithm.server["mlp-small"], variates.mean(0))
    assert torch.count_nonzero(variates[2]) == 0  # never aggregated: never committed
    assert reports[-1].upload_bytes == 2 * 3 * fed.model_bytes[0]  # model and variate
    assert reports[-1].accuracy > 0.3
    fed.reset(seed=1)
    assert fed.algorithm.server == {}  # a new episode starts from zero variates


@pytest.mark.parametrize("optimizer", [OptimizerConfig(momentum=0.9), OptimizerConfig("adam")])
def test_scaffold_refuses_a_local_optimiser_other_than_plain_sgd(tiny_config, optimizer):
    with pytest.raises(ValueError,
                       match="momentum=.* allowed: 0 with optimizer='sgd' for algorithm='scaffold'"):
        tiny_config.replace(algorithm="scaffold", optimizer=optimizer)


def test_scaffold_in_the_select_baselines_runs_plain_sgd_on_the_paper_preset():
    from fl_gym.baselines.select import POLICIES

    assert POLICIES["scaffold"].env_kwargs["momentum"] == 0.0  # the paper preset's SGD has momentum 0.5


def test_feddyn_keeps_the_server_dual_the_mean_of_the_clients_and_corrects_the_average(tiny_config):
    fed = Federation(tiny_config.replace(algorithm="feddyn", feddyn_alpha=0.1), scenario_seed=0)
    fed.run_round(RoundPlan.make(4, lr=0.05))
    start = fed.global_models[0].clone()
    trained = fed.train_round(fed.open_round(),
                              RoundPlan.make(4, lr=0.05, aggregate=np.array([1, 0, 1, 1], bool)))
    report = fed.finish_round(trained)
    duals = fed.algorithm.clients["mlp-small"]
    h = fed.algorithm.server["mlp-small"]
    torch.testing.assert_close(h, duals.mean(0))
    rows = {int(c): trained.cohort.members[0].stack.rows()[j] for j, c in enumerate(trained.cohort.order)}
    average = sum(report.weights[c] * rows[c] for c in (0, 2, 3))
    torch.testing.assert_close(fed.global_models[0], average - h / 0.1)
    assert not torch.equal(fed.global_models[0], start)
    fed.reset(seed=1)
    assert fed.algorithm.server == {}


def test_moon_runs_learns_and_forgets_previous_models_per_episode(tiny_config):
    fed = Federation(tiny_config.replace(algorithm="moon"), scenario_seed=0)
    reports = [fed.run_round(RoundPlan.make(4, lr=0.05, epochs=2)) for _ in range(3)]
    assert reports[-1].accuracy > 0.3 and fed.algorithm.seen["mlp-small"].all()
    assert reports[-1].upload_bytes == 4 * fed.model_bytes[0]  # one model each, as FedAvg
    fed.reset(seed=1)
    assert fed.algorithm.previous == {}


def test_round_and_clock_are_read_only_and_advance_counts_a_round_played_elsewhere(tiny_config):
    fed = Federation(tiny_config, scenario_seed=0)
    with pytest.raises(AttributeError):
        fed.round = 5
    with pytest.raises(AttributeError):
        fed.elapsed = 1.0
    fed.advance(2.5)
    assert (fed.round, fed.elapsed) == (1, 2.5) and fed.open_round().round == 2
    fed.reset(seed=0)
    assert (fed.round, fed.elapsed, fed.last_load) == (0, 0.0, None)


def test_every_algorithm_name_builds_its_class_with_the_configs_settings(tiny_config):
    from fl_gym.config import STATELESS
    from fl_gym.engine.algorithms import ALGORITHMS, FedDyn, FedProx, Moon

    assert STATELESS == ("fedavg", "fedprox") and set(ALGORITHMS) >= {"scaffold", "pfedme"}
    assert tiny_config.replace(algorithm="fedprox", prox_mu=0.3).local_algorithm() == FedProx(0.3)
    moon = tiny_config.replace(algorithm="moon", moon_mu=0.2, moon_tau=0.7).local_algorithm()
    assert isinstance(moon, Moon) and (moon.num_clients, moon.mu, moon.tau) == (4, 0.2, 0.7)
    dyn = tiny_config.replace(algorithm="feddyn", feddyn_alpha=0.05).local_algorithm()
    assert isinstance(dyn, FedDyn) and (dyn.num_clients, dyn.alpha) == (4, 0.05)
    for name, cls in ALGORITHMS.items():
        assert type(tiny_config.replace(algorithm=name).local_algorithm()) is cls


@pytest.mark.parametrize("changes,message", [
    (dict(prox_mu=0.5),
     "prox_mu=0.5 does not apply to algorithm='fedavg' (it would be ignored); allowed: it with "
     "algorithm in ['fedprox']"),
    (dict(algorithm="fedprox", moon_tau=2.0), "moon_tau=2.0 does not apply to algorithm='fedprox'"),
    (dict(algorithm="moon", feddyn_alpha=0.1), "feddyn_alpha=0.1 does not apply to algorithm='moon'"),
])
def test_another_algorithms_setting_is_refused_not_ignored(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        FederationConfig(**changes)
    FederationConfig(algorithm="fedprox", prox_mu=0.5)  # its own setting


@pytest.mark.parametrize("build,message", [
    (lambda: FederationConfig(clock="fast"), "clock='fast' is out of range; allowed: a ClockConfig"),
    (lambda: FederationConfig(optimizer="adam"),
     "optimizer='adam' is out of range; allowed: an OptimizerConfig"),
    (lambda: FederationConfig(train="yes"), "train='yes' is out of range; allowed: True or False"),
    (lambda: ClockConfig(bandwidth=None), "bandwidth=None is out of range"),
    # these four compared the value first: Python's TypeError ("'<=' not supported", "has no len()")
    (lambda: OptimizerConfig(momentum="0.9"), "momentum='0.9' is out of range; allowed: a real number"),
    (lambda: OptimizerConfig(name="adam", betas=0.9), "betas=0.9 is out of range; allowed: a tuple of 2"),
    (lambda: ServerConfig(momentum=None), "momentum=None is out of range; allowed: a real number"),
    (lambda: PFedMeConfig(beta="1"), "beta='1' is out of range; allowed: a real number"),
    (lambda: MutualDistillation(temperature=[1, 2]), "temperature=[1, 2] is out of range; allowed: a real"),
    # beyond float range: math.isfinite raised OverflowError
    (lambda: ServerConfig(lr=10**400), f"lr={10**400} is out of range; allowed: a real number"),
    # the federation's companion trains in these roles: any other raised KeyError in its first round
    (lambda: FederationConfig(companion="mlp-small", distillation=MutualDistillation(local="mine")),
     "allowed: a MutualDistillation of the roles local='local' and lite='lite' (the federation's)"),
    (lambda: MutualDistillation(lite="local"), "lite='local' is out of range; allowed: a role other than"),
])
def test_a_config_built_directly_checks_its_fields_types(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


def test_an_integer_for_a_float_is_held_as_a_float(tiny_config):
    """torch takes no Python integer beyond int64 as a scalar: ``weight_decay=2**70`` raised OverflowError."""
    optimizer = OptimizerConfig(weight_decay=2**70)
    assert type(optimizer.weight_decay) is float and optimizer.weight_decay == 2.0**70
    assert type(ServerConfig(lr=1).lr) is float and ServerConfig(lr=None).lr is None  # float | None
    fed = Federation(tiny_config.replace(optimizer=optimizer), scenario_seed=0)
    report = fed.run_round(RoundPlan.make(fed.num_clients, lr=0.05))
    assert np.isnan(report.loss).all()  # a diverged round, reported (not a crash)


def test_a_plan_broadcasts_scalars_copies_arrays_and_refuses_another_length():
    lr = np.array([0.1, 0.2, 0.3])
    plan = RoundPlan.make(3, lr=lr, epochs=2, model=np.array([0.0, 1.0, 1.0]), selected=np.array([1, 0, 1]))
    lr[0] = 9.0  # the plan keeps its own copy
    assert plan.lr.tolist() == [0.1, 0.2, 0.3] and plan.epochs.tolist() == [2.0, 2.0, 2.0]
    assert plan.model.dtype == np.int64 and plan.model.tolist() == [0, 1, 1]
    assert plan.selected.tolist() == [True, False, True] and plan.aggregate.tolist() == [True, False, True]
    assert plan.weight is None
    with pytest.raises(ValueError, match=re.escape("lr=[0.1, 0.2] is out of range; allowed: a number or an "
                                                   "array of them of shape (3,) (could not broadcast")):
        RoundPlan.make(3, lr=[0.1, 0.2])
    for name in ("epochs", "lr", "weight", "model"):  # numpy's message named no field
        with pytest.raises(ValueError, match=rf"^{name}='x' is out of range; allowed: a"):
            RoundPlan.make(3, **{"lr": 0.1, name: "x"})
    # numpy cast these without a word: model 1.7 trained model 1, "0.1" and True were numbers
    for name, value in (("model", 1.7), ("model", True), ("model", "1"), ("lr", "0.1"), ("epochs", True),
                        ("lr", None), ("weight", np.array([1.0, True, 2.0], object))):
        with pytest.raises(ValueError, match=rf"^{name}=.+ is out of range; allowed: an? (number|integer)"):
            RoundPlan.make(3, **{"lr": 0.1, name: value})
    whole = RoundPlan.make(3, lr=1, epochs=np.int32(2), model=np.float32(2.0))  # numbers of any dtype
    assert whole.model.tolist() == [2, 2, 2] and whole.lr.tolist() == [1.0] * 3 and whole.epochs[0] == 2.0
    with pytest.raises(ValueError, match=r"^selected=\[1, 0\] is out of range; allowed: a bool or an array"):
        RoundPlan.make(3, lr=0.1, selected=[1, 0])
    for k in (0, -1, "3"):  # -1 was numpy's "negative dimensions", "3" a TypeError
        with pytest.raises(ValueError, match="^num_clients="):
            RoundPlan.make(k, lr=0.1)
    for name in ("selected", "aggregate"):  # client ids read as a mask selected others without a word
        allowed = r"is out of range; allowed: a mask of shape \(3,\), bool or 0/1 \(not client ids\)"
        with pytest.raises(ValueError, match=rf"^{name}=\[0, 1, 2\] {allowed}"):
            RoundPlan.make(3, lr=0.1, **{name: np.array([0, 1, 2])})


@pytest.mark.parametrize("call", ["reset", "redraw_partition"])
def test_a_federations_seed_is_checked_by_name(tiny_config, call):
    """NumPy's own message named no parameter."""
    fed = Federation(tiny_config)
    for seed in (-1, 1.5, "a"):
        with pytest.raises(ValueError, match=rf"^seed={re.escape(repr(seed))} is out of range; allowed: "):
            getattr(fed, call)(seed)


def test_empty_statistics_are_separate_nan_fields_and_the_shared_ones_refuse_writes():
    """Every field NaN, no two fields one array (a write to one leaves the others), and the read-only
    statistics that timing-only rounds share refuse a write to any field, the companion's too."""
    fresh = LocalStats.empty(4, 3, companion=True)
    fields = [getattr(fresh, f.name) for f in dataclasses.fields(ClientResults)]
    fields += [fresh.companion.loss, fresh.companion.accuracy]
    assert all(np.isnan(values).all() for values in fields)
    fields[0][0] = 1.0
    assert sum(int(np.isfinite(values).sum()) for values in fields) == 1
    shared = LocalStats.empty(4, 3, companion=True, read_only=True)
    for values in [getattr(shared, f.name) for f in dataclasses.fields(ClientResults)] + [
            shared.companion.loss, shared.companion.accuracy]:
        with pytest.raises(ValueError, match="read-only"):
            values[0] = 1.0


def test_statistics_give_the_accuracy_column_of_the_clients_models_or_their_companions():
    with_lite, without = LocalStats.empty(4, 3, companion=True), LocalStats.empty(4, 3)
    assert with_lite.accuracy_of(True) is with_lite.companion.accuracy
    assert with_lite.accuracy_of(False) is with_lite.local_accuracy
    assert without.accuracy_of(False) is without.local_accuracy
    with pytest.raises(ValueError, match="^LocalStats.accuracy_of: these statistics have no companion model"):
        without.accuracy_of(True)


def test_a_batch_larger_than_every_clients_data_trains_as_the_largest_clients_data(tiny_config):
    """The schedule lays such a batch out as the largest training client's data, so the memory check
    counts that batch, not the one asked for: a billion-sample batch trains as that one does."""
    largest = int(Federation(tiny_config, scenario_seed=0).sizes.max())
    feds = [Federation(dataclasses.replace(tiny_config, batch_size=b), scenario_seed=0)
            for b in (10**9, largest)]
    reports = [fed.run_round(RoundPlan.make(4, lr=0.05, epochs=2)) for fed in feds]
    assert reports[0].loss.tolist() == reports[1].loss.tolist()
    assert torch.equal(feds[0].global_models[0], feds[1].global_models[0])
