"""The host tier: sequence states saved in this process's memory, within a budget that counts every byte they take.

A state saved with ``llama_state_seq_get_data`` is a buffer of 23 KB a token on the bundled SmolLM2 (a
1,300-id conversation: 30 MB). :class:`HostCache` holds the evicted sessions' buffers and one *spare*: the
buffer of a state restored into a sequence (or used for a copy between sequences), which the next
eviction or copy writes into instead of allocating and faulting in a new one (a fresh buffer's page
faults were most of a copy's time: 30 ms of 36 for 43 MB). Its budget counts what each buffer allocated
(``sys.getsizeof``: a reused buffer may be larger than the state it holds), the spare included, so the
tier never holds more than ``budget`` bytes however its memory is split (docs/backends.md, "Where a
session's KV lives"). Everything here runs on the engine's scheduler thread.
"""
from __future__ import annotations

import ctypes
import sys
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sequences import SessionState

_resize = ctypes.pythonapi.PyByteArray_Resize  # a bytearray's length within its allocation: no copy, no zeroing
_resize.argtypes = (ctypes.py_object, ctypes.c_ssize_t)
_resize.restype = ctypes.c_int


_EMPTY = sys.getsizeof(bytearray())  # a bytearray's own header


def allocated(blob: bytearray) -> int:
    """The bytes ``blob`` holds in memory (its allocation, which may be more than its length)."""
    return sys.getsizeof(blob)


def capacity(blob: bytearray) -> int:
    """The longest ``blob`` can be made without a new allocation (one byte of it ends the data)."""
    return sys.getsizeof(blob) - _EMPTY - 1


class HostCache:
    """Saved sequence states and one spare buffer, within ``budget`` bytes; states are pushed out by
    :meth:`SessionState.eviction_rank` (the spare goes before any state)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.nbytes = 0  # allocated by the states' buffers and the spare
        self._states: OrderedDict[SessionState, None] = OrderedDict()
        self._spare: bytearray | None = None
        self.saved = self.dropped = 0
        self.buffers_reused = self.buffers_new = 0

    # ------------------------------------------------------------------ buffers
    def buffer(self, size: int) -> bytearray:
        """A buffer of ``size`` bytes to save a state into (its content undefined): the spare when its
        allocation holds ``size``, else a new one (and the spare, too small, is freed)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            self.nbytes -= allocated(spare)
            if capacity(spare) >= size:
                _resize(spare, size)
                self.buffers_reused += 1
                return spare
        del spare  # before the new one: never both in memory
        self.buffers_new += 1
        return bytearray(size)

    def recycle(self, blob: bytearray) -> None:
        """A buffer whose state is now in a sequence (restored, or copied from): kept as the spare if it
        is larger than the spare and fits the budget, else freed."""
        spare = self._spare
        if spare is not None and allocated(spare) >= allocated(blob):
            return
        if self.nbytes - (0 if spare is None else allocated(spare)) + allocated(blob) > self.budget:
            return
        self._drop_spare()
        self._spare = blob
        self.nbytes += allocated(blob)

    def _drop_spare(self) -> None:
        if self._spare is not None:
            self.nbytes -= allocated(self._spare)
            self._spare = None

    @property
    def spare_bytes(self) -> int:
        return 0 if self._spare is None else allocated(self._spare)

    # ------------------------------------------------------------------ states
    def put(self, state: SessionState) -> list[SessionState]:
        """Keep ``state`` (its ``blob`` set); returns the states pushed out to stay within budget (maybe
        itself), their blobs and ids still set: the caller moves them to disk or forgets them."""
        blob = state.blob
        assert blob is not None, "put with its blob set"
        size = allocated(blob)
        if size > self.budget:  # larger than the whole budget: out at once rather than everything else
            self.dropped += 1
            return [state]
        self._states[state] = None
        self.nbytes += size
        self.saved += 1
        if self.nbytes > self.budget:
            self._drop_spare()
        gone = []
        now = time.monotonic()
        while self.nbytes > self.budget and self._states:
            old = min(self._states, key=lambda s: s.eviction_rank(now))
            del self._states[old]
            assert old.blob is not None, "every state kept here has its blob"
            self.nbytes -= allocated(old.blob)
            gone.append(old)
            self.dropped += 1
        return gone

    def take(self, state: SessionState) -> bytearray | None:
        """Remove and return the saved state of ``state`` (None if it has none)."""
        if state not in self._states:
            return None
        del self._states[state]
        blob, state.blob = state.blob, None
        assert blob is not None, "every state kept here has its blob"
        self.nbytes -= allocated(blob)
        return blob

    def states(self) -> list[SessionState]:
        return list(self._states)

    def __len__(self) -> int:
        return len(self._states)
