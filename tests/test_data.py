from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_gym.data import (
    Dirichlet,
    PartitionReport,
    PowerLaw,
    classes_split,
    dirichlet_split,
    holdout_split,
    iid_split,
    label_entropy,
    load_dataset,
    matched_test_split,
    partition,
    partition_scheme,
    power_law_split,
    shards_split,
)
from fl_gym.data.catalog import DatasetNotFoundError
from fl_gym.data.partition import one_class_split


def test_digits_is_real_and_split(digits):
    assert digits.input_shape == (1, 8, 8)
    assert len(digits.y_train) + len(digits.y_test) == 1797
    assert abs(len(digits.y_test) - 0.2 * 1797) < 10
    assert sorted(set(digits.y_test.tolist())) == list(range(10))
    assert abs(float(digits.x_train.mean())) < 1e-4  # standardised with training statistics
    assert load_dataset("digits") is digits  # held once


def test_a_data_set_is_copied_to_a_device_once(digits):
    """Federations on one device share its tensors there (the batched env merges on equal tensors)."""
    originals = (digits.x_train, digits.y_train, digits.x_test, digits.y_test)
    assert all(a is b for a, b in zip(digits.on("cpu"), originals, strict=True))  # .to() copies nothing
    placed = digits.on("meta")
    assert [t.device.type for t in placed] == ["meta"] * 4 and placed[0].shape == digits.x_train.shape
    assert all(a is b for a, b in zip(digits.on(torch.device("meta")), placed, strict=True))


def test_synthetic_follows_fedprox_generator():
    ds = load_dataset("synthetic", alpha=1.0, beta=1.0, num_users=30, seed=3)
    assert ds.input_shape == (60,)
    assert len(ds.natural_split) == 30
    for train, test in ds.natural_split:
        n = len(train) + len(test)
        assert n >= 50  # int(lognormal(4, 2)) + 50
        assert len(train) == int(0.9 * n)
    covered = np.concatenate([t for t, _ in ds.natural_split])
    assert np.array_equal(np.sort(covered), np.arange(len(ds.y_train)))
    # labels are concentrated per device (median about two classes)
    classes = [len(np.unique(ds.y_train.numpy()[t])) for t, _ in ds.natural_split]
    assert np.median(classes) <= 4


@pytest.mark.parametrize("kwargs,message", [
    (dict(seed=-1), "seed=-1 is out of range; allowed: an integer >= 0"),  # numpy's "expected non-negative"
    (dict(seed=1.5), "seed=1.5 is out of range"),
    (dict(iid="yes"), "iid='yes' is out of range; allowed: True or False"),  # read as True: the IID set
])
def test_the_synthetic_generator_names_a_bad_seed_or_iid(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_dataset("synthetic", **kwargs)


def test_synthetic_iid_shares_one_model_and_is_seeded():
    a = load_dataset("synthetic", iid=True, seed=1)
    b = load_dataset("synthetic", iid=True, seed=1)
    c = load_dataset("synthetic", iid=True, seed=2)
    assert a.name == "synthetic-iid"
    assert np.array_equal(a.x_train.numpy(), b.x_train.numpy())
    assert not np.array_equal(a.y_train.numpy()[:50],
                              c.y_train.numpy()[:50]) or len(a.y_train) != len(c.y_train)
    # one global model and mean 0: every device sees many classes
    classes = [len(np.unique(a.y_train.numpy()[t])) for t, _ in a.natural_split]
    assert np.median(classes) >= 5


def test_a_generated_data_set_is_held_once_per_options():
    """Envs built on the same options share its tensors (the batched env merges on equal tensors)."""
    assert load_dataset("synthetic", seed=4, alpha=0.5) is load_dataset("synthetic", alpha=0.5, seed=4)
    assert load_dataset("synthetic", seed=4) is not load_dataset("synthetic", seed=5)
    with pytest.raises(ValueError, match="alpha"):
        load_dataset("synthetic", alpha=[1.0])


def test_missing_torchvision_files_give_one_clear_error(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"mnist.*fl-gym data prepare ROOT"):
        load_dataset("mnist", root=tmp_path, download=False)


def _small_mnist(root: Path, train_labels: np.ndarray | None = None) -> Path:
    """Torchvision's MNIST files of 4 training and 2 test images under ``root``; returns their folder."""
    from fl_gym.data import offline

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 4), ("t10k", 2)):
        labels = rng.integers(0, 10, n) if train_labels is None or prefix == "t10k" else train_labels
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(offline.idx_images(rng.random((n, 784))))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(offline.idx_labels(labels))
    return raw


