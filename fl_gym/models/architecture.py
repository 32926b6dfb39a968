"""A sequential architecture of client-batched layers, and K clients' parameters as one stack.

Parameter layout. One client's parameters are a flat vector ``(P,)``: every layer's weight
then bias, in layer order (the order of ``nn.Module.parameters()`` of :meth:`Architecture.module`,
so ``torch.nn.utils.vector_to_parameters`` loads it). K clients' parameters form a
:class:`Stack`: a flat *parameter-major* buffer ``(K*P,)`` in which each parameter tensor is one
contiguous ``(K, *shape)`` block. Layers read those blocks as views, gradients are written
into a buffer of the same layout, and an optimiser step is one operation over the whole buffer.
The first ``a`` clients of every block are contiguous too, which lets training drop clients
that have finished their local steps without copying anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from fl_gym.models.layers import Conv2d, Layer, Linear, MaxPool2d, Rate, ReLU, conv_layout


class Architecture:
    """A named stack of :class:`~fl_gym.models.layers.Layer` s for a given input shape and class count.

    Args:
        name: registry name (``"mlp-small"``, ``"fedadp-cnn"``...).
        input_shape: one sample's shape, e.g. ``(1, 28, 28)``.
        num_classes: width of the output layer.
        layers: the layers, first to last.

    Attributes:
        widest: the most values one sample's forward pass holds at once in any layer (its input
            included), which sizes a batched call's working set.
        random_in_training: whether a training forward pass draws from its generator (dropout),
            so that which clients share a call changes what each one draws.
    """

    def __init__(self, name: str, input_shape: Sequence[int], num_classes: int,
                 layers: Sequence[Layer]) -> None:
        self.name, self.input_shape, self.num_classes = name, tuple(input_shape), num_classes
        self.layers = list(layers)
        shape = self.input_shape
        self._macs, self.widest = 0, math.prod(shape)
        for layer in self.layers:
            self._macs += layer.macs(shape)
            shape = layer.out_shape(shape)
            self.widest = max(self.widest, math.prod(shape))
        if shape != (num_classes,):
            raise ValueError(f"Architecture {name!r}: output shape {shape} does not match "
                             f"num_classes={num_classes}")
        self.param_shapes = [s for layer in self.layers for s in layer.param_shapes]
        self.random_in_training = any(layer.random_in_training for layer in self.layers)
        self.fan_ins = [layer.fan_in for layer in self.layers for _ in layer.param_shapes]
        self.sizes = [math.prod(s) for s in self.param_shapes]
        self.num_params = sum(self.sizes)
        self._exec = _pool_before_relu(self.layers)
        first = [i for i, layer in enumerate(self._exec) if layer.param_shapes]
        self._first_param_layer = first[0]
        self.grouped = isinstance(self._exec[first[0]], Conv2d)
        self._spans, lo = [], 0
        for layer in self._exec:
            self._spans.append((lo, lo + len(layer.param_shapes)))
            lo += len(layer.param_shapes)

    def __repr__(self) -> str:
        return f"Architecture({self.name!r}, input_shape={self.input_shape}, params={self.num_params:,})"

    @property
    def macs_per_sample(self) -> int:
        """Forward multiply-accumulates for one sample."""
        return self._macs

    @property
    def train_flops_per_sample(self) -> int:
        """FLOPs of one forward and backward pass for one sample (``6 x MACs``)."""
        return 6 * self._macs

    @property
    def num_bytes(self) -> int:
        """Size of one model on the wire (float32)."""
        return 4 * self.num_params

    def init(self, gen: torch.Generator, device: torch.device | str = "cpu") -> Tensor:
        """A fresh ``(P,)`` parameter vector with PyTorch's default initialisation.

        ``nn.Linear`` and ``nn.Conv2d`` draw weights and biases from ``U(-1/sqrt(fan_in),
        1/sqrt(fan_in))`` (``kaiming_uniform_(a=sqrt(5))`` reduces to that bound).
        """
        pieces = []
        for size, fan_in in zip(self.sizes, self.fan_ins, strict=True):
            bound = 1.0 / math.sqrt(fan_in)
            u = torch.rand(size, generator=gen, device=gen.device if gen is not None else "cpu")
            pieces.append(u.mul_(2 * bound).sub_(bound))
        return torch.cat(pieces).to(device)

    def gather(self, x_all: Tensor, idx: Tensor) -> Tensor:
        """Fetch a ``(K, B)`` index batch from the data tensor in the first layer's layout."""
        k, b = idx.shape
        if not self.grouped:  # index_select on a flat index is 4x faster than x_all[idx]
            return torch.index_select(x_all, 0, idx.reshape(-1)).view(k, b, *x_all.shape[1:])
        x = torch.index_select(x_all, 0, idx.t().reshape(-1))
        return x.view(b, k * x.shape[1], *x.shape[2:]).contiguous(memory_format=conv_layout(x.device))

    def forward(self, params: list[Tensor], x: Tensor, train: bool = False,
                gen: torch.Generator | None = None) -> tuple[Tensor, list[object]]:
        """Logits ``(K, B, C)`` for a batch in :meth:`gather` layout, and the tape for :meth:`backward`."""
        tape = []
        for layer, (lo, hi) in zip(self._exec, self._spans, strict=True):
            x, saved = layer.forward(x, params[lo:hi], train, gen)
            tape.append(saved)
        return x, tape

    def representation(self, tape: list[object]) -> Tensor:
        """The penultimate representation ``(K, B, F)`` of a forward pass: the final linear layer's input."""
        if not isinstance(self._exec[-1], Linear):
            raise ValueError(f"Architecture.representation: {self.name!r} does not end in a linear layer")
        return cast(Tensor, tape[-1])  # what Linear.forward saves: its input

    def backward(self, params: list[Tensor], tape: list[object], dlogits: Tensor, grads: list[Tensor],
                 drepresentation: Tensor | None = None, rate: Rate | None = None) -> None:
        """Write the gradients of the loss into ``grads`` (same views as ``params``).

        ``drepresentation`` adds a loss term's gradient with respect to :meth:`representation`
        (MOON's contrastive term) where the backward pass reaches it. With ``rate``, every layer
        takes its SGD step instead (:meth:`Layer.descend`; ``grads`` what it may use as scratch).
        """
        dy = dlogits
        stop, last = self._first_param_layer, len(self._exec) - 1
        for i in range(last, stop - 1, -1):
            lo, hi = self._spans[i]
            layer, need_dx = self._exec[i], i > stop
            dx = (layer.backward(dy, params[lo:hi], tape[i], grads[lo:hi], need_dx) if rate is None
                  else layer.descend(dy, params[lo:hi], tape[i], grads[lo:hi], rate, need_dx))
            if dx is None:  # the first layer with parameters: no layer below it needs a gradient
                return
            dy = dx + drepresentation if i == last and drepresentation is not None else dx

    def module(self) -> nn.Sequential:
        """The same network as a plain single-client ``nn.Sequential`` (the reference)."""
        return nn.Sequential(*(layer.module() for layer in self.layers))


