"""Keep freed memory in the heap so large activations are not page-faulted at every step.

glibc serves blocks above its mmap threshold (at most 32 MB by default) with fresh ``mmap``
pages and returns them on free. A stacked batch of conv activations (10 clients x 32 samples of
32x28x28 is 32 MB) is then zero-filled by the kernel at every local step: measured here, that
alone made FedAdp's CNN round 1.4x slower. Raising the mmap and trim thresholds keeps those
blocks in the heap for reuse, at the cost of the process holding its peak memory.

:func:`keep_freed_memory` is called by :class:`~fl_gym.federation.Federation` when it trains on
the CPU (``FederationConfig.keep_freed_memory``) and by the benchmark for both the batched engine
and the reference loop. It is a no-op outside glibc.
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_applied = False


def keep_freed_memory(threshold_bytes: int = 1 << 30) -> bool:
    """Serve blocks up to ``threshold_bytes`` from the heap and never trim it; True if applied."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, threshold_bytes) == 1
        ok = ok and libc.mallopt(_M_TRIM_THRESHOLD, min(2 * threshold_bytes, 2**31 - 1)) == 1
    except (OSError, AttributeError):
        return False
    _applied = ok
    return ok
