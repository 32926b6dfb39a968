from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fl_gym.engine import (
    FedDyn,
    FedProx,
    GraphedCohort,
    Member,
    Moon,
    MutualDistillation,
    OptimizerConfig,
    Scaffold,
    StackOptimizer,
    autograd_loss,
    cross_entropy,
    evaluate_stack,
    local_steps,
    make_schedule,
    train_cohort,
)
from fl_gym.engine.batcher import _MERGED, ProbeRequest, StatsRequest
from fl_gym.engine.evaluate import chunks
from fl_gym.engine.losses import log_softmax
from fl_gym.engine.pool import BufferPool
from fl_gym.engine.probe import gradients_at
from fl_gym.engine.reference import reference_train
from fl_gym.engine.schedule import BatchDraw, padded, stable_order
from fl_gym.engine.updates import update_statistics
from fl_gym.models import Stack, build_model
from fl_gym.models.architecture import prefix


def _cohort(digits_parts, epochs, batch_size=10):
    sizes = np.array([len(p) for p in digits_parts[: len(epochs)]])
    steps = local_steps(sizes, np.asarray(epochs), batch_size)
    order = np.argsort(-steps, kind="stable")
    parts = [torch.as_tensor(digits_parts[i]) for i in order]
    return make_schedule(parts, steps[order], batch_size, torch.Generator().manual_seed(3)), parts


CASES = [
    ("mlp-small", OptimizerConfig(), 0.0, [2, 2, 2, 2], 1e-5),
    ("mlp-small", OptimizerConfig(momentum=0.9, weight_decay=1e-3), 0.01, [3, 1, 2, 1, 3], 1e-5),
    ("cnn-small", OptimizerConfig(), 0.0, [1, 3, 2], 1e-5),
    ("cnn-small", OptimizerConfig(momentum=0.5), 0.1, [2, 0.5, 1.5, 1], 1e-5),
    ("hapfl-lite", OptimizerConfig(), 0.0, [2, 1, 1, 3, 2, 1], 1e-5),
    ("mlr", OptimizerConfig("adam"), 0.0, [2, 1, 3], 1e-4),
    ("cnn-small", OptimizerConfig("adam"), 0.0, [1, 2], 1e-4),
]


