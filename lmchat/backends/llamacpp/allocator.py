"""glibc's malloc told to give large blocks back to the system when they are freed.

A KV state is one allocation of tens of MB (23 KB a token on the bundled SmolLM2). glibc serves a block that
large with its own ``mmap`` and unmaps it when freed, but each such free raises the size from which it maps
(its dynamic mmap threshold, up to 32 MiB) to that block's: from then on blocks below it come from a
thread's heap, and a freed one stays there, mapped and counted in the RSS, for as long as something lives
above it. Measured on ``lmchat serve`` (8 sessions of ~1,300 ids over 4 sequences): a heap of the engine's
thread held 29.5 MiB, 28.7 of them free. Fixing the threshold (which turns the dynamic one off) keeps every
block from :data:`THRESHOLD` up mapped on its own, and returned when freed (docs/backends.md, "Memory").
"""
from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("lmchat.llamacpp")

#: blocks from this size up are mapped on their own and returned when freed: KV states, not the small blocks
#: Python and llama.cpp allocate at every step (which a map and an unmap each would slow down)
THRESHOLD = 4 * 2**20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def user_set() -> bool:
    """Whether the environment sets the threshold (glibc reads it when the process starts): theirs wins."""
    return "MALLOC_MMAP_THRESHOLD_" in os.environ or "malloc.mmap_threshold" in os.environ.get("GLIBC_TUNABLES", "")


def map_large_blocks() -> bool:
    """Fix glibc's mmap threshold at :data:`THRESHOLD`, unless the environment sets one; False where nothing
    changed (not Linux, a C library without ``mallopt``, the user's setting)."""
    if os.uname().sysname != "Linux" or user_set():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, THRESHOLD) != 1:  # musl's is a stub that answers 0
        log.debug("malloc's mmap threshold left as it is")
        return False
    return True
