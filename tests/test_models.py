from __future__ import annotations

import math
import re

import pytest
import torch
from torch.nn.utils import vector_to_parameters

from fl_gym.models import MODELS, Stack, build_model

# Parameter counts: each paper network as its paper lays it out, layer by layer; HAPFL's sizes at our
# widths (fl_gym/models/zoo.py), which the paper does not give.
PINNED = [
    ("fedadp-mlr", (1, 28, 28), 10, 7_850),
    ("fedadp-cnn", (1, 28, 28), 10, 1_663_370),
    ("fedentropy-lenet", (3, 32, 32), 10, 62_006),
    ("ddfl-mnist-cnn", (1, 28, 28), 10, 1_199_882),
    ("fedent-mnist-cnn", (1, 28, 28), 10, 1_663_370),
    ("fedent-cifar10-cnn", (3, 32, 32), 10, 586_250),
    ("fedent-lenet5", (1, 28, 28), 37, 64_001),
    ("fedent-vgg11", (3, 32, 32), 100, 9_271_780),
    ("hapfl-lite", (1, 28, 28), 10, 14_794),
    ("hapfl-small", (1, 28, 28), 10, 57_482),
    ("hapfl-medium", (1, 28, 28), 10, 128_074),
    ("hapfl-large", (1, 28, 28), 10, 226_570),
    ("hapfl-lite", (3, 32, 32), 10, 14_938),
    ("hapfl-small", (3, 32, 32), 10, 57_770),
    ("hapfl-medium", (3, 32, 32), 10, 128_506),
    ("hapfl-large", (3, 32, 32), 10, 227_146),
]


@pytest.mark.parametrize("name,shape,classes,count", PINNED)
def test_parameter_counts_are_pinned(name, shape, classes, count):
    arch = build_model(name, shape, classes)
    assert arch.num_params == count
    assert sum(p.numel() for p in arch.module().parameters()) == count


@pytest.mark.parametrize("name,shape", [("mlp-small", (1, 8, 8)), ("cnn-small", (1, 8, 8)),
                                        ("fedadp-cnn", (1, 28, 28)), ("fedent-cifar10-cnn", (3, 32, 32))])
def test_widest_is_the_most_values_a_sample_holds_in_any_layer_of_the_torch_module(name, shape):
    arch = build_model(name, shape, 10)
    x, held = torch.zeros(1, *shape), [math.prod(shape)]
    for layer in arch.module():
        x = layer(x)
        held.append(x[0].numel())
    assert arch.widest == max(held)


def test_an_architecture_draws_in_training_exactly_when_its_torch_module_has_dropout():
    """What keeps a model's training out of a merged call (its dropout masks are its own draws)."""
    drawing = []
    for name, shape, classes, _ in PINNED:
        arch = build_model(name, shape, classes)
        dropout = any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in arch.module())
        assert arch.random_in_training == dropout, name
        drawing += [name] if dropout else []
    assert drawing == ["ddfl-mnist-cnn", "fedent-mnist-cnn", "fedent-cifar10-cnn"]  # not fedadp-cnn, its twin


def test_hapfl_mac_ratios_match_the_clocks_default_costs():
    """Our widths make each size's forward cost, in LiteModel units, the per-sample cost the clock
    charges by default (small 3.5, medium 7.5, large 13; ``DEFAULT_COSTS``), within 2 %."""
    lite = build_model("hapfl-lite", (3, 32, 32), 10).macs_per_sample
    assert lite == pytest.approx(0.82e6, rel=0.01)
    ratios = [build_model(f"hapfl-{s}", (3, 32, 32), 10).macs_per_sample / lite
              for s in ("small", "medium", "large")]
    assert ratios == pytest.approx([3.46, 7.38, 12.75], abs=0.01)


FAMILIES = [m for m in MODELS if m.split("-")[0] in ("mlr", "mlp", "cnn", "hapfl")]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 32, 32)])
def test_batched_forward_equals_reference_module(name, shape):
    arch = build_model(name, shape, 10)
    k = 3
    rows = torch.stack([arch.init(torch.Generator().manual_seed(i)) for i in range(k)])
    stack = Stack.from_rows(arch, rows)
    x = torch.randn(50, *shape, generator=torch.Generator().manual_seed(9))
    idx = torch.randint(0, 50, (k, 7), generator=torch.Generator().manual_seed(1))
    logits, _ = arch.forward(stack.blocks, arch.gather(x, idx))
    module = arch.module()
    for i in range(k):
        vector_to_parameters(rows[i], module.parameters())
        torch.testing.assert_close(logits[i], module(x[idx[i]]), rtol=1e-4, atol=1e-5)