@pytest.mark.parametrize("labels,said", [
    (np.arange(2), "the training files hold 4 images but 2 labels"),  # another split's labels
    (np.array([0, 1, 2, 10]), r"the training labels run from 0 to 10, not within \[0, 9\]"),
])
def test_torchvision_files_that_do_not_match_are_refused(tmp_path, labels, said):
    """Images of one split with labels of another read whole, and trained on misaligned labels."""
    _small_mnist(tmp_path, labels)
    with pytest.raises(DatasetNotFoundError, match=rf"do not parse \(ValueError: {said}\): damaged"):
        load_dataset("mnist", root=tmp_path, download=False)


@pytest.mark.parametrize("cut,said", [(0, r"do not parse \(ValueError: invalid literal"),
                                      (3, r"do not parse \(AssertionError\): damaged"),
                                      (8, r"do not parse \(ValueError: "),  # numpy's words
                                      (-1, r"\(download=False: shape")])
def test_a_damaged_torchvision_file_is_named_with_what_to_do(tmp_path, cut, said):
    """A file cut short (an interrupted copy) was torchvision's bare AssertionError, or a parser's
    error naming neither the data set nor the file; torch's own (a cut in the data) was named already."""
    from fl_gym.data.datasets import _read_torchvision

    raw = _small_mnist(tmp_path)
    assert load_dataset("mnist", root=tmp_path, download=False).x_train.shape == (4, 1, 28, 28)
    labels = raw / "t10k-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:cut])
    _read_torchvision.cache_clear()
    message = rf"^dataset 'mnist': .*{re.escape(str(tmp_path))}/MNIST.* {said}.*prepare ROOT"
    with pytest.raises(DatasetNotFoundError, match=message):
        load_dataset("mnist", root=tmp_path, download=False)


def test_a_data_set_is_read_once_whether_or_not_it_may_download(tmp_path, monkeypatch):
    """An env that may download and a check that may not (HAPFL's timing backend and its accuracy
    check) held two copies of MNIST; files fetched by the first call are read, not fetched again."""
    from fl_gym.data import datasets

    def fetch(name, root, train, download):  # torchvision, with a download that writes small files
        if download and not (Path(root) / "MNIST").exists():
            _small_mnist(Path(root))
            fetches.append(root)
        return read(name, root, train, False)

    fetches, read = [], datasets._tv_split
    monkeypatch.setattr(datasets, "_tv_split", fetch)
    first = load_dataset("mnist", root=tmp_path, download=True)
    assert len(fetches) == 1 and first.x_train.shape == (4, 1, 28, 28)
    assert load_dataset("mnist", root=tmp_path, download=False) is first
    assert load_dataset("mnist", root=tmp_path, download=True) is first and len(fetches) == 1


def test_a_failed_download_is_one_line(tmp_path, monkeypatch):
    """torchvision lists each mirror it tried on a line of its own: the CLI's error spanned six lines."""
    from fl_gym.data import datasets

    def offline(*args):
        raise RuntimeError("Error downloading x:\nTried https://a/, got:\n<urlopen error>\n")

    monkeypatch.setattr(datasets, "_tv_split", offline)
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("mnist", root=tmp_path / "fresh", download=True)
    assert "\n" not in str(err.value) and "(download=True: Error downloading x: Tried https://a/, got: " \
        "<urlopen error>). Put the files" in str(err.value)


@pytest.mark.parametrize("name,kwargs", [("nope", {}), ("digits", {"alpha": 1})])
def test_bad_dataset_arguments(name, kwargs):
    with pytest.raises(ValueError, match="dataset"):
        load_dataset(name, **kwargs)


LABELS = np.repeat(np.arange(10), 60)  # 600 samples, 60 per class