def _pool_before_relu(layers: list[Layer]) -> list[Layer]:
    """Execution order with every ReLU -> MaxPool pair swapped.

    ``maxpool(relu(x)) == relu(maxpool(x))`` (max commutes with a monotone function), and the
    gradients agree too: a window whose maximum is <= 0 passes no gradient either way. Pooling
    first runs the ReLU on a quarter of the values. :meth:`Architecture.module` keeps the
    original order.
    """
    out = list(layers)
    for i in range(len(out) - 1):
        if isinstance(out[i], ReLU) and isinstance(out[i + 1], MaxPool2d):
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


class Stack:
    """K clients' parameters of one architecture in a parameter-major flat buffer.

    Attributes:
        arch: the architecture.
        k: number of clients.
        flat: ``(K*P,)`` buffer.
        blocks: views of ``flat``, one ``(K, *shape)`` block per parameter tensor.
    """

    def __init__(self, arch: Architecture, flat: Tensor) -> None:
        if flat.numel() % arch.num_params:
            raise ValueError(f"Stack: expected a multiple of {arch.num_params} values, got {flat.numel()}")
        self.arch, self.flat, self.k = arch, flat, flat.numel() // arch.num_params
        self.blocks = self.views(flat)

    def views(self, buffer: Tensor) -> list[Tensor]:
        """Split a buffer of this stack's layout into ``(K, *shape)`` blocks."""
        return self._blocks_of(buffer.split_with_sizes([self.k * size for size in self.arch.sizes]))

    @classmethod
    def from_rows(cls, arch: Architecture, rows: Tensor | Sequence[Tensor]) -> Stack:
        """Stack ``(K, P)`` per-client vectors (or the rows of several such tensors, one after another).

        Written one parameter block at a time into the new buffer: no full-size temporary.
        """
        parts = [rows] if isinstance(rows, Tensor) else list(rows)
        k = sum(part.shape[0] for part in parts)
        stack = cls(arch, parts[0].new_empty(k * arch.num_params))
        # per block, every part's
        columns = zip(*(part.split_with_sizes(arch.sizes, dim=1) for part in parts), strict=True)
        for block, size, pieces in zip(stack.blocks, arch.sizes, columns, strict=True):
            torch.cat(pieces, out=block.view(k, size))
        return stack

    @classmethod
    def broadcast(cls, arch: Architecture, vector: Tensor, k: int, buffer: Tensor | None = None) -> Stack:
        """K copies of one ``(P,)`` vector (written into ``buffer``, ``(K*P,)``, if given)."""
        stack = cls(arch, vector.new_empty(k * arch.num_params) if buffer is None else buffer)
        for block, piece in zip(stack.blocks, vector.split_with_sizes(arch.sizes), strict=True):
            block.copy_(piece.view(block.shape[1:]))  # broadcast over the K rows
        return stack

    def row_views(self, rows: Tensor) -> list[Tensor]:
        """Split a ``(K, P)`` row buffer into ``(K, *shape)`` blocks (strided views that fill the rows)."""
        return self._blocks_of(rows.split_with_sizes(self.arch.sizes, dim=1))

    def _blocks_of(self, pieces: Sequence[Tensor]) -> list[Tensor]:
        return [piece.view(self.k, *shape)
                for piece, shape in zip(pieces, self.arch.param_shapes, strict=True)]

    def rows(self, out: Tensor | None = None, which: Tensor | None = None) -> Tensor:
        """The clients' parameters as ``(K, P)`` vectors (written into ``out`` if given).

        ``which``: the indices of the rows to read, in that order (default every row); the others
        are not copied.
        """
        columns = [b.reshape(self.k, -1) for b in self.blocks]
        if which is not None:
            columns = [column.index_select(0, which) for column in columns]
        return torch.cat(columns, dim=1, out=out)


def prefix(blocks: list[Tensor], a: int) -> list[Tensor]:
    """Views of the first ``a`` clients of each block (contiguous: no copy)."""
    return blocks if a == blocks[0].shape[0] else [b[:a] for b in blocks]