def test_init_matches_pytorch_default_bounds():
    arch = build_model("mlp-large", (1, 28, 28), 10)
    vec = arch.init(torch.Generator().manual_seed(0))
    first = vec[: 200 * 784]
    bound = 1 / 784 ** 0.5
    assert float(first.abs().max()) <= bound
    assert float(first.abs().max()) > 0.99 * bound
    again = arch.init(torch.Generator().manual_seed(0))
    assert torch.equal(vec, again)


def test_stack_rows_round_trip():
    arch = build_model("cnn-small", (1, 8, 8), 10)
    rows = torch.randn(4, arch.num_params)
    stack = Stack.from_rows(arch, rows)
    assert torch.equal(stack.rows(), rows)
    assert stack.blocks[0].shape == (4, 8, 1, 3, 3)
    assert torch.equal(Stack.broadcast(arch, rows[1], 3).rows(), rows[1].expand(3, -1))
    which = torch.tensor([3, 0])  # chosen rows, in the order asked for, into a buffer of their size
    assert torch.equal(stack.rows(out=torch.empty(2, arch.num_params), which=which), rows[[3, 0]])
    out = torch.zeros_like(rows)
    for view, block in zip(stack.row_views(out), stack.blocks, strict=True):
        view.copy_(block)  # each block written through the strided views lands in its columns of the rows
    assert torch.equal(out, rows)


@pytest.mark.parametrize("name,shape,why", [
    ("fedent-vgg11", (1, 8, 8), r"it is too small: layer 16 \(MaxPool2d\) would output \(512, 0, 0\)"),
    ("cnn-small", (64,), r"a network with conv layers takes \(C, H, W\) images"),
])
def test_a_model_that_cannot_take_the_input_shape_is_named_with_the_shape(name, shape, why):
    """The user chose the model (an env's ``model``, a federation's ``models``), not the data set's shape."""
    expected = (rf"^model='{name}' is out of range for input_shape={re.escape(str(shape))} \({why}\); "
                r"allowed: a model that takes it \(mlr and the mlp-\* ")
    with pytest.raises(ValueError, match=expected):
        build_model(name, shape, 10)


def test_an_unknown_model_is_refused_by_name():
    with pytest.raises(ValueError, match="model='nope' is out of range; allowed: one of 'mlr', "):
        build_model("nope", (1, 8, 8), 10)


PAPER_SHAPES = {"fedentropy-lenet": (3, 32, 32), "fedent-cifar10-cnn": (3, 32, 32),
                "fedent-vgg11": (3, 32, 32)}


def _input_shape(name: str) -> tuple[int, ...]:
    if name in PAPER_SHAPES:
        return PAPER_SHAPES[name]
    return (1, 28, 28) if name.startswith(("fedadp", "ddfl", "fedent")) else (1, 8, 8)


@pytest.mark.parametrize("name", MODELS)
def test_every_networks_hand_written_backward_equals_autograd_with_dropout_on(name):
    """The explicit backward of every zoo network (the paper CNNs, VGG, dropout and adaptive pooling
    included), for two clients at once, against autograd through the same forward and dropout masks;
    and the forward in evaluation mode against each client's plain ``nn.Sequential``."""
    shape = _input_shape(name)
    arch = build_model(name, shape, 10)
    rows = torch.stack([arch.init(torch.Generator().manual_seed(i)) for i in range(2)])
    stack = Stack.from_rows(arch, rows)
    gen = torch.Generator().manual_seed(0)
    x_all, idx = torch.randn(10, *shape, generator=gen), torch.randint(0, 10, (2, 3), generator=gen)
    x, dlogits = arch.gather(x_all, idx), torch.randn(2, 3, 10, generator=gen)
    logits, tape = arch.forward(stack.blocks, x, train=True, gen=torch.Generator().manual_seed(5))
    grads = [torch.zeros_like(p) for p in stack.blocks]
    arch.backward(stack.blocks, tape, dlogits, grads)
    leaves = [p.detach().clone().requires_grad_(True) for p in stack.blocks]
    again, _ = arch.forward(leaves, x.clone(), train=True, gen=torch.Generator().manual_seed(5))
    torch.testing.assert_close(again, logits, rtol=0, atol=0)  # the same dropout masks
    for auto, hand in zip(torch.autograd.grad((again * dlogits).sum(), leaves), grads, strict=True):
        torch.testing.assert_close(hand, auto, rtol=1e-4, atol=1e-6)
    evaluated, _ = arch.forward(stack.blocks, x, train=False)
    for i in range(2):
        module = arch.module().eval()
        vector_to_parameters(rows[i].clone(), module.parameters())
        torch.testing.assert_close(evaluated[i], module(x_all[idx[i]]), rtol=1e-4, atol=1e-5)
