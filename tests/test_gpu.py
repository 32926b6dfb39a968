"""The CUDA path against the CPU: skipped where no GPU is present (CI), run on a lent GPU machine.

Bit equality is a CPU promise only (cuDNN may pick nondeterministic kernels), so these tests hold
the GPU to the CPU reference within float tolerance, with TF32 off, and to the CPU's clock exactly:
the virtual clock never depends on where the training ran.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

import fl_gym
from fl_gym import Federation, FederationConfig, RoundPlan, partition_scheme
from fl_gym.baselines.hetero import BalancedOraclePolicy
from fl_gym.engine import (
    SGD,
    GraphedCohort,
    Member,
    OptimizerConfig,
    local_steps,
    make_schedule,
    train_cohort,
)
from fl_gym.engine.batcher import MERGED_COPIES, MERGED_COPIES_GPU
from fl_gym.engine.graphs import CohortGraphs
from fl_gym.engine.reference import reference_train
from fl_gym.models import Stack, build_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def _no_tf32():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("name,opt",
                         [("mlp-small", OptimizerConfig(momentum=0.9)), ("cnn-small", OptimizerConfig()),
                          ("hapfl-lite", OptimizerConfig()), ("mlr", OptimizerConfig("adam"))])
def test_batched_engine_on_cuda_matches_the_cpu_loop(digits, digits_parts, name, opt):
    """Not ``hapfl-large``: digits' zero borders make exact ties in its max-pool windows, and
    kernels break ties differently (a valid subgradient either way), which moves one client's
    weights by 1e-4 even between the CPU's two memory layouts."""
    epochs = np.array([3, 1, 2, 0.5, 2])
    sizes = np.array([len(p) for p in digits_parts[:5]])
    steps = local_steps(sizes, epochs, 10)
    order = np.argsort(-steps, kind="stable")
    parts = [torch.as_tensor(digits_parts[i]) for i in order]
    schedule = make_schedule(parts, steps[order], 10, torch.Generator().manual_seed(3))
    arch = build_model(name, digits.input_shape, 10)
    start = torch.stack([arch.init(torch.Generator().manual_seed(i)) for i in range(5)])
    lr = torch.linspace(0.01, 0.05, 5) if opt.name == "sgd" else torch.full((5,), 1e-3)

    on_gpu = dataclasses.replace(schedule, idx=schedule.idx.to(CUDA), weight=schedule.weight.to(CUDA))
    stack = Stack.from_rows(arch, start.to(CUDA))
    result = train_cohort([Member("model", stack)], digits.x_train.to(CUDA), digits.y_train.to(CUDA), on_gpu,
                          lr.to(CUDA), opt)
    ref_rows, ref_loss, _ = reference_train(arch, start, digits.x_train, digits.y_train, schedule, lr, opt)
    assert stack.rows().device.type == "cuda"
    torch.testing.assert_close(stack.rows().cpu(), ref_rows, rtol=0, atol=1e-4)
    torch.testing.assert_close(result.mean_loss["model"].cpu(), ref_loss, rtol=1e-4, atol=1e-4)


def test_federation_on_cuda_learns_and_keeps_the_cpu_clock():
    cfg = FederationConfig(num_clients=10, partition=partition_scheme("dirichlet", alpha=0.5))
    runs = {}
    for device in ("cpu", "cuda"):
        fed = Federation(cfg.replace(device=device), scenario_seed=0)
        runs[device] = [fed.run_round(RoundPlan.make(10, lr=0.05, epochs=2)) for _ in range(10)]
    cpu, gpu = runs["cpu"], runs["cuda"]
    assert [r.round_time for r in gpu] == [r.round_time for r in cpu]
    assert gpu[-1].accuracy >= 0.90
    assert abs(gpu[-1].accuracy - cpu[-1].accuracy) < 0.03


def test_hetero_torch_backend_on_cuda():
    env = {d: gym.make("FLHetero-v0", backend="torch", device=d, local_epochs=2, rounds_per_episode=3)
           for d in ("cpu", "cuda")}
    infos = {}
    for d, e in env.items():
        obs, _ = e.reset(seed=0)
        policy = BalancedOraclePolicy(e)
        infos[d] = []
        for _ in range(3):
            obs, _, _, _, info = e.step(policy.predict(obs)[0])
            infos[d].append(info)
    for c, g in zip(infos["cpu"], infos["cuda"], strict=True):
        assert g["round_time"] == c["round_time"]
        assert 0.0 <= g["hetero/lite_accuracy"] <= 1.0
        assert abs(g["hetero/lite_accuracy"] - c["hetero/lite_accuracy"]) < 0.1


