"""The host tier: sequence states saved in this process's memory, within a budget that counts every byte they take.

A state saved with ``llama_state_seq_get_data`` is a buffer of 23 KB a token on the bundled SmolLM2 (a
1,300-id conversation: 30 MB). :class:`HostCache` holds the evicted sessions' buffers and one *spare*: the
buffer of a state restored into a sequence (or used for a copy between sequences), which the next
eviction or copy writes into instead of allocating and faulting in a new one (a fresh buffer's page
faults were most of a copy's time: 30 ms of 36 for 43 MB). Its budget counts what each buffer allocated
(``sys.getsizeof``: a reused buffer may be larger than the state it holds), the spare included, so the
tier never holds more than ``budget`` bytes however its memory is split (docs/backends.md, "Where a
session's KV lives").

Conversations that open with one long system prompt hold the same keys and values for it: eight sessions
of a 1,000-token prompt kept eight copies of its 22 MiB. A state saved here is cut (:mod:`.kvsplice`) where
it stops agreeing with another state held here, when they agree on :data:`MIN_SHARED` ids or more and on
every byte of those ids' keys and values: the common part is held once, as a :class:`Prefix`, and each state
keeps only its cells after it (:class:`Saved`). A restore joins them back into the state that was saved, byte
for byte. Bytes are compared, not assumed: two prefills of one prompt agree bit for bit on this build
(docs/backends.md, "Which steps are exact"), but a state whose prefix was decoded, shifted or computed by
other kernels is simply kept whole. Everything here runs on the engine's scheduler thread.
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

from . import kvsplice
from .prefix import common_prefix

if TYPE_CHECKING:
    from .sequences import SessionState

#: the fewest ids two saved states must share for the host tier to hold them once (a cut and a join copy the
#: state: below this the copies cost more than the memory is worth)
MIN_SHARED = 256

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


@attrs.define(eq=False)
class Prefix:
    """The keys and values of ``ids``, the first ids of ``users`` saved states, held once."""

    ids: list[int]
    blob: bytearray
    layout: kvsplice.Layout
    users: int = 0


@attrs.define(eq=False)
class Saved:
    """A state in host memory: ``own`` holds all of it (``prefix`` None), or its cells after ``prefix``.
    ``layout``: where its parts are (None: a layout :mod:`.kvsplice` does not know: never cut)."""

    own: bytearray
    layout: kvsplice.Layout | None
    prefix: Prefix | None = None

    @property
    def size(self) -> int:
        """The bytes of the whole state."""
        if self.prefix is None or self.layout is None:
            return len(self.own)
        return kvsplice.join_size(self.prefix.layout, self.layout)

    def whole(self, copy: bool = False) -> bytearray:
        """The whole state: ``own`` when it is whole (a copy of it if ``copy``: a buffer nothing else writes
        to, for a KV file written in the background), else a new buffer it is joined into."""
        if self.prefix is None:
            return bytearray(self.own) if copy else self.own
        out = bytearray(self.size)
        self.write_whole(out)
        return out

    def write_whole(self, out: bytearray) -> None:
        """The whole state into ``out`` (:attr:`size` bytes): the prefix's cells, then its own."""
        assert self.prefix is not None and self.layout is not None, "only a cut state is joined"
        kvsplice.join(self.prefix.blob, self.prefix.layout, self.own, self.layout, out)


