"""Sessions' KV state: resident llama.cpp sequences, and evicted ones in a host-memory LRU.

Each session the engine knows is a :class:`SessionState`: the ids whose keys
and values it holds, and where they are -- in a sequence of the shared llama
context (``seq``), or saved with ``llama_state_seq_get_data`` into host memory
(``blob``). :class:`SequencePool` hands sequence ids to sessions, evicting the
least recently used idle session to the host cache when none is free;
:class:`HostCache` bounds the saved states in bytes, dropping the oldest
beyond the budget (their next turn rebuilds from ``request.prompt()``).
Everything here runs on the scheduler thread, which owns the context.
"""
from __future__ import annotations

import ctypes
import time
from collections import OrderedDict

import attrs

from ._lib import lib


@attrs.define(eq=False)
class SessionState:
    session_id: str
    ids: list[int] = attrs.field(factory=list)  # what the sequence (or the blob) holds, position by position
    unfed: list[int] = attrs.field(factory=list)  # sampled last but never fed: the session holds it, the cache not
    seq: int | None = None  # resident: the llama sequence id
    blob: bytearray | None = None  # evicted: the saved sequence state
    job: object | None = None  # the generation running on it
    drop_after: bool = False  # drop() arrived while a generation ran
    tick: int = 0  # last use, for the LRU

    @property
    def busy(self) -> bool:
        return self.job is not None


class HostCache:
    """Saved sequence states by session, least recently saved first, bounded by ``budget`` bytes."""

    def __init__(self, budget: int):
        self.budget = budget
        self.nbytes = 0
        self._states: OrderedDict[str, SessionState] = OrderedDict()
        self.saved = self.dropped = 0

    def put(self, state: SessionState) -> list[SessionState]:
        """Keep ``state`` (its ``blob`` set); returns the states dropped to stay within budget (maybe itself)."""
        if len(state.blob) > self.budget:  # larger than the whole budget: drop it rather than everything else
            state.blob = None
            state.ids, state.unfed = [], []
            self.dropped += 1
            return [state]
        self._states[state.session_id] = state
        self.nbytes += len(state.blob)
        self.saved += 1
        gone = []
        while self.nbytes > self.budget and self._states:
            _, old = self._states.popitem(last=False)
            self.nbytes -= len(old.blob)
            old.blob = None
            old.ids, old.unfed = [], []
            gone.append(old)
            self.dropped += 1
        return gone

    def take(self, state: SessionState) -> bytearray | None:
        """Remove and return the saved state of ``state`` (None if it has none)."""
        if self._states.pop(state.session_id, None) is None:
            return None
        blob, state.blob = state.blob, None
        self.nbytes -= len(blob)
        return blob

    def __len__(self) -> int:
        return len(self._states)


class SequencePool:
    """The context's sequence ids, lent to sessions; state moves between the context and the host cache."""

    def __init__(self, ctx, n_seq: int, host: HostCache):
        self._L = lib()
        self.ctx = ctx
        self.mem = self._L.llama_get_memory(ctx)
        self.can_shift = bool(self._L.llama_memory_can_shift(self.mem))
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
        """The least recently used idle resident session."""
        idle = [s for s in self.owner if s is not None and not s.busy]
        return min(idle, key=lambda s: s.tick) if idle else None

    def attach(self, state: SessionState, seq: int) -> bool:
        """Make ``state`` resident in ``seq``, restoring its saved state; False if it had to start empty."""
        self.owner[seq] = state
        state.seq = seq
        blob = self.host.take(state)
        if blob is None:
            return not state.ids
        started = time.perf_counter()
        buf = (ctypes.c_uint8 * len(blob)).from_buffer(blob)
        ok = self._L.llama_state_seq_set_data(self.ctx, buf, len(blob), seq) != 0
        del buf  # a view of blob
        self.restore_seconds += time.perf_counter() - started
        if not ok:
            self.clear(state)
            return False
        self.restores += 1
        return True

    def evict(self, state: SessionState) -> list[SessionState]:
        """Save ``state``'s sequence to the host cache and free it; returns the states dropped for room."""
        seq, started = state.seq, time.perf_counter()
        size = self._L.llama_state_seq_get_size(self.ctx, seq)
        blob = bytearray(size)
        n = self._L.llama_state_seq_get_data(self.ctx, (ctypes.c_uint8 * size).from_buffer(blob), size, seq)
        self._L.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.evict_seconds += time.perf_counter() - started
        self.owner[seq] = None
        state.seq = None
        self.evictions += 1
        if n == 0 or not state.ids:
            state.ids, state.unfed = [], []
            return [state]
        del blob[n:]
        state.blob = blob
        return self.host.put(state)

    def release(self, state: SessionState) -> None:
        """Forget ``state`` wherever it is."""
        if state.seq is not None:
            self._L.llama_memory_seq_rm(self.mem, state.seq, -1, -1)
            self.owner[state.seq] = None
            state.seq = None
        self.host.take(state)
        state.ids, state.unfed = [], []

    # ------------------------------------------------------------------ editing a resident sequence
    def clear(self, state: SessionState) -> None:
        self._L.llama_memory_seq_rm(self.mem, state.seq, -1, -1)
        state.ids, state.unfed = [], []

    def truncate(self, state: SessionState, keep: int) -> None:
        """Keep the first ``keep`` ids."""
        if keep >= len(state.ids):
            return
        if keep <= 0 or not self._L.llama_memory_seq_rm(self.mem, state.seq, keep, -1):
            self.clear(state)  # a memory that cannot cut a sequence (recurrent models): start over
            return
        del state.ids[keep:]
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
