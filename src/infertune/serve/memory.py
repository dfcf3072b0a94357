"""Keep a long-running CPU server's memory bounded.

Each new input shape makes oneDNN build and cache kernels (its primitive cache holds 1024 by default), and
glibc's malloc raises its mmap threshold as large blocks are freed, so big activation buffers end up in
heap arenas it cannot return. Together, a server that sees many (batch, length) shapes grows without
visible bound; capping the primitive cache at 256 and fixing a 1 MiB mmap threshold together stop the growth
(MiniLM bf16 on 2 cores, 300 random shapes: docs/serve.md, memory). The engine also pads lengths
to a multiple of 8, which cuts the number of shapes eightfold.

Both settings are defaults only: an environment that sets ONEDNN_PRIMITIVE_CACHE_CAPACITY or
MALLOC_MMAP_THRESHOLD_ itself is left alone. Call before torch is imported (oneDNN reads its variable once).
"""

from __future__ import annotations

import ctypes
import os
import sys

PRIMITIVE_CACHE = 256
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def bound_cpu_memory() -> list[str]:
    """Apply the defaults above to this process (and, through the environment, its children).
    Returns what was set, for the startup log."""
    done = []
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ:
        os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(PRIMITIVE_CACHE)
        done.append(f"oneDNN primitive cache {PRIMITIVE_CACHE}")
    if sys.platform.startswith("linux") and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        try:
            if ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1:
                done.append(f"malloc mmap threshold {MMAP_THRESHOLD >> 20} MiB")
        except OSError:  # not glibc (musl, ...): nothing to tune
            pass
    return done