class HostCache:
    """Saved sequence states and one spare buffer, within ``budget`` bytes; states are pushed out by
    :meth:`SessionState.eviction_rank` (the spare goes before any state)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.nbytes = 0  # allocated by the states' buffers and the spare
        self._states: OrderedDict[SessionState, None] = OrderedDict()
        self._spare: bytearray | None = None
        self._prefixes: list[Prefix] = []
        self.saved = self.dropped = 0
        self.buffers_reused = self.buffers_new = 0
        self.shared_ids = 0  # ids a put state found held already (its own copy of them freed)

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
        """Keep ``state`` (its whole state ``saved``), held once with what it shares with another; returns the
        states pushed out to stay within budget (maybe itself), their ``saved`` and ids still set: the caller
        moves them to disk or forgets them."""
        saved = state.saved
        assert saved is not None and saved.prefix is None, "put with its whole state saved"
        if allocated(saved.own) > self.budget:  # larger than the whole budget: out at once rather than everything else
            self.dropped += 1
            return [state]
        self._states[state] = None
        self.nbytes += allocated(saved.own)
        self.saved += 1
        self._share(state)
        if self.nbytes > self.budget:
            self._drop_spare()
        gone = []
        now = time.monotonic()
        while self.nbytes > self.budget and self._states:
            old = min(self._states, key=lambda s: s.eviction_rank(now))
            self._remove(old)
            gone.append(old)
            self.dropped += 1
        return gone

    def take(self, state: SessionState) -> bytearray | None:
        """Remove and return the whole saved state of ``state`` (None if it has none): joined into the spare, or
        a new buffer, where it was held cut."""
        if state not in self._states:
            return None
        self._remove(state)
        saved, state.saved = state.saved, None
        assert saved is not None, "every state kept here is saved"
        return saved.own if saved.prefix is None else self._joined(saved)

    @contextlib.contextmanager
    def viewed(self, saved: Saved) -> Iterator[memoryview]:
        """The whole of a saved state while the ``with`` lasts, to copy into a sequence: its own buffer, or the
        spare it is joined into (the spare again afterwards)."""
        if saved.prefix is None:
            with memoryview(saved.own) as view:
                yield view
            return
        whole = self._joined(saved)
        try:
            with memoryview(whole) as view:
                yield view
        finally:
            self.recycle(whole)

    def _joined(self, saved: Saved) -> bytearray:
        """A cut state joined into the spare (or a new buffer), which the caller gives back with :meth:`recycle`."""
        whole = self.buffer(saved.size)
        saved.write_whole(whole)
        return whole

    def states(self) -> list[SessionState]:
        return list(self._states)

    @property
    def shared(self) -> list[Prefix]:
        """The prefixes held once for several states."""
        return list(self._prefixes)

    def __len__(self) -> int:
        return len(self._states)

    def _remove(self, state: SessionState) -> None:
        del self._states[state]
        saved = state.saved
        assert saved is not None, "every state kept here is saved"
        self.nbytes -= allocated(saved.own)
        prefix = saved.prefix
        if prefix is not None:
            prefix.users -= 1
            if prefix.users == 0:  # the saved state keeps it until written to disk or dropped: no longer counted
                self._prefixes.remove(prefix)
                self.nbytes -= allocated(prefix.blob)

    # ------------------------------------------------------------------ sharing
    def _share(self, state: SessionState) -> None:
        """Hold what ``state`` shares with the states here once: behind a prefix held already, or by cutting it
        and the whole state it agrees with longest (see the module docstring)."""
        saved = state.saved
        assert saved is not None, "a state being put is saved"
        lay = saved.layout
        if lay is None or lay.n != len(state.ids) or lay.n <= MIN_SHARED:
            return
        ids = state.ids
        for prefix in sorted(self._prefixes, key=lambda p: -len(p.ids)):
            n = len(prefix.ids)
            if n < lay.n and ids[:n] == prefix.ids \
                    and kvsplice.same_values(prefix.blob, prefix.layout, saved.own, lay, n):
                self._cut(state, prefix)
                return
        other, n = self._agreeing(state)
        if other is not None:
            prefix = self._prefix_of(state, n)
            self._cut(other, prefix)
            self._cut(state, prefix)

    def _agreeing(self, state: SessionState) -> tuple[SessionState | None, int]:
        """The whole state here agreeing longest with ``state`` (ids, then bytes), and on how many ids."""
        saved = state.saved
        assert saved is not None and saved.layout is not None, "only a state with a known layout is cut"
        candidates = []
        for other in self._states:
            held = other.saved
            if other is state or held is None or held.prefix is not None or held.layout is None \
                    or held.layout.n != len(other.ids):
                continue
            n = common_prefix(other.ids, state.ids, 0, min(len(other.ids), len(state.ids)) - 1)
            if n >= MIN_SHARED:
                candidates.append((n, other))
        for n, other in sorted(candidates, key=lambda c: -c[0]):  # the bytes of the longest first: one compare, usually
            held = other.saved
            assert held is not None and held.layout is not None, "a candidate is whole and laid out"
            if kvsplice.same_values(held.own, held.layout, saved.own, saved.layout, n):
                return other, n
        return None, 0

    def _prefix_of(self, state: SessionState, n: int) -> Prefix:
        saved = state.saved
        assert saved is not None and saved.layout is not None, "only a state with a known layout is cut"
        blob = bytearray(kvsplice.cut_size(saved.layout, 0, n))
        prefix = Prefix(state.ids[:n], blob, kvsplice.cut(saved.own, saved.layout, 0, n, blob))
        self._prefixes.append(prefix)
        self.nbytes += allocated(blob)
        return prefix

    def _cut(self, state: SessionState, prefix: Prefix) -> None:
        """Keep only ``state``'s cells after ``prefix``; its whole buffer becomes the spare (or is freed)."""
        saved = state.saved
        assert saved is not None and saved.layout is not None and saved.prefix is None, "a whole state is cut"
        n, end = len(prefix.ids), saved.layout.n
        tail = bytearray(kvsplice.cut_size(saved.layout, n, end))
        state.saved = Saved(tail, kvsplice.cut(saved.own, saved.layout, n, end, tail), prefix)
        prefix.users += 1
        self.nbytes += allocated(tail) - allocated(saved.own)
        self.shared_ids += n
        self.recycle(saved.own)
