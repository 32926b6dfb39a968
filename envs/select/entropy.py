"""FedEntropy's maximum entropy judgement (Ling et al., Algorithm 1).

Pure functions of soft labels and data sizes, in float64 and natural log; the entropy base does
not change any verdict. ``mix(B)`` is the size-weighted mixture of the soft labels of ``B``.
"""

from __future__ import annotations

import itertools

import numpy as np

from fl_gym.validation import UserError

TOL = 1e-12


def entropy(q: np.ndarray) -> float:
    """``-sum q log q`` in nats, with ``0 log 0 = 0``."""
    q = np.asarray(q, np.float64)
    nz = q[q > 0]
    return float(-(nz * np.log(nz)).sum())


def mixture(soft_labels: np.ndarray, sizes: np.ndarray,
            members: np.ndarray | list[int] | None = None) -> np.ndarray:
    """``sum_i l_i p_i / sum_i l_i`` over ``members`` (default: every row)."""
    p, n = np.asarray(soft_labels, np.float64), np.asarray(sizes, np.float64)
    if members is not None:
        p, n = p[members], n[members]
    return n @ p / n.sum()


def judge(soft_labels: np.ndarray, sizes: np.ndarray) -> tuple[list[int], list[int]]:
    """Algorithm 1: steepest-ascent greedy removal while a single removal raises the mixture's entropy.

    Rows are candidates in ascending id order (which fixes tie-breaking: the first best removal
    wins); a lone candidate is never removed.

    Returns:
        ``(kept, removed)``: row indices kept, and row indices removed in removal order.
    """
    kept, removed = list(range(len(soft_labels))), []
    while len(kept) > 1:
        best, victim = entropy(mixture(soft_labels, sizes, kept)), None
        for k in kept:
            h = entropy(mixture(soft_labels, sizes, [i for i in kept if i != k]))
            if h > best + TOL:
                best, victim = h, k
        if victim is None:
            break
        kept.remove(victim)
        removed.append(victim)
    return kept, removed


def leave_one_out_gain(soft_labels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``H(mix(S - {k})) - H(mix(S))`` per row (0 for a lone candidate).

    ``(m, c)`` soft labels and ``(m,)`` sizes, or any leading dimensions before them (many
    copies' candidates at once); a row of size 0 is absent: in no mixture, with gain 0. Every
    leave-one-out mixture at once: row ``k`` of ``W p / W 1`` with ``W`` the sizes less the
    diagonal, so an observation costs a few array calls whatever the candidates.
    """
    p, n = np.asarray(soft_labels, np.float64), np.asarray(sizes, np.float64)
    present = n > 0
    others = np.where(np.eye(n.shape[-1], dtype=bool), 0.0, n[..., None, :])
    left = _entropies(_normalised(others @ p, others.sum(axis=-1, keepdims=True)))
    whole = _entropies(_normalised((n[..., None, :] @ p)[..., 0, :], n.sum(axis=-1, keepdims=True)))
    return np.where(present & (present.sum(axis=-1, keepdims=True) > 1), left - whole[..., None], 0.0)


def _normalised(weighted: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``weighted / total``, 0 where the total is (a mixture of nothing)."""
    return np.divide(weighted, total, out=np.zeros(weighted.shape), where=total > 0)


def _entropies(q: np.ndarray) -> np.ndarray:
    """:func:`entropy` of each row of ``q`` (the last axis)."""
    logs = np.log(q, out=np.zeros_like(q), where=q > 0)  # 0 log 0 = 0
    return -(q * logs).sum(axis=-1)


def exhaustive_max_entropy(soft_labels: np.ndarray, sizes: np.ndarray) -> list[int]:
    """The non-empty subset of rows whose mixture has the largest entropy (``m <= 12``).

    Ties go to the smallest subset, then the lowest ids. Not FedEntropy: our check shows
    it can keep a single row where the greedy judgement keeps three.
    """
    m = len(soft_labels)
    if m > 12:
        raise UserError(f"exhaustive_max_entropy: expected at most 12 candidates, got {m}")
    best, chosen = -np.inf, [0]
    for r in range(1, m + 1):
        for subset in itertools.combinations(range(m), r):
            h = entropy(mixture(soft_labels, sizes, list(subset)))
            if h > best + TOL:
                best, chosen = h, list(subset)
    return chosen
