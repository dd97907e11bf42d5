"""Sessions' KV state: resident llama.cpp sequences, and evicted ones in a host-memory LRU.

Each session the engine knows is a :class:`SessionState`: the ids whose keys
and values it holds, and where they are -- in a sequence of the shared llama
context (``seq``), or saved with ``llama_state_seq_get_data`` into host memory
(``saved``; what it shares with other saved states is held once: :mod:`.hostcache`).
:class:`SequencePool` hands sequence ids to sessions, evicting the
least recently used idle session to the host cache when none is free;
:class:`.hostcache.HostCache` bounds the saved states in bytes, dropping the oldest
beyond the budget (their next turn rebuilds from ``request.prompt()``).
Everything here runs on the scheduler thread, which owns the context.
"""
from __future__ import annotations

import ctypes
import time
from typing import TYPE_CHECKING

import attrs

from . import kvsplice
from ._lib import lib, prefix_copier
from .hostcache import HostCache, Saved

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_context_p, llama_memory_t


@attrs.define(eq=False)
class SessionState:
    """A session's KV, or -- once the session is dropped (``orphan``) -- a cached prefix nobody owns."""

    session_id: str
    ids: list[int] = attrs.field(factory=list)  # what the sequence (or the saved state) holds, position by position
    unfed: list[int] = attrs.field(factory=list)  # sampled last but never fed: the session holds it, the cache not
    seq: int | None = None  # resident: the llama sequence id
    saved: Saved | None = None  # evicted: the saved sequence state
    job: object | None = None  # the generation running on it
    drop_after: bool = False  # drop() arrived while a generation ran
    orphan: bool = False  # its session was dropped: kept only as a prefix others may start from
    decoded_at: int | None = None  # the first id fed alone (a sampled token): its KV is not a prefill's
    shifted_at: int | None = None  # a context shift rotated the keys from here on
    tick: int = 0  # last use, for the LRU
    expected_until: float = 0.0  # its answer called tools: the client comes back with the results before then
    version: int = 0  # bumped whenever ids are cut or replaced (the prefix index re-hashes them then)
    #: the session's drift rewind (start, count) applied when its answer was committed (:meth:`.steps.Steps.rewind`):
    #: ids from ``start`` hold the canonical encoding, and the next turn's discard of that range is done already
    rewound: tuple[int, int] | None = None

    @property
    def exact(self) -> int:
        """How many leading ids hold the keys and values a fresh prefill of them computes: what any
        prompt starting with them may reuse (a token decoded alone gets other values in the last bits,
        enough to flip a greedy choice; a shift rotates keys)."""
        return min([len(self.ids), *(at for at in (self.decoded_at, self.shifted_at) if at is not None)])

    @property
    def kept(self) -> int:
        """How many leading ids the session's own next turn keeps: all but the decoded ones, which it
        prefills again (so its cache, too, holds what a fresh prefill computes); a context shift is the
        session's own, accepted approximation (its overflow policy)."""
        return len(self.ids) if self.decoded_at is None else min(len(self.ids), self.decoded_at)

    def forget_tail(self, keep: int) -> None:
        """Bookkeeping for ids cut back to ``keep``."""
        del self.ids[keep:]
        if self.decoded_at is not None and self.decoded_at >= keep:
            self.decoded_at = None
        if self.shifted_at is not None and self.shifted_at >= keep:
            self.shifted_at = None
        if self.rewound is not None and self.rewound[0] > keep:
            self.rewound = None
        self.version += 1

    def reset(self) -> None:
        self.ids, self.unfed, self.decoded_at, self.shifted_at, self.rewound = [], [], None, None, None
        self.version += 1

    @property
    def resident_seq(self) -> int:
        """Its sequence id, where it is known to be resident (it owns a sequence of the pool)."""
        assert self.seq is not None, f"state {self.session_id!r} is not resident"
        return self.seq

    @property
    def busy(self) -> bool:
        return self.job is not None

    def eviction_rank(self, now: float) -> tuple[bool, bool, int]:
        """Lowest goes first: an orphan, then a session nobody waits for, the least recently used first;
        a session whose client is running the tools its answer called comes last (until it is overdue)."""
        return (not self.orphan, self.expected_until > now, self.tick)

    @property
    def tier(self) -> str | None:
        return "resident" if self.seq is not None else "host" if self.saved is not None else None


