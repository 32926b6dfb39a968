"""Client-batched layers with an explicit backward pass.

Each layer computes K clients' copies at once. Parameters carry a leading client dimension K
(``(K, out, in)`` for a linear weight) and gradients are written into caller-owned buffers, so
one training step is a fixed, short sequence of tensor operations whatever K is: no per-client
Python loop and no autograd graph to build (autograd's bookkeeping costs more than the maths
at the small sizes FL simulation lives at).

Two activation layouts:

* *client* ``(K, B, F)``: linear layers, ``torch.baddbmm`` over the client dimension;
* *grouped* ``(B, K*C, H, W)``: convolution folds the clients into the channels of one grouped
  convolution (``groups=K``); pooling and ReLU act per channel, so they need no change. The
  memory layout is :func:`conv_layout`'s, per device.

``Flatten`` moves from grouped to client layout. Every layer also builds its plain
``torch.nn`` twin (:meth:`Layer.module`), which the per-client reference loop and the tests use.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

aten = torch.ops.aten
Rate = float | Tensor  # an SGD step's rate: one number, or the clients' (a tensor of one value or (K,))


def conv_layout(device: torch.device) -> torch.memory_format:
    """Memory layout of grouped activations on ``device``.

    ``channels_last`` on the CPU, where it makes max-pooling 10x faster. NCHW elsewhere: on an
    H100, cuDNN ran a ``channels_last`` grouped convolution as one kernel per group plus layout
    conversions, and the FedAdp CNN round of 100 clients took 1.2x as long as in NCHW.
    """
    return torch.channels_last if device.type == "cpu" else torch.contiguous_format


class Layer:
    """A layer of a client-batched architecture.

    Subclasses set ``param_shapes`` (per client, without K) and implement :meth:`forward`,
    :meth:`backward`, :meth:`out_shape`, :meth:`module` and :meth:`macs`.
    """

    param_shapes: tuple[tuple[int, ...], ...] = ()
    fan_in: int = 1
    random_in_training: bool = False  # draws from the generator in a training forward pass

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Per-sample output shape for a per-sample input shape."""
        return in_shape

    def forward(self, x: Tensor, params: list[Tensor], train: bool, gen: torch.Generator | None
                ) -> tuple[Tensor, object]:
        """Return the output and what :meth:`backward` needs."""
        raise NotImplementedError

    def backward(self, dy: Tensor, params: list[Tensor], saved: object, grads: list[Tensor],
                 need_dx: bool) -> Tensor | None:
        """Write parameter gradients into ``grads`` and return the input gradient if asked."""
        raise NotImplementedError

    def descend(self, dy: Tensor, params: list[Tensor], saved: object, grads: list[Tensor], rate: Rate,
                need_dx: bool) -> Tensor | None:
        """One SGD step in place, ``p -= rate * dL/dp``; returns the input gradient (at ``p`` before it).

        ``rate`` is one float, or a tensor of the clients' rates (``(K,)``, or one value). By
        default the gradients go through ``grads`` (the caller's buffers); a layer may fold the
        step into its backward products instead.
        """
        dx = self.backward(dy, params, saved, grads, need_dx)
        for p, g in zip(params, grads, strict=True):
            if isinstance(rate, float):
                p.add_(g, alpha=-rate)
            else:
                p.addcmul_(g, rate.view(-1, *[1] * (p.dim() - 1)) if rate.dim() else rate, value=-1)
        return dx

    def module(self) -> nn.Module:
        """The equivalent single-client ``torch.nn`` module."""
        raise NotImplementedError

    def macs(self, in_shape: tuple[int, ...]) -> int:
        """Multiply-accumulates of the forward pass for one sample."""
        return 0


class Linear(Layer):
    """``y = x W^T + b`` per client; ``x`` is ``(K, B, in)``."""

    def __init__(self, in_features: int, out_features: int) -> None:
        self.in_features, self.out_features = in_features, out_features
        self.param_shapes = ((out_features, in_features), (out_features,))
        self.fan_in = in_features

    def out_shape(self, in_shape: tuple[int, ...]) -> tuple[int, ...]:
        return (self.out_features,)

    def forward(self, x, params, train, gen):
        w, b = params
        return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2)), x

    def backward(self, dy, params, saved, grads, need_dx):
        torch.bmm(dy.transpose(1, 2), saved, out=grads[0])
        torch.sum(dy, dim=1, out=grads[1])
        return torch.bmm(dy, params[0]) if need_dx else None

    def descend(self, dy, params, saved, grads, rate, need_dx):
        """The step as one in-place product per weight, ``W += (-rate * dy)^T x``.

        No gradient is written and read back: on a merged cohort of 80-160 clients of a small
        MLP, backward and update took 0.65x the time of a backward into buffers and an update.
        """
        w, b = params
        dx = torch.bmm(dy, w) if need_dx else None  # before w moves
        if isinstance(rate, float):
            w.baddbmm_(dy.transpose(1, 2), saved, alpha=-rate)
            b.add_(dy.sum(1), alpha=-rate)
        else:
            scaled = dy * (rate.view(-1, 1, 1) if rate.dim() else rate)
            w.baddbmm_(scaled.transpose(1, 2), saved, alpha=-1)
            b.sub_(scaled.sum(1))
        return dx

    def module(self) -> nn.Module:
        return nn.Linear(self.in_features, self.out_features)

    def macs(self, in_shape):
        return self.in_features * self.out_features