@pytest.mark.parametrize("cfg", [
    partition_scheme("iid"), partition_scheme("dirichlet", alpha=0.3),
    partition_scheme("dirichlet", alpha=0.3, balance=True),
    partition_scheme("shards", shards_per_client=2),
    partition_scheme("classes", classes_per_client=2, samples_per_client=20),
    partition_scheme("mixed", num_iid=3, classes_per_client=1, samples_per_client=30),
    partition_scheme("power_law"),
])
def test_partitions_are_disjoint_and_seeded(cfg):
    parts = partition(LABELS, 10, cfg, np.random.default_rng(7))
    again = partition(LABELS, 10, cfg, np.random.default_rng(7))
    assert len(parts) == 10
    assert all(np.array_equal(p, q) for p, q in zip(parts, again, strict=True))
    flat = np.concatenate(parts)
    assert len(flat) == len(np.unique(flat))  # no sample in two clients
    if cfg.kind in ("iid", "dirichlet"):
        assert len(flat) == len(LABELS)  # every sample lands somewhere


@pytest.mark.parametrize("exponent", [1e-9, 1e-3])
def test_a_power_law_too_skewed_for_floats_gives_the_rest_to_its_largest_draws(exponent):
    """Pareto draws beyond float range made the shares NaN: negative sizes, clients sharing samples."""
    for seed in range(5):
        parts = partition(LABELS, 10, partition_scheme("power_law", exponent=exponent, min_size=2),
                          np.random.default_rng(seed))
        flat = np.concatenate(parts)
        assert len(flat) == len(np.unique(flat)) and len(flat) <= len(LABELS)
        assert min(len(p) for p in parts) >= 2 and max(len(p) for p in parts) >= len(LABELS) // 10


def test_dirichlet_alpha_controls_skew_and_min_size():
    rng = np.random.default_rng(0)
    skewed = partition(LABELS, 10, partition_scheme("dirichlet", alpha=0.4, min_size=10), rng)
    even = partition(LABELS, 10, partition_scheme("dirichlet", alpha=100.0), rng)
    h_skewed = PartitionReport.of(skewed, LABELS, 10).entropy.mean()
    h_even = PartitionReport.of(even, LABELS, 10).entropy.mean()
    assert h_skewed < h_even
    assert h_even > 3.1  # close to log2(10)
    assert min(len(p) for p in skewed) >= 10


def test_shards_and_classes_shapes():
    parts = partition(LABELS, 10, partition_scheme("shards", shards_per_client=2), np.random.default_rng(1))
    assert all(len(p) == 60 for p in parts)  # 20 shards of 30
    assert all(len(np.unique(LABELS[p])) <= 2 for p in parts)
    parts = partition(LABELS, 10,
                      partition_scheme("mixed", num_iid=4, classes_per_client=1, samples_per_client=30),
                      np.random.default_rng(2))
    assert all(len(np.unique(LABELS[p])) == 1 for p in parts[4:])
    assert all(len(np.unique(LABELS[p])) > 3 for p in parts[:4])


@pytest.mark.parametrize("kwargs,num_clients,param", [
    (dict(kind="dirichlet", alpha=0.0), 10, "alpha"), (dict(kind="dirichlet", alpha=-1.0), 10, "alpha"),
    (dict(kind="dirichlet", alpha=float("nan")), 10, "alpha"),
    (dict(kind="iid"), 601, "num_clients"),
    (dict(kind="classes", classes_per_client=11), 10, "classes_per_client"),
    (dict(kind="dirichlet", min_size=61), 10, "min_size"),
    (dict(kind="shards", shards_per_client=61), 10, "shards_per_client"),
    (dict(kind="mixed", num_iid=11, samples_per_client=10), 10, "num_iid"),
    (dict(kind="bogus"), 10, "partition"),
    (dict(kind="shards", alpha=0.3), 10, "alpha"), (dict(kind="iid", min_size=5), 10, "min_size"),
])
def test_bad_partition_parameters_name_the_parameter(kwargs, num_clients, param):
    with pytest.raises(ValueError, match=f"{param}="):
        partition(LABELS, num_clients, partition_scheme(**kwargs), np.random.default_rng(0))