class SequencePool:
    """The context's sequence ids, lent to sessions; state moves between the context and the host cache."""

    def __init__(self, ctx: llama_context_p, n_seq: int, host: HostCache) -> None:
        self._L = lib()
        self.ctx = ctx
        self.mem: llama_memory_t = self._L.llama_get_memory(ctx)
        self.can_shift = bool(self._L.llama_memory_can_shift(self.mem))
        self._copy_prefix = prefix_copier(self._L)
        self.host = host
        self.owner: list[SessionState | None] = [None] * n_seq
        self.evictions = self.restores = 0
        self.evict_seconds = self.restore_seconds = 0.0  # time spent saving and restoring states

    def free_seq(self) -> int | None:
        """The lowest free sequence id (decoders with adjacent ids share one llama.cpp micro-batch)."""
        for seq, owner in enumerate(self.owner):
            if owner is None:
                return seq
        return None

    def victim(self) -> SessionState | None:
        """The resident state to evict, by :meth:`SessionState.eviction_rank` (a busy one never)."""
        idle = [s for s in self.owner if s is not None and not s.busy]
        now = time.monotonic()
        return min(idle, key=lambda s: s.eviction_rank(now)) if idle else None

    def attach(self, state: SessionState, seq: int) -> bool:
        """Make ``state`` resident in ``seq``, restoring its saved state; False if it had to start empty."""
        self.owner[seq] = state
        state.seq = seq
        blob = self.host.take(state)
        if blob is None:
            return not state.ids
        ids, unfed, decoded, shifted, rewound = state.ids, state.unfed, state.decoded_at, state.shifted_at, \
            state.rewound
        loaded = self.load(state, blob, len(ids))
        self.host.recycle(blob)  # in the sequence now: the next eviction writes into it
        if not loaded:
            return False
        state.ids, state.unfed, state.decoded_at, state.shifted_at, state.rewound = ids, unfed, decoded, shifted, \
            rewound
        return True

    def load(self, state: SessionState, blob: bytes | bytearray | memoryview, n_held: int) -> bool:
        """Replace what ``state``'s sequence holds with a saved state of ``n_held`` ids, checked: llama.cpp
        must accept it and then hold exactly positions ``0 .. n_held - 1``. False (the sequence empty) if
        not. The caller sets ``state.ids``."""
        L, seq, started = self._L, state.seq, time.perf_counter()
        L.llama_memory_seq_rm(self.mem, seq, -1, -1)
        state.reset()
        buf = _view(blob)
        ok = L.llama_state_seq_set_data(self.ctx, buf, len(blob), seq) != 0
        del buf  # a view of blob
        self.restore_seconds += time.perf_counter() - started
        if not ok or not self._holds(state, n_held):
            L.llama_memory_seq_rm(self.mem, seq, -1, -1)
            return False
        self.restores += 1
        return True

    def _holds(self, state: SessionState, n: int) -> bool:
        """Whether ``state``'s sequence holds positions ``0 .. n - 1`` and no other."""
        low: int = self._L.llama_memory_seq_pos_min(self.mem, state.seq)
        high: int = self._L.llama_memory_seq_pos_max(self.mem, state.seq)
        return low == 0 and high == n - 1

    def save(self, seq: int) -> bytearray | None:
        """A copy of what sequence ``seq`` holds (None: llama.cpp wrote nothing)."""
        started = time.perf_counter()
        size = self._L.llama_state_seq_get_size(self.ctx, seq)
        blob = self.host.buffer(size)
        n = self._L.llama_state_seq_get_data(self.ctx, (ctypes.c_uint8 * size).from_buffer(blob), size, seq)
        self.evict_seconds += time.perf_counter() - started
        if n == 0:
            self.host.recycle(blob)
            return None
        del blob[n:]
        return blob

    def copy(self, donor_seq: int, state: SessionState, n_held: int, n: int) -> int:
        """Make ``state``'s sequence hold the first ``n`` of the ``n_held`` ids sequence ``donor_seq`` holds;
        returns the ids it holds then, counted from position 0: ``n``, or ``n_held`` (the caller cuts it back),
        or 0 if it could not. A branch needs only the prefix: llama.cpp copies those cells between the two
        streams itself (scripts/kv-copy-prefix.patch: 1.3 ms for 645 ids of SmolLM2). Where it cannot (a
        build without the patch, an SWA cache, a pending shift) the whole state goes through host memory
        and is checked as :meth:`load` checks: the host tier's spare buffer (counted in its budget) or a
        fresh one, whose page faults were most of that path's time (30 ms of 36 for 1,869 ids, 43 MB).
        llama.cpp's own ``llama_memory_seq_cp`` between streams copies a whole stream, and only at the next
        ``llama_decode``: a state saved or restored before then would be read or overwritten first."""
        assert state.seq is not None, "a copy goes into a resident state"
        if self._copy_prefix is not None:
            self.clear(state)
            started = time.perf_counter()
            copied = self._copy_prefix(self.mem, donor_seq, state.seq, n)
            self.restore_seconds += time.perf_counter() - started
            if copied >= 0:
                if copied == n and self._holds(state, n):
                    self.restores += 1
                    return n
                self.clear(state)
                return 0
        size = self._L.llama_state_seq_get_size(self.ctx, donor_seq)
        buf = self.host.buffer(size)
        started = time.perf_counter()
        out = (ctypes.c_uint8 * size).from_buffer(buf)
        got = self._L.llama_state_seq_get_data(self.ctx, out, size, donor_seq)
        del out  # a view of the buffer
        self.evict_seconds += time.perf_counter() - started
        with memoryview(buf)[:got] as view:  # not cut to got: the buffer keeps its allocation for the next one
            copied = got > 0 and self.load(state, view, n_held)
        self.host.recycle(buf)
        return n_held if copied else 0

    def evict(self, state: SessionState) -> list[SessionState]:
        """Save ``state``'s sequence to the host cache and free it; returns the states pushed out of the
        host cache for room (their saved states and ids still set), maybe ``state`` itself."""
        seq = state.seq
        assert seq is not None, "only a resident state is evicted"
        blob = self.save(seq) if state.ids else None
        self._L.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.owner[seq] = None
        state.seq = None
        self.evictions += 1
        if blob is None:
            state.reset()
            return [state]
        state.saved = Saved(blob, kvsplice.layout(blob))
        return self.host.put(state)

    def move(self, donor: SessionState, state: SessionState) -> None:
        """Give ``donor``'s sequence and what it holds to ``state`` (whose own sequence is freed): no copy."""
        if state.seq is not None:
            self._L.llama_memory_seq_rm(self.mem, state.seq, -1, -1)
            self.owner[state.seq] = None
        assert donor.seq is not None, "a donor is resident"
        state.seq, donor.seq = donor.seq, None
        self.owner[state.seq] = state
        state.reset()
        state.ids, state.decoded_at, state.shifted_at = donor.ids, donor.decoded_at, donor.shifted_at
        donor.ids = []
        donor.reset()

    def release(self, state: SessionState) -> None:
        """Forget ``state`` wherever it is."""
        if state.seq is not None:
            self._L.llama_memory_seq_rm(self.mem, state.seq, -1, -1)
            self.owner[state.seq] = None
            state.seq = None
        self.host.take(state)
        state.reset()

    # ------------------------------------------------------------------ editing a resident sequence
    def clear(self, state: SessionState) -> None:
        self._L.llama_memory_seq_rm(self.mem, state.seq, -1, -1)
        state.reset()

    def truncate(self, state: SessionState, keep: int) -> None:
        """Keep the first ``keep`` ids."""
        if keep >= len(state.ids):
            return
        if keep <= 0 or not self._L.llama_memory_seq_rm(self.mem, state.seq, keep, -1):
            self.clear(state)  # a memory that cannot cut a sequence (recurrent models): start over
            return
        state.forget_tail(keep)
        state.unfed = []

    def discard(self, state: SessionState, start: int, count: int) -> None:
        """Remove ids ``[start, start + count)`` and move the rest down (llama.cpp's context shift).

        The keys after the range are rotated back by ``count`` positions (RoPE),
        which is cheap but not a fresh prefill: those tokens were computed while
        the removed ones were there. A range reaching the end drops the tail; a
        memory that cannot shift keeps ``[:start]`` and the turn prefills the rest.
        """
        n = len(state.ids)
        if start >= n or count <= 0:
            return
        if start + count >= n or not self.can_shift:
            self.truncate(state, start)
            return
        if not self._L.llama_memory_seq_rm(self.mem, state.seq, start, start + count):
            self.truncate(state, start)
            return
        self._L.llama_memory_seq_add(self.mem, state.seq, start + count, -1, -count)
        del state.ids[start:start + count]
        state.version += 1
        state.shifted_at = start if state.shifted_at is None else min(start, state.shifted_at)
        if state.decoded_at is not None and state.decoded_at > start:
            state.decoded_at = max(start, state.decoded_at - count)


def _view(blob: bytes | bytearray | memoryview) -> ctypes.Array[ctypes.c_uint8]:
    """``blob`` as llama.cpp reads it: the same memory where it may be written through, else a copy."""
    try:
        return (ctypes.c_uint8 * len(blob)).from_buffer(blob)
    except TypeError:  # read-only: bytes, or a view of them
        return (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