@pytest.mark.parametrize("env_id", ["FLSelect-v0", "FLAggregate-v0", "FLLearningRate-v0"])
def test_batched_copies_on_cuda_train_there_and_keep_the_cpu_clock(env_id):
    """The merged engine calls keep every copy's tensors on its device, and merge the copies' requests
    there as on the CPU (the copies share one copy of the data on the device). Observations are held
    to finiteness only: merged kernels on the GPU round differently from the CPU's, and accuracies
    are counts that a last-bit difference may flip; the clock depends on the actions alone."""
    runs, flushes = {}, {}
    for device in ("cpu", "cuda"):
        vec = fl_gym.make_vec(env_id, 3, seed=5, monitor=False, rounds_per_episode=3, device=device)
        feds = vec.get_attr("federation")
        assert feds[0].device.type == device and feds[1].x_train is feds[0].x_train
        launch_bound = device == "cuda" and vec.batcher.graphs is None  # more copies merge in a turn
        assert vec.batcher.turn == (MERGED_COPIES_GPU if launch_bound else MERGED_COPIES)
        vec.reset()
        vec.action_space.seed(0)
        steps = [vec.step(np.stack([vec.action_space.sample() for _ in range(3)])) for _ in range(4)]
        flushes[device] = vec.batcher.flushes
        vec.close()
        runs[device] = steps
    assert flushes["cuda"] == flushes["cpu"]
    for (obs, _, dones, infos), (cpu_obs, _, cpu_dones, cpu_infos) in zip(runs["cuda"], runs["cpu"],
                                                                          strict=True):
        assert np.isfinite(obs).all() and obs.shape == cpu_obs.shape
        assert list(dones) == list(cpu_dones)
        assert [i["round_time"] for i in infos] == [i["round_time"] for i in cpu_infos]


@pytest.mark.parametrize("name,opt", [("mlp-small", OptimizerConfig(momentum=0.9)),
                                      ("cnn-small", OptimizerConfig()), ("mlr", OptimizerConfig("adam"))])