@pytest.mark.parametrize("kind", ["dirichlet", "power_law", "iid"])
def test_max_clients_is_the_count_at_which_the_split_still_serves_every_client(kind):
    """600 labels: 61 clients of min_size 10 are refused, 60 are not; one sample each without a min_size.

    (A Dirichlet draw rarely gives 60 clients exactly 10 each, so only the sizes' own splits run at 60.)
    """
    scheme = partition_scheme(kind, **({} if kind == "iid" else {"min_size": 10}))
    most = scheme.max_clients(len(LABELS))
    assert most == (600 if kind == "iid" else 60)
    if kind != "dirichlet":
        assert len(partition(LABELS, most, scheme, np.random.default_rng(0))) == most
    with pytest.raises(ValueError, match="min_size=|num_clients="):
        partition(LABELS, most + 1, scheme, np.random.default_rng(0))


def test_one_class_refuses_more_clients_of_a_class_than_it_has_samples():
    """A class's last clients held no sample; the env failed on them later, naming a client's indices."""
    labels = np.delete(LABELS, [180, 181])  # class 3: 58 samples
    parts = one_class_split(labels, 580, _rng(), 10)  # 58 clients a class: one sample each
    assert min(len(p) for p in parts) == 1
    with pytest.raises(ValueError, match=r"num_clients=590 is out of range; allowed: a multiple of the "
                                         r"number of classes \(10\) for partition 'one_class', with a sample "
                                         r"for each of a class's clients \(class 3 has 58 for 59\)"):
        one_class_split(labels, 590, _rng(), 10)


@pytest.mark.parametrize("split,param", [
    (lambda k: iid_split(600, k, _rng()), "num_clients"),
    (lambda k: one_class_split(LABELS, k, _rng(), 10), "num_clients"),
    (lambda k: dirichlet_split(LABELS, k, Dirichlet(), _rng(), 10), "num_clients"),
    (lambda k: shards_split(LABELS, k, 2, _rng()), "num_clients"),
    (lambda k: classes_split(LABELS, k, 2, 10, _rng()), "num_clients"),
    (lambda k: power_law_split(600, k, PowerLaw(), _rng()), "num_clients"),
    (lambda k: shards_split(LABELS, 10, 0, _rng()), "shards_per_client"),  # a ZeroDivisionError
    (lambda k: classes_split(LABELS, 10, 0, 10, _rng()), "classes_per_client"),
    (lambda k: classes_split(LABELS, 10, 2, 0, _rng()), "samples_per_client"),
    (lambda k: iid_split(10.5 if k else "10", 2, _rng()), "num_samples"),  # numpy's AxisError, a TypeError
    (lambda k: power_law_split(-1 if k else 0, 2, PowerLaw(), _rng()), "num_samples"),
    (lambda k: shards_split([0, [1], 2] * 200, 2, 1, _rng()), "labels"),  # numpy's message
])
def test_the_split_helpers_refuse_what_partition_refuses(split, param):
    """The ``*_split`` helpers are public: no client (numpy's "number sections must be larger than
    0", a division by zero) or more clients than samples is named as ``partition`` names it."""
    for k in (0, 601):
        with pytest.raises(ValueError, match=f"{param}="):
            split(k)


def _rng():
    return np.random.default_rng(0)


def test_dirichlet_gives_up_with_advice():
    with pytest.raises(ValueError, match="raise alpha"):
        scheme = partition_scheme("dirichlet", alpha=0.01, min_size=55, max_attempts=3)
        partition(LABELS, 10, scheme, np.random.default_rng(0))


def test_a_knob_a_scheme_does_not_take_is_an_error_naming_the_ones_it_takes():
    with pytest.raises(ValueError,
                       match="alpha=0.3 does not apply to partition='shards'; allowed: shards_per_client"):
        partition_scheme("shards", alpha=0.3)
    with pytest.raises(ValueError, match="allowed: no partition arguments"):
        partition_scheme("iid", num_iid=2)


def test_numpy_knobs_are_held_as_pythons_and_checked_as_they_are():
    scheme = partition_scheme("dirichlet", alpha=np.float32(0.5), balance=np.True_, min_size=np.int64(3))
    assert scheme == Dirichlet(alpha=0.5, balance=True, min_size=3)
    assert [type(v) for v in (scheme.alpha, scheme.balance, scheme.min_size)] == [float, bool, int]
    with pytest.raises(ValueError, match="num_iid=-1 is out of range"):  # a subclass's check runs too
        partition_scheme("mixed", num_iid=np.int64(-1))


