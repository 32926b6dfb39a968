"""Buffers reused round after round for the state that outlives a round.

A round's lasting results (a cohort's trained models, which the env may keep until its next
decision; the next global model; probe gradients) used to be new allocations each round, made
among the round's temporaries. Landing in the holes the temporaries had left, they split them,
and glibc's heap grew round after round while what was in use stayed flat: 64 copies of a
training env in one process peaked up to a fifth higher after 200 steps than after three
(``fl-gym bench --sections memory``, docs/performance.md). Taken from a
:class:`BufferPool`, they come back to the addresses earlier rounds' had, and the temporaries
find their own holes whole. A batched vector env gives its copies one pool, so what it keeps is
what the copies hold at once, not each copy's most.

A buffer is handed out again only once nothing but the pool holds its storage: whoever keeps a
result (a round record, a user's reference, a view, a NumPy array of it) keeps it intact.
"""

from __future__ import annotations

from collections import deque

import torch
from torch import Tensor

# torch's count of the references to a storage (what its CUDA-graph trees read to see that an output
# is dead); without it a pool never reuses a buffer and behaves like plain allocation
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _only_pooled(buffer: Tensor) -> bool:
    """Whether nothing but ``buffer`` refers to its storage (the handle this check makes counts one)."""
    return _use_count is not None and _use_count(buffer.untyped_storage()._cdata) == 2


class BufferPool:
    """Flat buffers by size, each handed out again once nothing else holds it.

    Args:
        sizes: sizes (with dtype and device) kept, the most recently asked for; asking for
            another forgets the least recent size's buffers (held ones live on with their
            holders), so sizes that changed (a cohort whose client count varies) are not kept.
    """

    def __init__(self, sizes: int = 8) -> None:
        self.sizes = sizes
        self._buffers: dict[tuple, deque[Tensor]] = {}  # insertion order = least recently asked for first

    def take(self, numel: int, like: Tensor) -> Tensor:
        """A ``(numel,)`` uninitialised buffer of ``like``'s dtype and device: a free one, or a new one kept.

        What is handed out is a view, never the pool's own tensor, so holding it counts as holding the buffer.
        """
        key = (numel, like.dtype, like.device)
        kept = self._buffers.pop(key, deque())
        self._buffers[key] = kept  # now the most recent
        if len(self._buffers) > self.sizes:
            del self._buffers[next(iter(self._buffers))]
        buffer = self._free(kept)
        kept.append(like.new_empty(numel) if buffer is None else buffer)
        return kept[-1].view(-1)

    @staticmethod
    def _free(kept: deque[Tensor]) -> Tensor | None:
        """A free buffer taken from ``kept`` (None if every one is held).

        The least recently handed out first, the likeliest to be free; a held one met on the way
        goes to the back. A vector env's copies step in turns, and each holds a buffer until its
        next step, so the front fills with the other turns' buffers: without the rotation every
        take would pass them again, a search as long as the copies.
        """
        for _ in range(len(kept)):
            if _only_pooled(kept[0]):
                return kept.popleft()
            kept.rotate(-1)
        return None

    def keep(self, value: Tensor) -> Tensor:
        """``value`` copied into a pooled buffer of its shape: a fresh result made lasting."""
        return self.take(value.numel(), value).view(value.shape).copy_(value)

    def __len__(self) -> int:
        """Buffers kept, held or free."""
        return sum(len(kept) for kept in self._buffers.values())

    def free(self) -> list[Tensor]:
        """The buffers nothing else holds (what the pool keeps beyond what is in use)."""
        return [b for kept in self._buffers.values() for b in kept if _only_pooled(b)]
