"""Named architectures: size families and the papers' exact networks.

Families (any input shape; tested on 8x8, 28x28 and 32x32):

* ``mlr``: multinomial logistic regression (FedAdp's MLR: 7,850 parameters on MNIST).
* ``mlp-small`` / ``mlp-medium`` / ``mlp-large``: hidden layers ``[64]``, ``[200]``,
  ``[200, 200]`` (the last is the 784-200-200-10 MLP of the compute-bound benchmark).
* ``cnn-small`` / ``cnn-medium`` / ``cnn-large``: two 3x3 conv + pool stages with ``(c, 2c)``
  channels and an ``f``-unit hidden layer, ``(c, f) = (8, 32), (16, 64), (32, 128)``
  (``cnn-small`` on digits is conv 1-8-16, fc 64-32-10).
* ``hapfl-lite`` / ``hapfl-small`` / ``hapfl-medium`` / ``hapfl-large``: HAPFL's ``HapflCNN(c, f)``,
  sized by us (the paper names four sizes, not their widths): ``(c, f) = (8, 64), (16, 128), (24, 192),
  (32, 256)``.

Paper networks (parameter counts pinned by the tests):

* ``fedadp-cnn``: McMahan's CNN, 5x5 convs with 'same' padding, 1,663,370 parameters.
* ``fedentropy-lenet``: LeNet-5 on 3x32x32, 62,006 parameters with 10 classes.
* ``ddfl-mnist-cnn``: PyTorch's MNIST example net with dropout, 1,199,882 parameters.
* ``fedent-mnist-cnn``: McMahan's CNN with dropout 0.25/0.5, 1,663,370 parameters.
* ``fedent-cifar10-cnn``: three 3x3 convs, 586,250 parameters.
* ``fedent-lenet5``: LeNet-5 on 28x28 with ``pad=2``, 64,001 parameters with 37 classes.
* ``fedent-vgg11``: VGG-11 without BatchNorm, 9,271,780 parameters with 100 classes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fl_gym.models.architecture import Architecture
from fl_gym.models.layers import AdaptiveAvgPool2d, Conv2d, Dropout, Flatten, Layer, Linear, MaxPool2d, ReLU
from fl_gym.validation import UserError, require_choice

# a catalogue entry: (input shape, classes, the architecture's name) -> the architecture
Maker = Callable[[Sequence[int], int, str], Architecture]


class _DoesNotFit(Exception):
    """An input shape the network being built cannot take (:func:`build_model` names the model)."""


class _Builder:
    """Appends layers while tracking the per-sample shape, so the zoo needs no arithmetic."""

    def __init__(self, input_shape: Sequence[int]) -> None:
        self.input_shape = self.shape = tuple(input_shape)
        self.layers: list[Layer] = []
        self.grouped = False

    def add(self, layer: Layer) -> _Builder:
        self.layers.append(layer)
        self.shape = layer.out_shape(self.shape)
        if min(self.shape) < 1:
            raise _DoesNotFit(f"it is too small: layer {len(self.layers)} ({type(layer).__name__}) would "
                              f"output {self.shape}")
        return self

    def conv(self, out: int, kernel: int, padding: int = 0) -> _Builder:
        if len(self.shape) != 3:
            raise _DoesNotFit("a network with conv layers takes (C, H, W) images")
        self.grouped = True
        return self.add(Conv2d(self.shape[0], out, kernel, padding)).add(ReLU())

    def pool(self, kernel: int = 2) -> _Builder:
        return self.add(MaxPool2d(kernel))

    def flatten(self) -> _Builder:
        layer = Flatten(self.grouped, self.shape[0])
        self.grouped = False
        return self.add(layer)

    def dense(self, out: int, relu: bool = True, dropout: float = 0.0) -> _Builder:
        if dropout:
            self.add(Dropout(dropout))
        self.add(Linear(self.shape[0], out))
        return self.add(ReLU()) if relu else self

    def build(self, name: str, num_classes: int, input_shape: Sequence[int]) -> Architecture:
        return Architecture(name, input_shape, num_classes, self.layers)


def _mlp(hidden: Sequence[int]) -> Maker:
    def make(shape: Sequence[int], classes: int, name: str) -> Architecture:
        b = _Builder(shape).flatten()
        for h in hidden:
            b.dense(h)
        return b.dense(classes, relu=False).build(name, classes, shape)
    return make


def _cnn(c: int, f: int) -> Maker:
    def make(shape, classes, name):
        b = _Builder(shape).conv(c, 3, 1).pool().conv(2 * c, 3, 1).pool().flatten()
        return b.dense(f).dense(classes, relu=False).build(name, classes, shape)
    return make


def _hapfl(c: int, f: int) -> Maker:
    def make(shape, classes, name):
        b = _Builder(shape).conv(c, 3, 1).pool().conv(2 * c, 3, 1).pool().conv(4 * c, 3, 1).pool()
        b.add(AdaptiveAvgPool2d(2)).flatten()
        return b.dense(f).dense(classes, relu=False).build(name, classes, shape)
    return make


def _mcmahan(dropout: float) -> Maker:
    def make(shape, classes, name):
        b = _Builder(shape).conv(32, 5, 2).pool().conv(64, 5, 2).pool().flatten()
        b = b.dense(512, dropout=dropout / 2).dense(classes, relu=False, dropout=dropout)
        return b.build(name, classes, shape)
    return make


def _lenet(pad: int) -> Maker:
    def make(shape, classes, name):
        b = _Builder(shape).conv(6, 5, pad).pool().conv(16, 5).pool().flatten().dense(120).dense(84)
        return b.dense(classes, relu=False).build(name, classes, shape)
    return make


def _ddfl_mnist(shape, classes, name):
    b = _Builder(shape).conv(32, 3).conv(64, 3).pool().flatten()
    return b.dense(128, dropout=0.25).dense(classes, relu=False, dropout=0.5).build(name, classes, shape)


def _fedent_cifar(shape, classes, name):
    b = _Builder(shape).conv(32, 3, 1).pool().conv(64, 3, 1).pool().conv(64, 3, 1).pool().flatten()
    return b.dense(512, dropout=0.25).dense(classes, relu=False, dropout=0.5).build(name, classes, shape)


def _vgg11(shape, classes, name):
    b = _Builder(shape)
    for v in (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"):
        b.pool() if v == "M" else b.conv(v, 3, 1)
    return b.flatten().dense(classes, relu=False).build(name, classes, shape)


_REGISTRY: dict[str, Maker] = {
    "mlr": _mlp(()),
    "mlp-small": _mlp((64,)),
    "mlp-medium": _mlp((200,)),
    "mlp-large": _mlp((200, 200)),
    "cnn-small": _cnn(8, 32),
    "cnn-medium": _cnn(16, 64),
    "cnn-large": _cnn(32, 128),
    "hapfl-lite": _hapfl(8, 64),
    "hapfl-small": _hapfl(16, 128),
    "hapfl-medium": _hapfl(24, 192),
    "hapfl-large": _hapfl(32, 256),
    "fedadp-cnn": _mcmahan(0.0),
    "fedadp-mlr": _mlp(()),
    "fedentropy-lenet": _lenet(0),
    "ddfl-mnist-cnn": _ddfl_mnist,
    "fedent-mnist-cnn": _mcmahan(0.5),
    "fedent-cifar10-cnn": _fedent_cifar,
    "fedent-lenet5": _lenet(2),
    "fedent-vgg11": _vgg11,
}
MODELS = tuple(_REGISTRY)


def build_model(name: str, input_shape: Sequence[int], num_classes: int) -> Architecture:
    """Build a named architecture for an input shape and class count.

    Raises:
        ValueError: unknown name, or an input shape the network cannot take (conv nets need
            ``(C, H, W)``; the paper networks need their paper's image size).
    """
    require_choice("model", name, MODELS)
    try:
        return _REGISTRY[name](tuple(input_shape), num_classes, name)
    except _DoesNotFit as err:  # the user chose the model, not the data set's shape: name the model
        raise UserError(f"model={name!r} is out of range for input_shape={tuple(input_shape)} ({err}); "
                        "allowed: a model that takes it (mlr and the mlp-* models take any)") from None