def test_graph_replays_match_eager_rounds_on_new_batches(digits, digits_parts, name, opt):
    """Two replays on two fresh draws, each against ``train_cohort`` on the same draw: the optimiser
    state (momentum, Adam's moments and step count) and the rows restart between replays."""
    sizes = np.array([len(p) for p in digits_parts[:4]])
    steps = local_steps(sizes, np.array([2, 2, 1, 1]), 10)
    order = np.argsort(-steps, kind="stable")
    parts = [torch.as_tensor(digits_parts[i], device=CUDA) for i in order]
    x, y = digits.x_train.to(CUDA), digits.y_train.to(CUDA)
    arch = build_model(name, digits.input_shape, 10)
    start = torch.stack([arch.init(torch.Generator().manual_seed(i)) for i in range(4)]).to(CUDA)
    lr = torch.full((4,), 0.05 if opt.name == "sgd" else 1e-3, device=CUDA)

    def draw(seed):
        return make_schedule(parts, steps[order], 10, torch.Generator(device=CUDA).manual_seed(seed))

    graphed_rows = Stack.from_rows(arch, start)
    graphed = GraphedCohort([Member("model", graphed_rows)], x, y, draw(0), lr, opt)
    for seed in (1, 2):
        result = graphed.replay(draw(seed))
        eager_rows = Stack.from_rows(arch, start)
        eager = train_cohort([Member("model", eager_rows)], x, y, draw(seed), lr, opt)
        torch.testing.assert_close(graphed_rows.rows(), eager_rows.rows(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(result.mean_loss["model"], eager.mean_loss["model"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(result.last_epoch_loss["model"], eager.last_epoch_loss["model"],
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="GraphedCohort.replay: expected a schedule of steps"):
        graphed.replay(make_schedule(parts[:3], steps[order][:3], 10, torch.Generator(device=CUDA)))
    with pytest.raises(ValueError, match=r"GraphedCohort.replay: expected lr of shape \(4,\), got \(\)"):
        graphed.replay(draw(3), lr=lr[0])
    with pytest.raises(ValueError, match="GraphedCohort.replay: expected start rows of shapes"):
        graphed.replay(draw(3), start=[start[:2].reshape(-1)])


def test_graph_bench_section_prints_its_table(capsys):
    from fl_gym.training.cli import main

    args = ["bench", "--sections", "graphs", "--device", "cuda", "--scenarios", "S3", "--repeats", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "GPU graph ms/round" in out and "| S3 | mlp-small | 10 |" in out


@pytest.mark.parametrize("rates", ["shared", "per-client"])
def test_cohort_graphs_capture_a_recurring_shape_and_train_as_eager_does(digits, digits_parts, rates):
    """The first round of a shape trains eagerly, the second captures, the third replays; each from
    its own start rows and batches, each the rows and losses ``train_cohort`` gives."""
    sizes = np.array([len(p) for p in digits_parts[:3]])
    steps = local_steps(sizes, np.ones(3), 10)
    order = np.argsort(-steps, kind="stable")
    parts = [torch.as_tensor(digits_parts[i], device=CUDA) for i in order]
    x, y = digits.x_train.to(CUDA), digits.y_train.to(CUDA)
    arch = build_model("mlp-small", digits.input_shape, 10)
    lr = torch.tensor([0.05, 0.05, 0.05] if rates == "shared" else [0.01, 0.05, 0.1], device=CUDA)
    opt = OptimizerConfig(momentum=0.9)
    graphs = CohortGraphs()
    for round_ in range(3):
        start = torch.stack([arch.init(torch.Generator().manual_seed(10 * round_ + i)) for i in range(3)])
        start = start.to(CUDA)
        draw = torch.Generator(device=CUDA).manual_seed(round_)
        schedule = make_schedule(parts, steps[order], 10, draw)
        member = Member("model", Stack.from_rows(arch, start))
        result, trained = graphs.train(member, x, y, schedule, lr, opt, SGD())
        eager = Stack.from_rows(arch, start)
        expected = train_cohort([Member("model", eager)], x, y, schedule, lr, opt)
        torch.testing.assert_close(trained.rows(), eager.rows(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(result.mean_loss["model"], expected.mean_loss["model"], rtol=1e-5,
                                   atol=1e-5)
    assert (graphs.captures, graphs.replays) == (1, 2)


def test_batched_copies_on_cuda_replay_graphs_and_train_as_without(monkeypatch):
    """``FLAggregate-v0``'s cohort (every client, one epoch) has the same shape every round: from the
    second round on, its merged training replays a graph, and the copies' global models end where
    they end without graphs. Models, not observations: an accuracy is a count that a last-bit
    difference may flip."""
    models, replays = {}, {}
    for graphs in ("1", "0"):
        monkeypatch.setenv("FL_GYM_CUDA_GRAPHS", graphs)
        vec = fl_gym.make_vec("FLAggregate-v0", 3, seed=5, monitor=False, rounds_per_episode=5, device="cuda")
        vec.reset()
        vec.action_space.seed(0)
        for _ in range(4):
            vec.step(np.stack([vec.action_space.sample() for _ in range(3)]))
        models[graphs] = [fed.global_models[0].cpu() for fed in vec.get_attr("federation")]
        replays[graphs] = vec.batcher.graphs.replays if vec.batcher.graphs is not None else None
        vec.close()
    assert replays["1"] >= 2 and replays["0"] is None
    for with_graphs, without in zip(models["1"], models["0"], strict=True):
        torch.testing.assert_close(with_graphs, without, rtol=1e-4, atol=1e-5)


def test_a_replay_reports_the_last_epoch_of_its_own_schedule(digits):
    """Twelve local steps are two epochs of 6 batches or one of 12: a graph captured on the first
    replays the second, and its last-epoch loss is the second's last 12 steps, as eager."""
    x, y = digits.x_train.to(CUDA), digits.y_train.to(CUDA)
    arch = build_model("mlp-small", digits.input_shape, 10)
    start = arch.init(torch.Generator().manual_seed(0)).to(CUDA)[None]
    lr, opt = torch.full((1,), 0.05, device=CUDA), OptimizerConfig()

    def draw(samples):
        return make_schedule([torch.arange(samples, device=CUDA)], np.array([12]), 10,
                             torch.Generator(device=CUDA).manual_seed(0))

    graphed = GraphedCohort([Member("model", Stack.from_rows(arch, start))], x, y, draw(60), lr, opt)
    result = graphed.replay(draw(120))
    eager = train_cohort([Member("model", Stack.from_rows(arch, start))], x, y, draw(120), lr, opt)
    torch.testing.assert_close(result.last_epoch_loss["model"], eager.last_epoch_loss["model"], rtol=1e-5,
                               atol=1e-5)
