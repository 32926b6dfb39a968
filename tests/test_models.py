from __future__ import annotations

import pytest
import torch
from torch.nn.utils import vector_to_parameters

from fl_gym.models import MODELS, Stack, build_model

# Parameter counts from the specs.
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
def test_parameter_counts_match_the_specs(name, shape, classes, count):
    arch = build_model(name, shape, classes)
    assert arch.num_params == count
    assert sum(p.numel() for p in arch.module().parameters()) == count


def test_hapfl_mac_ratios_match_spec_table():
    lite = build_model("hapfl-lite", (3, 32, 32), 10).macs_per_sample
    assert lite == pytest.approx(0.82e6, rel=0.01)
    ratios = [build_model(f"hapfl-{s}", (3, 32, 32), 10).macs_per_sample / lite for s in ("small", "medium", "large")]
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
    out = torch.zeros_like(rows)
    for view, block in zip(stack.row_views(out), stack.blocks, strict=True):
        view.copy_(block)  # each block written through the strided views lands in its columns of the rows
    assert torch.equal(out, rows)


@pytest.mark.parametrize("name,shape", [("fedent-vgg11", (1, 8, 8)), ("cnn-small", (64,)), ("nope", (1, 8, 8))])
def test_bad_model_requests(name, shape):
    with pytest.raises(ValueError, match="input_shape|model="):
        build_model(name, shape, 10)