@pytest.mark.parametrize("name,opt,mu,epochs,tol", CASES)
def test_batched_engine_matches_per_client_loop(digits, digits_parts, name, opt, mu, epochs, tol):
    arch = build_model(name, digits.input_shape, 10)
    schedule, _ = _cohort(digits_parts, epochs)
    k = len(epochs)
    start = torch.stack([arch.init(torch.Generator().manual_seed(i)) for i in range(k)])
    lr = torch.linspace(0.01, 0.08, k) if opt.name == "sgd" else torch.full((k,), 1e-3)
    stack = Stack.from_rows(arch, start)
    result = train_cohort([Member("model", stack)], digits.x_train, digits.y_train, schedule, lr, opt,
                          algorithm=FedProx(mu))
    ref_rows, ref_loss, ref_last = reference_train(arch, start, digits.x_train, digits.y_train, schedule,
                                                   lr, opt, mu)
    torch.testing.assert_close(stack.rows(), ref_rows, rtol=0, atol=tol)
    torch.testing.assert_close(result.mean_loss["model"], ref_loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(result.last_epoch_loss["model"], ref_last, rtol=1e-4, atol=1e-5)
    assert not torch.equal(stack.rows(), start)


def test_members_split_a_cohort_like_separate_runs(digits, digits_parts):
    """Two architectures in one role (size groups) train exactly as two separate cohorts would."""
    epochs = [2, 2, 1, 1]
    schedule, _ = _cohort(digits_parts, epochs)
    small, big = build_model("mlp-small", (1, 8, 8), 10), build_model("mlp-medium", (1, 8, 8), 10)
    s0, b0 = small.init(torch.Generator().manual_seed(0)), big.init(torch.Generator().manual_seed(1))
    lr = torch.full((4,), 0.05)
    slots_small, slots_big = torch.tensor([0, 2]), torch.tensor([1, 3])
    ms = Member("model", Stack.broadcast(small, s0, 2), slots_small)
    mb = Member("model", Stack.broadcast(big, b0, 2), slots_big)
    train_cohort([ms, mb], digits.x_train, digits.y_train, schedule, lr, OptimizerConfig())
    for arch, start, slots, member in ((small, s0, slots_small, ms), (big, b0, slots_big, mb)):
        sub = type(schedule)(schedule.idx[:, slots], schedule.weight[:, slots], schedule.steps[slots.numpy()],
                             schedule.batches_per_epoch[slots.numpy()], schedule.active)
        ref, *_ = reference_train(arch, start.expand(2, -1), digits.x_train, digits.y_train, sub, lr[:2],
                                  OptimizerConfig())
        torch.testing.assert_close(member.stack.rows(), ref, rtol=0, atol=1e-5)


def test_schedule_covers_each_epoch_once(digits_parts):
    sizes = np.array([len(p) for p in digits_parts[:3]])
    steps = local_steps(sizes, np.array([2, 2, 1]), 16)
    order = np.argsort(-steps, kind="stable")
    parts = [torch.as_tensor(digits_parts[i]) for i in order]
    sched = make_schedule(parts, steps[order], 16, torch.Generator().manual_seed(0))
    assert list(sched.steps) == sorted(sched.steps, reverse=True)
    for i, p in enumerate(parts):
        nb = int(sched.batches_per_epoch[i])
        for e in range(int(sched.steps[i]) // nb):
            block = sched.idx[e * nb:(e + 1) * nb, i][sched.weight[e * nb:(e + 1) * nb, i] > 0]
            assert sorted(block.tolist()) == sorted(p.tolist())  # each epoch is a permutation
        real = sched.weight[: sched.steps[i], i]
        torch.testing.assert_close(real.sum(1), torch.ones(int(sched.steps[i])))  # per-batch mean
        assert float(sched.weight[sched.steps[i]:, i].abs().sum()) == 0.0
    assert sched.active[0] == 3 and sched.active[-1] == (steps == steps.max()).sum()


def test_a_batch_beyond_every_clients_data_is_the_full_batch(digits_parts):
    """A batch beyond every client's data (``2**70``, past int64) is a batch of the largest client's size."""
    parts = sorted((torch.as_tensor(p) for p in digits_parts[:3]), key=len, reverse=True)
    steps = np.array([2, 2, 1])
    huge = make_schedule(parts, steps, 2**70, torch.Generator().manual_seed(0))
    full = make_schedule(parts, steps, len(parts[0]), torch.Generator().manual_seed(0))
    assert huge.idx.shape == full.idx.shape == (2, 3, len(parts[0]))
    assert torch.equal(huge.idx, full.idx) and torch.equal(huge.weight, full.weight)
    assert list(huge.batches_per_epoch) == [1, 1, 1]


def test_fractional_epochs_round_steps():
    assert local_steps(np.array([100, 100, 5]), np.array([0.5, 0.0, 0.01]), 10).tolist() == [5, 0, 1]


def test_padded_table_holds_each_part_then_zeros():
    parts = [torch.tensor([5, 3]), torch.tensor([], dtype=torch.int64), torch.tensor([7, 8, 9])]
    table = padded(parts, torch.tensor([2, 0, 3]), 4)
    assert table.tolist() == [[5, 3, 0, 0], [0, 0, 0, 0], [7, 8, 9, 0]]
    assert table.dtype == torch.int64
    assert padded([], torch.tensor([], dtype=torch.int64), 3).shape == (0, 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stable_order_is_torchs_stable_argsort(dtype):
    gen = torch.Generator().manual_seed(0)
    keys = torch.rand(3, 40, 130, generator=gen, dtype=dtype)
    keys[:, :, 100:] = 2.0  # padding: equal keys keep their positions' order
    keys[0, 0, :50] = torch.randint(0, 4, (50,), generator=gen) / 8  # ties among real keys, and zeros
    for case in (keys, keys.transpose(0, 1)):
        assert torch.equal(stable_order(case), case.argsort(dim=-1, stable=True))


def test_schedule_rejects_unsorted_steps(digits_parts):
    parts = [torch.as_tensor(p) for p in digits_parts[:2]]
    with pytest.raises(ValueError, match="make_schedule"):
        make_schedule(parts, np.array([1, 3]), 10, torch.Generator())


def test_train_cohort_checks_lr_shape(digits, digits_parts):
    schedule, _ = _cohort(digits_parts, [1, 1])
    arch = build_model("mlr", (1, 8, 8), 10)
    with pytest.raises(ValueError, match="train_cohort: expected lr"):
        train_cohort([Member("model", Stack.broadcast(arch, arch.init(torch.Generator()), 2))],
                     digits.x_train, digits.y_train, schedule, torch.ones(3), OptimizerConfig())


def _logits(seed, k=2, b=5, c=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(k, b, c, generator=g), torch.randint(0, c, (k, b), generator=g)


def test_cross_entropy_and_its_gradient_match_autograd():
    z, y = _logits(0)
    w = torch.full((2, 5), 0.2)
    losses, grads = cross_entropy({"model": z}, y, w)
    leaf = z.clone().requires_grad_(True)
    ref = torch.stack([F.cross_entropy(leaf[i], y[i]) for i in range(2)])
    ref.sum().backward()
    torch.testing.assert_close(losses["model"], ref.detach())
    torch.testing.assert_close(grads["model"], leaf.grad)


@pytest.mark.parametrize("classes", [2, 10, 15, 16, 100])
def test_log_softmax_over_few_or_many_classes_is_torchs_and_contiguous(classes):
    z = torch.randn(3, 7, classes, generator=torch.Generator().manual_seed(classes)) * 20
    out = log_softmax(z)
    torch.testing.assert_close(out, z.log_softmax(-1), rtol=0, atol=1e-5)
    assert out.is_contiguous() and out.shape == z.shape
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(3, 7))


def test_mutual_distillation_matches_hand_computation():
    (z_loc, y), (z_lite, _) = _logits(1), _logits(2)
    w = torch.full((2, 5), 0.2)
    kd = MutualDistillation()
    losses, grads = kd({"local": z_loc, "lite": z_lite}, y, w)
    loc, lite = z_loc.clone().requires_grad_(True), z_lite.clone().requires_grad_(True)
    for i in range(2):
        l1 = 0.4 * F.cross_entropy(loc[i], y[i]) + 0.6 * F.kl_div(
            loc[i].log_softmax(-1), lite[i].detach().softmax(-1), reduction="batchmean")
        l2 = 0.5 * F.cross_entropy(lite[i], y[i]) + 0.5 * F.kl_div(
            lite[i].log_softmax(-1), loc[i].detach().softmax(-1), reduction="batchmean")
        torch.testing.assert_close(losses["local"][i], l1.detach())
        torch.testing.assert_close(losses["lite"][i], l2.detach())
        (l1 + l2).backward()
    torch.testing.assert_close(grads["local"], loc.grad)
    torch.testing.assert_close(grads["lite"], lite.grad)


def test_local_loss_sends_no_gradient_to_the_teacher():
    (z_loc, y), (z_lite, _) = _logits(3), _logits(4)
    w = torch.full((2, 5), 0.2)
    local_only = MutualDistillation(l3=0.0, l4=0.0)
    _, grads = local_only({"local": z_loc, "lite": z_lite}, y, w)
    assert float(grads["lite"].abs().max()) == 0.0


def test_mutual_distillation_edge_cases():
    z, y = _logits(5)
    w = torch.full((2, 5), 0.2)
    ce_only = MutualDistillation(l1=1.0, l2=0.0)
    losses, grads = ce_only({"local": z, "lite": z}, y, w)
    ref_l, ref_g = cross_entropy({"local": z}, y, w)
    torch.testing.assert_close(losses["local"], ref_l["local"])
    torch.testing.assert_close(grads["local"], ref_g["local"])
    same = MutualDistillation(l1=0.0, l2=1.0, l3=0.0, l4=1.0)
    losses, grads = same({"local": z, "lite": z.clone()}, y, w)
    assert float(losses["local"].abs().max()) < 1e-6
    assert float(grads["local"].abs().max()) < 1e-6


@pytest.mark.parametrize("direction,temperature",
                         [("dml", 1.0), ("literal", 1.0), ("dml", 2.0), ("literal", 3.0)])
def test_kd_gradients_agree_with_autograd(direction, temperature):
    (z_loc, y), (z_lite, _) = _logits(6), _logits(7)
    w = torch.rand(2, 5, generator=torch.Generator().manual_seed(0))
    kd = MutualDistillation(direction=direction, temperature=temperature)
    losses, grads = kd({"local": z_loc, "lite": z_lite}, y, w)

    def per_sample(logits, y):
        t = temperature
        out = {}
        for role, other, (a, b) in (("local", "lite", (0.4, 0.6)), ("lite", "local", (0.5, 0.5))):
            s, te = (logits[role] / t).log_softmax(-1), (logits[other].detach() / t).log_softmax(-1)
            kl = (te.exp() * (te - s)).sum(-1) if direction == "dml" else (s.exp() * (s - te)).sum(-1)
            ce = F.cross_entropy(logits[role].flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
            out[role] = a * ce + b * kl * t * t
        return out

    ref_losses, ref_grads = autograd_loss(per_sample)({"local": z_loc, "lite": z_lite}, y, w)
    for role in ("local", "lite"):
        torch.testing.assert_close(losses[role], ref_losses[role])
        torch.testing.assert_close(grads[role], ref_grads[role])


def test_evaluate_stack_counts(digits):
    arch = build_model("mlr", (1, 8, 8), 10)
    stack = Stack.broadcast(arch, arch.init(torch.Generator().manual_seed(0)), 2)
    parts = [torch.arange(0, 30), torch.arange(30, 35)]
    res = evaluate_stack(stack, digits.x_train, digits.y_train, parts, batch_size=8)
    module = arch.module()
    torch.nn.utils.vector_to_parameters(stack.rows()[0], module.parameters())
    with torch.no_grad():
        out = module(digits.x_train[:30])
    assert float(res.accuracy[0]) == pytest.approx(float((out.argmax(1)
                                                          == digits.y_train[:30]).float().mean()))
    assert float(res.loss[0]) == pytest.approx(float(F.cross_entropy(out, digits.y_train[:30])), rel=1e-5)
    torch.testing.assert_close(res.soft_labels.sum(1), torch.ones(2))
    assert res.count.tolist() == [30, 5]


def test_evaluate_stack_rows_of_any_part_lengths_are_each_row_alone(digits):
    """Parts longer and shorter than a chunk, in no order, one empty: each row as its module scores it.

    A chunk of samples runs only the rows up to the last with samples in it; the rows before
    that whose parts ended contribute nothing.
    """
    arch = build_model("mlp-small", (1, 8, 8), 10)
    g = torch.Generator().manual_seed(1)
    stack = Stack.from_rows(arch, torch.stack([arch.init(g) for _ in range(4)]))
    parts = [torch.arange(40, 45), torch.arange(0, 30), torch.arange(0, 0), torch.arange(50, 67)]
    res = evaluate_stack(stack, digits.x_train, digits.y_train, parts, batch_size=8)
    module = arch.module()
    for i, part in enumerate(parts):
        if not len(part):
            assert math.isnan(float(res.loss[i])) and math.isnan(float(res.accuracy[i]))
            continue
        torch.nn.utils.vector_to_parameters(stack.rows()[i], module.parameters())
        with torch.no_grad():
            out = module(digits.x_train[part])
        y = digits.y_train[part]
        assert float(res.accuracy[i]) == pytest.approx(float((out.argmax(1) == y).float().mean()))
        assert float(res.loss[i]) == pytest.approx(float(F.cross_entropy(out, y)), rel=1e-5)
        torch.testing.assert_close(res.soft_labels[i], out.softmax(1).mean(0))
    assert res.count.tolist() == [5, 30, 0, 17]


@pytest.mark.parametrize("scores,soft_labels", [(True, False), (False, True)])
def test_evaluate_stack_computes_the_metrics_asked_for_as_a_full_evaluation_does_the_rest_nan(
        digits, scores, soft_labels):
    arch = build_model("mlp-small", (1, 8, 8), 10)
    g = torch.Generator().manual_seed(2)
    stack = Stack.from_rows(arch, torch.stack([arch.init(g) for _ in range(3)]))
    parts = [torch.arange(0, 30), torch.arange(40, 45), torch.arange(50, 67)]
    full = evaluate_stack(stack, digits.x_train, digits.y_train, parts, batch_size=8)
    some = evaluate_stack(stack, digits.x_train, digits.y_train, parts, batch_size=8, scores=scores,
                          soft_labels=soft_labels)
    for name, asked in (("loss", scores), ("accuracy", scores), ("soft_labels", soft_labels)):
        value = getattr(some, name)
        assert torch.equal(value, getattr(full, name)) if asked else bool(value.isnan().all()), name
    assert torch.equal(some.count, full.count)


@pytest.mark.parametrize("sizes,width,expected", [
    ([209, 209, 150, 150], 256, [(0, 150), (150, 209)]),  # test and validation sets: no padding
    ([98, 96, 74, 66, 40], 512, [(0, 98)]),  # no end a quarter of the width on: one range
    ([1000], 256, [(0, 256), (256, 512), (512, 768), (768, 1000)]),
    ([5, 30, 0, 17], 8, [(0, 5), (5, 13), (13, 17), (17, 25), (25, 30)]),
    ([0, 0], 8, []),
])
def test_evaluation_chunks_end_where_parts_end_and_stay_within_the_width(sizes, width, expected):
    assert chunks(np.array(sizes), width) == expected


def test_scaffold_matches_the_reference_and_commits_only_aggregated_clients(digits, digits_parts):
    """Corrected steps equal the naive loop with ``g - c_i + c``; ``c_i+ = c_i - c + (w - w_i)/(K lr)``
    for aggregated clients only, and ``c`` moves by their mean change over N."""
    arch = build_model("mlp-small", digits.input_shape, 10)
    schedule, _ = _cohort(digits_parts, [2, 1, 3])
    k, n, p = 3, 10, arch.num_params
    g = torch.Generator().manual_seed(0)
    start = arch.init(g).expand(k, -1).clone()
    algo = Scaffold(n)
    algo.server["mlp-small"] = 0.01 * torch.randn(p, generator=g)
    algo.clients["mlp-small"] = 0.01 * torch.randn(n, p, generator=g)
    ids = np.array([7, 2, 5])
    c, c_i = algo.server["mlp-small"].clone(), algo.clients["mlp-small"].clone()
    lr = torch.tensor([0.05, 0.02, 0.04])
    stack = Stack.from_rows(arch, start)
    train_cohort([Member("model", stack)], digits.x_train, digits.y_train, schedule, lr, OptimizerConfig(),
                 algorithm=algo, clients=ids)
    ref_rows, *_ = reference_train(arch, start, digits.x_train, digits.y_train, schedule, lr,
                                   OptimizerConfig(), correction=c - c_i[ids])
    torch.testing.assert_close(stack.rows(), ref_rows, rtol=0, atol=1e-5)
    delta = -c + (start - stack.rows()) / (torch.as_tensor(schedule.steps, dtype=torch.float32) * lr)[:, None]
    algo.commit(np.array([7, 5]))  # client 2 (row 1) was not aggregated
    torch.testing.assert_close(algo.clients["mlp-small"][[7, 5]], c_i[[7, 5]] + delta[[0, 2]])
    torch.testing.assert_close(algo.clients["mlp-small"][2], c_i[2])
    torch.testing.assert_close(algo.server["mlp-small"], c + delta[[0, 2]].sum(0) / n)


def test_feddyn_matches_the_reference_and_moves_the_duals_of_aggregated_clients(digits, digits_parts):
    """Local steps equal the naive loop on ``F_i - <h_i, w> + alpha/2 ||w - w(t)||^2``; aggregated
    clients move ``h_i -= alpha (w_i - w(t))``, the server ``h -= alpha/N sum``, and the global
    model is the average minus ``h / alpha``."""
    arch = build_model("mlp-small", digits.input_shape, 10)
    schedule, _ = _cohort(digits_parts, [2, 1, 3])
    n, alpha = 10, 0.1
    g = torch.Generator().manual_seed(1)
    start = arch.init(g).expand(3, -1).clone()
    algo = FedDyn(n, alpha)
    algo.server["mlp-small"] = 0.01 * torch.randn(arch.num_params, generator=g)
    algo.clients["mlp-small"] = 0.01 * torch.randn(n, arch.num_params, generator=g)
    h, h_i = algo.server["mlp-small"].clone(), algo.clients["mlp-small"].clone()
    ids, lr = np.array([3, 9, 0]), torch.tensor([0.05, 0.02, 0.04])
    stack = Stack.from_rows(arch, start)
    train_cohort([Member("model", stack)], digits.x_train, digits.y_train, schedule, lr, OptimizerConfig(),
                 algorithm=algo, clients=ids)
    ref_rows, *_ = reference_train(arch, start, digits.x_train, digits.y_train, schedule, lr,
                                   OptimizerConfig(), prox_mu=alpha, correction=-h_i[ids])
    torch.testing.assert_close(stack.rows(), ref_rows, rtol=0, atol=1e-5)
    drift = stack.rows() - start
    algo.commit(np.array([3, 0]))  # client 9 (row 1) was not aggregated
    torch.testing.assert_close(algo.clients["mlp-small"][[3, 0]], h_i[[3, 0]] - alpha * drift[[0, 2]])
    torch.testing.assert_close(algo.clients["mlp-small"][9], h_i[9])
    h_new = h - alpha / n * drift[[0, 2]].sum(0)
    torch.testing.assert_close(algo.server["mlp-small"], h_new)
    average = torch.ones(arch.num_params)
    torch.testing.assert_close(algo.server_correction("mlp-small", average), average - h_new / alpha)


def _moon_reference(arch, start, prev, x, y, schedule, lr, mu, tau):
    """Each client in turn with torch.nn and autograd: CE + mu * l_con on the penultimate layer."""
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    def module(vec):
        net = arch.module()
        vector_to_parameters(vec.clone(), net.parameters())
        return net

    rows = []
    for i in range(start.shape[0]):
        net, glob, old = module(start[i]), module(start[i]), module(prev[i])
        opt = torch.optim.SGD(net.parameters(), lr=float(lr[i]))
        for s in range(int(schedule.steps[i])):
            ids = schedule.idx[s, i][schedule.weight[s, i] > 0]
            xb = x[ids]
            z = net[:-1](xb)
            with torch.no_grad():
                zg, zp = glob[:-1](xb), old[:-1](xb)
            sims = torch.stack([F.cosine_similarity(z, zg, dim=-1),
                                F.cosine_similarity(z, zp, dim=-1)], -1) / tau
            contrast = F.cross_entropy(sims, torch.zeros(len(ids), dtype=torch.long))
            loss = F.cross_entropy(net[-1](z), y[ids]) + mu * contrast
            opt.zero_grad()
            loss.backward()
            opt.step()
        rows.append(parameters_to_vector(net.parameters()).detach())
    return torch.stack(rows)


@pytest.mark.parametrize("name", ["mlp-small", "cnn-small"])
def test_moon_matches_the_reference_and_keeps_previous_models(digits, digits_parts, name):
    arch = build_model(name, digits.input_shape, 10)
    schedule, _ = _cohort(digits_parts, [2, 1, 2])
    g = torch.Generator().manual_seed(0)
    start = arch.init(g).expand(3, -1).clone()
    algo = Moon(10, mu=1.0, tau=0.5)
    ids = np.array([4, 1, 8])
    algo.previous[name] = torch.stack([arch.init(torch.Generator().manual_seed(s)) for s in range(10)])
    algo.seen[name] = np.array([i in (4, 8) for i in range(10)])  # client 1 has no previous model yet
    prev = torch.stack([algo.previous[name][4], start[1], algo.previous[name][8]])
    lr = torch.tensor([0.05, 0.03, 0.04])
    stack = Stack.from_rows(arch, start)
    train_cohort([Member("model", stack)], digits.x_train, digits.y_train, schedule, lr, OptimizerConfig(),
                 algorithm=algo, clients=ids)
    ref = _moon_reference(arch, start, prev, digits.x_train, digits.y_train, schedule, lr, 1.0, 0.5)
    torch.testing.assert_close(stack.rows(), ref, rtol=0, atol=2e-5)
    torch.testing.assert_close(algo.previous[name][ids], stack.rows())  # every trained client's model is kept
    assert algo.seen[name][ids].all()


# the default: one pass; a budget of 5 models' values (4,810 each): the requests of 3 and 2 models, then of 4
@pytest.mark.parametrize("budget,passes", [(None, [9]), (5 * 4810, [5, 4])])
def test_merged_probes_equal_each_run_alone(digits, digits_parts, budget, passes, monkeypatch):
    from fl_gym.engine import batcher

    if budget is not None:
        monkeypatch.setattr(batcher, "MERGED_VALUES", budget)
    ran = []

    def counted(arch, models, *args):
        ran.append(models.k if isinstance(models, Stack) else len(models))
        return gradients_at(arch, models, *args)

    monkeypatch.setattr(batcher, "gradients_at", counted)
    arch = build_model("mlp-small", digits.input_shape, 10)
    g = torch.Generator().manual_seed(2)
    requests = []
    for k, lo in ((3, 0), (2, 3), (4, 5)):
        parts = [torch.as_tensor(p) for p in digits_parts[lo: lo + k]]
        draw = BatchDraw.draw(parts, np.ones(k, np.int64), 7, torch.Generator().manual_seed(lo))
        requests.append(ProbeRequest(arch, torch.stack([arch.init(g) for _ in range(k)]), digits.x_train,
                                     digits.y_train, draw, 7, torch.empty(k * arch.num_params)))
    merged = _MERGED[ProbeRequest](requests)
    assert ran == passes  # models per pass
    for request, probe in zip(requests, merged, strict=True):
        alone = request.run()
        torch.testing.assert_close(probe.loss, alone.loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(probe.grad, alone.grad, rtol=1e-4, atol=1e-6)
        assert probe.grad.data_ptr() == request.into.data_ptr()  # into the requester's own buffer


@pytest.mark.parametrize("name", ["mlp-small", "cnn-small"])
def test_probe_gradients_match_autograd_and_leave_the_models_alone(digits, digits_parts, name):
    arch = build_model(name, digits.input_shape, 10)
    g = torch.Generator().manual_seed(3)
    models = torch.stack([arch.init(g) for _ in range(3)])
    before = models.clone()
    parts = [torch.as_tensor(p) for p in digits_parts[:3]]
    batches = make_schedule(parts, np.ones(3, np.int64), 7, torch.Generator().manual_seed(0))
    probe = gradients_at(arch, models, digits.x_train, digits.y_train, batches.idx[0], batches.weight[0])
    from torch.nn.utils import parameters_to_vector, vector_to_parameters
    for i in range(3):
        net = arch.module().eval()
        vector_to_parameters(models[i].clone(), net.parameters())
        ids = batches.idx[0, i][batches.weight[0, i] > 0]
        loss = F.cross_entropy(net(digits.x_train[ids]), digits.y_train[ids])
        grad = torch.autograd.grad(loss, list(net.parameters()))
        assert float(probe.loss[i]) == pytest.approx(loss.item(), rel=1e-5)
        torch.testing.assert_close(probe.grad[i], parameters_to_vector(grad), rtol=1e-4, atol=1e-6)
    assert torch.equal(models, before)


@pytest.mark.parametrize("name", ["mlp-small", "cnn-small"])
@pytest.mark.parametrize("rate", [0.05, torch.tensor([0.01, 0.05, 0.2]), torch.tensor(0.05)])
def test_a_step_taken_in_the_backward_pass_is_the_gradients_sgd_step(digits, digits_parts, name, rate):
    """``Architecture.backward(..., rate=)`` moves the active rows by ``-rate x`` the gradient a plain
    backward pass writes (a float, the clients' rates, or one rate on the device) and leaves the rest."""
    arch = build_model(name, digits.input_shape, 10)
    g = torch.Generator().manual_seed(4)
    start = torch.stack([arch.init(g) for _ in range(4)])
    parts = [torch.as_tensor(p) for p in digits_parts[:3]]
    batch = make_schedule(parts, np.ones(3, np.int64), 7, torch.Generator().manual_seed(0))
    idx, w = batch.idx[0], batch.weight[0]

    def backward(stack: Stack, grads: torch.Tensor, step: float | torch.Tensor | None) -> None:
        params = prefix(stack.blocks, 3)  # the fourth client has finished its steps
        out, tape = arch.forward(params, arch.gather(digits.x_train, idx), True)
        _, dlogits = cross_entropy({"model": out}, digits.y_train[idx], w)
        arch.backward(params, tape, dlogits["model"], prefix(stack.views(grads), 3), None, step)

    plain, fused = Stack.from_rows(arch, start), Stack.from_rows(arch, start)
    grad = torch.zeros_like(plain.flat)
    backward(plain, grad, None)
    expected = start.clone()
    expected[:3] -= torch.as_tensor(rate).expand(3).view(-1, 1) * Stack(arch, grad).rows()[:3]
    backward(fused, torch.zeros_like(fused.flat), rate)
    torch.testing.assert_close(fused.rows(), expected, rtol=1e-5, atol=1e-7)
    assert torch.equal(fused.rows()[3], start[3])


def test_plain_sgd_steps_in_the_backward_pass_and_other_optimisers_step_on_the_gradient(
        digits, digits_parts, monkeypatch):
    arch = build_model("mlr", (1, 8, 8), 10)
    stack = Stack.broadcast(arch, arch.init(torch.Generator().manual_seed(0)), 3)
    lr = torch.tensor([0.1, 0.2, 0.3])
    optimiser = StackOptimizer(stack, OptimizerConfig(), lr)
    assert torch.equal(optimiser.fused_rate(), lr)
    optimiser.set_active(2)
    assert torch.equal(optimiser.fused_rate(), lr[:2])
    assert StackOptimizer(stack, OptimizerConfig(), torch.full((3,), 0.1)).fused_rate() == pytest.approx(0.1)
    for other, mu in [(OptimizerConfig(momentum=0.9), 0.0), (OptimizerConfig(weight_decay=1e-3), 0.0),
                      (OptimizerConfig("adam"), 0.0), (OptimizerConfig(), 0.5)]:
        assert StackOptimizer(stack, other, lr, mu).fused_rate() is None
    steps = []
    monkeypatch.setattr(StackOptimizer, "step", lambda self, grad: steps.append(self.cfg.name))
    schedule, _ = _cohort(digits_parts, [1, 1, 1])
    for config in (OptimizerConfig(), OptimizerConfig("adam")):
        train_cohort([Member("model", Stack.from_rows(arch, stack.rows()))], digits.x_train, digits.y_train,
                     schedule, lr, config)
    assert steps == ["adam"] * schedule.num_steps


def _address(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("hold", [
    lambda t: None,  # nothing: the next take reuses it
    lambda t: t[2:],  # a view
    lambda t: t.numpy(),  # a NumPy array sharing its memory
    lambda t: [t],  # the tensor handed out itself
])
def test_a_pooled_buffer_is_handed_out_again_only_once_nothing_else_holds_it(hold):
    pool, like = BufferPool(), torch.zeros(1)
    first = pool.take(6, like)
    address, held = _address(first), hold(first)
    del first
    again = pool.take(6, like)
    assert (_address(again) == address) == (held is None)
    assert len(pool) == (1 if held is None else 2)


def test_a_pool_keeps_its_most_recent_sizes_and_tells_its_free_buffers():
    pool, like = BufferPool(sizes=2), torch.zeros(1)
    for numel in (3, 4, 5):
        pool.take(numel, like)
    assert sorted(b.numel() for b in pool.free()) == [4, 5]  # 3, the least recently asked for, is forgotten
    held = pool.take(4, like)
    assert sorted(b.numel() for b in pool.free()) == [5] and held.numel() == 4
    # a dtype is a size of its own
    assert pool.take(4, torch.zeros(1, dtype=torch.float64)).dtype == torch.float64


def test_a_take_passes_a_held_buffer_once_not_at_every_take(monkeypatch):
    """Copies stepping in turns leave the others' held buffers in front of their own free ones."""
    from fl_gym.engine import pool as pool_module

    pool, like = BufferPool(), torch.zeros(1)
    held = [pool.take(6, like) for _ in range(10)]
    pool.take(6, like), pool.take(6, like)  # two free ones, behind the ten held
    checks = []
    monkeypatch.setattr(pool_module, "_only_pooled", lambda b: checks.append(b) or _address(b) not in {
        _address(h) for h in held})
    taken = [pool.take(6, like) for _ in range(2)]
    # the first take passes the ten held buffers and takes a free one; the second finds its own at once
    assert len(checks) == 10 + 1 + 1 and len(pool) == 12 and len({_address(t) for t in taken}) == 2


def test_keep_copies_a_fresh_result_into_a_pooled_buffer_of_its_shape():
    pool, value = BufferPool(), torch.arange(6.0).view(2, 3)
    kept = pool.keep(value)
    assert kept.shape == (2, 3) and torch.equal(kept, value) and _address(kept) != _address(value)


def _statistics_by_hand(rows: np.ndarray, start: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """One cohort's statistics in float64, a row at a time."""
    out = []
    mean = sum(w * (r - start) for w, r in zip(weights, rows, strict=True))
    for r in rows:
        d = r - start
        cos = d @ mean / max(np.linalg.norm(d) * np.linalg.norm(mean), 1e-12)
        out.append([r @ start / (np.linalg.norm(r) * np.linalg.norm(start)), np.linalg.norm(r),
                    np.linalg.norm(d), np.arccos(np.clip(cos, -1, 1))])
    return np.array(out).T


def test_update_statistics_of_several_cohorts_are_each_cohorts_by_hand():
    """Cohorts of 3, 1 and 2 rows reduced in one call; the one-row cohort's update is its mean (angle 0)."""
    rng = np.random.default_rng(0)
    counts, p = [3, 1, 2], 7
    rows, starts = rng.normal(size=(6, p)), rng.normal(size=(3, p))
    weights = np.concatenate([rng.dirichlet(np.ones(c)) for c in counts])
    got = update_statistics(torch.as_tensor(rows), torch.as_tensor(starts), torch.as_tensor(weights), counts)
    lo = 0
    for j, c in enumerate(counts):
        np.testing.assert_allclose(got[:, lo: lo + c].numpy(),
                                   _statistics_by_hand(rows[lo: lo + c], starts[j], weights[lo: lo + c]),
                                   rtol=1e-10, atol=1e-7)
        lo += c
    assert got[3, 3] == pytest.approx(0.0, abs=1e-6)


def test_a_cohort_of_ones_update_is_at_angle_zero_to_its_mean_in_float32():
    """Not the arccos of its rounded cosine: 4.9e-4 rad here, and another angle in another reduction."""
    rng = np.random.default_rng(1)
    rows = torch.as_tensor(rng.normal(size=(1, 4810)), dtype=torch.float32)
    start = torch.as_tensor(rng.normal(size=(1, 4810)), dtype=torch.float32)
    assert update_statistics(rows, start, torch.ones(1), [1])[3].tolist() == [0.0]
    zero = update_statistics(start, start, torch.ones(1), [1])  # no update: its cosines count as 0
    assert zero[3].tolist() == [pytest.approx(math.pi / 2)]


# the default: one reduction; a budget of 6 models' values: the cohorts of 4 and 2 rows, then the one of 5
@pytest.mark.parametrize("budget,calls", [(None, [11]), (6 * 4810, [6, 5])])
def test_merged_statistics_requests_equal_each_run_alone(budget, calls, monkeypatch):
    """A vector env's copies get from merged calls, up to float rounding, what each computes alone."""
    from fl_gym.engine import batcher

    if budget is not None:
        monkeypatch.setattr(batcher, "MERGED_VALUES", budget)
    reduced = []
    monkeypatch.setattr(batcher, "update_statistics", lambda rows, *args: reduced.append(len(rows)) or
                        update_statistics(rows, *args))
    arch = build_model("mlp-small", (1, 8, 8), 10)
    g = torch.Generator().manual_seed(0)
    requests = [StatsRequest(Stack.from_rows(arch, torch.randn(k, arch.num_params, generator=g)),
                             torch.randn(arch.num_params, generator=g), torch.full((k,), 1.0 / k))
                for k in (4, 2, 5)]
    merged = _MERGED[StatsRequest](requests)
    assert reduced == calls
    for request, values in zip(requests, merged, strict=True):
        np.testing.assert_allclose(values, request.run(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("opt,mu", [(OptimizerConfig(momentum=0.9), 0.0), (OptimizerConfig("adam"), 0.0),
                                    (OptimizerConfig(), 0.5)])
def test_a_restarted_optimiser_steps_as_a_fresh_one(opt, mu):
    """What a CUDA graph's replay relies on: momentum, Adam's moments and step count start over, and
    FedProx's pull is toward the rows it restarts from."""
    arch = build_model("mlr", (1, 8, 8), 10)
    start = torch.stack([arch.init(torch.Generator().manual_seed(i)) for i in range(3)])
    grads = torch.randn(3, start.numel(), generator=torch.Generator().manual_seed(0))
    lr = torch.tensor([0.1, 0.2, 0.3])
    used, fresh = Stack.from_rows(arch, start.flip(0)), Stack.from_rows(arch, start)
    optimiser = StackOptimizer(used, opt, lr, mu)
    optimiser.set_active(2)
    for g in grads[:2]:
        optimiser.step(g.clone())
    used.flat.copy_(fresh.flat)
    optimiser.restart()
    optimiser.step(grads[2].clone())
    StackOptimizer(fresh, opt, lr, mu).step(grads[2].clone())
    assert optimiser.t == 1 and optimiser.active == 3
    torch.testing.assert_close(used.flat, fresh.flat, rtol=0, atol=0)


def test_a_graphed_cohort_needs_a_cuda_device(digits, digits_parts):
    arch = build_model("mlr", digits.input_shape, 10)
    parts = [torch.as_tensor(p) for p in digits_parts[:2]]
    schedule = make_schedule(parts, np.array([3, 3]), 10, torch.Generator().manual_seed(0))
    stack = Stack.broadcast(arch, arch.init(torch.Generator().manual_seed(0)), 2)
    with pytest.raises(ValueError, match="GraphedCohort: expected data on a CUDA device, got cpu"):
        GraphedCohort([Member("model", stack)], digits.x_train, digits.y_train, schedule,
                      torch.full((2,), 0.1), OptimizerConfig())


def test_rates_read_from_the_tensor_follow_what_is_copied_into_it():
    """A CUDA graph replays new learning rates by copying them into the optimiser's ``lr``."""
    arch = build_model("mlr", (1, 8, 8), 10)
    start = torch.stack([arch.init(torch.Generator().manual_seed(i)) for i in range(3)])
    grad = torch.randn(start.numel(), generator=torch.Generator().manual_seed(0))
    lr = torch.full((3,), 0.1)
    used, fresh = Stack.from_rows(arch, start), Stack.from_rows(arch, start)
    optimiser = StackOptimizer(used, OptimizerConfig(), lr)
    optimiser.rates_from_tensor()
    lr.fill_(0.3)
    optimiser.step(grad.clone())
    StackOptimizer(fresh, OptimizerConfig(), torch.full((3,), 0.3)).step(grad.clone())
    torch.testing.assert_close(used.flat, fresh.flat)