class Conv2d(Layer):
    """Square-kernel convolution; K clients are the groups of one grouped convolution."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, padding: int = 0,
                 stride: int = 1) -> None:
        self.cin, self.cout, self.k = in_channels, out_channels, kernel
        self.padding, self.stride = padding, stride
        self.param_shapes = ((out_channels, in_channels, kernel, kernel), (out_channels,))
        self.fan_in = in_channels * kernel * kernel

    def out_shape(self, in_shape):
        _, h, w = in_shape
        size = lambda n: (n + 2 * self.padding - self.k) // self.stride + 1  # noqa: E731
        return (self.cout, size(h), size(w))

    def _weight(self, params: list[Tensor]) -> tuple[Tensor, Tensor, int]:
        w, b = params
        k = w.shape[0]
        return w.reshape(k * self.cout, self.cin, self.k, self.k), b.reshape(-1), k

    def forward(self, x, params, train, gen):
        w, b, k = self._weight(params)
        return F.conv2d(x, w, b, self.stride, self.padding, groups=k), x

    def backward(self, dy, params, saved, grads, need_dx):
        w, _, k = self._weight(params)
        dx, dw, db = aten.convolution_backward(
            dy, saved, w, [k * self.cout], [self.stride] * 2, [self.padding] * 2, [1, 1], False, [0, 0], k,
            [need_dx, True, True])
        grads[0].copy_(dw.view(grads[0].shape))
        grads[1].copy_(db.view(grads[1].shape))
        return dx

    def module(self):
        return nn.Conv2d(self.cin, self.cout, self.k, self.stride, self.padding)

    def macs(self, in_shape):
        c, h, w = self.out_shape(in_shape)
        return c * h * w * self.cin * self.k * self.k


class ReLU(Layer):
    """In-place rectifier (no layer keeps its output, so overwriting is safe)."""

    def forward(self, x, params, train, gen):
        y = x.relu_()
        return y, y

    def backward(self, dy, params, saved, grads, need_dx):
        return aten.threshold_backward(dy, saved, 0)  # 30x faster than masked_fill_ on channels_last

    def module(self):
        return nn.ReLU()


class MaxPool2d(Layer):
    """Non-overlapping ``k x k`` max pooling (floor mode)."""

    def __init__(self, kernel: int = 2) -> None:
        self.k = kernel

    def out_shape(self, in_shape):
        c, h, w = in_shape
        return (c, h // self.k, w // self.k)

    def forward(self, x, params, train, gen):
        y, idx = aten.max_pool2d_with_indices(x, [self.k] * 2, [self.k] * 2)
        return y, (x, idx)

    def backward(self, dy, params, saved, grads, need_dx):
        x, idx = saved
        return aten.max_pool2d_with_indices_backward(dy, x, [self.k] * 2, [self.k] * 2, [0, 0], [1, 1],
                                                     False, idx)

    def module(self):
        return nn.MaxPool2d(self.k)


class AdaptiveAvgPool2d(Layer):
    """Average pooling to a fixed ``size x size`` output."""

    def __init__(self, size: int) -> None:
        self.size = size

    def out_shape(self, in_shape):
        return (in_shape[0], self.size, self.size)

    def forward(self, x, params, train, gen):
        return F.adaptive_avg_pool2d(x, self.size), x

    def backward(self, dy, params, saved, grads, need_dx):
        return aten._adaptive_avg_pool2d_backward(dy.contiguous(memory_format=conv_layout(dy.device)), saved)

    def module(self):
        return nn.AdaptiveAvgPool2d(self.size)


class Flatten(Layer):
    """Flatten each sample; from grouped ``(B, K*C, H, W)`` to client ``(K, B, C*H*W)`` if ``grouped``."""

    def __init__(self, grouped: bool, channels: int = 1) -> None:
        self.grouped, self.channels = grouped, channels

    def out_shape(self, in_shape):
        return (math.prod(in_shape),)

    def forward(self, x, params, train, gen):
        if not self.grouped:
            return x.reshape(x.shape[0], x.shape[1], -1), x.shape
        b = x.shape[0]
        x = x.contiguous()
        return x.view(b, x.shape[1] // self.channels, -1).transpose(0, 1).contiguous(), x.shape

    def backward(self, dy, params, saved, grads, need_dx):
        if not self.grouped:
            return dy.view(saved)
        return dy.transpose(0, 1).reshape(saved).contiguous(memory_format=conv_layout(dy.device))

    def module(self):
        return nn.Flatten()


class Dropout(Layer):
    """Inverted dropout with an explicit generator (so episodes stay reproducible)."""

    def __init__(self, p: float) -> None:
        self.p = p
        self.random_in_training = p > 0

    def forward(self, x, params, train, gen):
        if not train or self.p == 0:
            return x, None
        keep = torch.rand(x.shape, generator=gen, device=x.device) >= self.p
        mask = keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * mask, mask

    def backward(self, dy, params, saved, grads, need_dx):
        return dy if saved is None else dy.mul_(saved)

    def module(self):
        return nn.Dropout(self.p)