def test_matched_test_split_follows_training_labels():
    rng = np.random.default_rng(0)
    train = partition(LABELS, 5, partition_scheme("dirichlet", alpha=0.5), rng)
    test_labels = np.repeat(np.arange(10), 20)
    test = matched_test_split(train, LABELS, test_labels, rng)
    flat = np.concatenate(test)
    assert len(flat) == len(np.unique(flat)) == len(test_labels)
    train_share = PartitionReport.of(train, LABELS, 10).histogram / 60
    test_share = PartitionReport.of(test, test_labels, 10).histogram / 20
    assert np.abs(train_share - test_share).max() <= 0.05 + 1e-9  # floor rounding of 20 samples


def test_holdout_split():
    train, test = holdout_split([np.arange(10), np.arange(10, 15)], 0.2, np.random.default_rng(0))
    assert [len(t) for t in test] == [2, 1]
    assert sorted(np.concatenate(train + test).tolist()) == list(range(15))


def test_label_entropy_hand_values():
    assert label_entropy(np.full(10, 7)) == pytest.approx(math.log2(10))
    assert label_entropy(np.array([0, 5, 0])) == 0.0
    assert label_entropy(np.array([1, 1])) == pytest.approx(1.0)


@pytest.mark.parametrize("call", [
    lambda parts: PartitionReport.of(LABELS, parts, 10),  # swapped: numpy's "inhomogeneous shape" message
    lambda parts: PartitionReport.of(parts, LABELS.astype(float), 10),  # floats index nothing
    lambda parts: partition(LABELS - 1, 4, partition_scheme("iid"), np.random.default_rng(0)),
    lambda parts: partition(LABELS.reshape(60, 10), 4, partition_scheme("iid"), np.random.default_rng(0)),
])
def test_labels_that_are_not_class_ids_are_refused_by_name(call):
    parts = [np.arange(10), np.arange(10, 30)]
    with pytest.raises(ValueError, match=r"^labels.* allowed: a non-empty 1-D integer array of class ids"):
        call(parts)


@pytest.mark.parametrize("kind", ["iid", "dirichlet", "shards", "classes", "one_class", "mixed", "power_law"])
def test_num_classes_below_a_label_is_refused_not_split_without_that_class(kind):
    """Dirichlet with ``num_classes=9`` on ten classes left class 9's samples out of every client."""
    for num_classes in (9, 0, 2.5):
        refused = rf"^num_classes={num_classes} is out of range; allowed: an integer >= 10, one past"
        with pytest.raises(ValueError, match=refused):
            partition(LABELS, 5, partition_scheme(kind), np.random.default_rng(0), num_classes)
    clients = 10 if kind == "one_class" else 5  # one_class: a multiple of the classes
    parts = partition(LABELS, clients, partition_scheme(kind), np.random.default_rng(0), 10)
    assert len(np.unique(np.concatenate(parts))) == sum(len(p) for p in parts)


@pytest.mark.parametrize("call", [
    lambda rng: dirichlet_split(LABELS, 5, Dirichlet(alpha=0.5), rng, 9),
    lambda rng: classes_split(LABELS, 5, 2, 20, rng, num_classes=9),
    lambda rng: one_class_split(LABELS, 9, rng, 9),
    lambda rng: matched_test_split([np.arange(300), np.arange(300, 600)], LABELS, LABELS, rng, 9),
    lambda rng: PartitionReport.of([np.arange(300), np.arange(300, 600)], LABELS, 9),  # was a histogram of 10
])
def test_the_split_helpers_refuse_a_num_classes_below_a_label_too(call):
    with pytest.raises(ValueError, match=r"^num_classes=9 is out of range; allowed: an integer >= 10"):
        call(np.random.default_rng(0))


def test_partition_report_table(digits, digits_parts):
    report = PartitionReport.of(digits_parts, digits.y_train.numpy(), 10)
    assert report.sizes.sum() == len(digits.y_train)
    text = report.table()
    assert text.splitlines()[0].split()[:3] == ["client", "size", "H(bits)"]
    assert len(text.splitlines()) == 12
