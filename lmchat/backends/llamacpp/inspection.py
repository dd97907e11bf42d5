"""What the :class:`.engine.Engine` tells about itself: where a session's KV is, the ids it holds, its
invariants checked against llama.cpp, every tier's counts. Scheduler thread only (callers go through
``Engine.call``), which owns the context."""
from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hostcache import HostCache
    from .probe import StepProbe
    from .reuse import PrefixReuse
    from .sequences import SequencePool, SessionState
    from .steps import Steps


class Inspection:
    """The :class:`.engine.Engine`'s read-only views of its parts: ``sessions`` (by session id) and ``served``
    (prompt tokens by where they came from) are the engine's own."""

    def __init__(self, L: ModuleType, pool: SequencePool, host: HostCache, sessions: dict[str, SessionState],
                 served: Counter[str], steps: Steps, prefix: PrefixReuse, step_probe: StepProbe,
                 flash_attn: bool) -> None:
        self._L, self.pool, self.host, self.sessions, self.served = L, pool, host, sessions, served
        self.steps, self.prefix, self.step_probe, self.flash_attn = steps, prefix, step_probe, flash_attn

    def where(self, session_id: str) -> str | None:
        """'resident', 'host' or None (unknown or dropped)."""
        state = self.sessions.get(session_id)
        if state is None:
            return None
        return "resident" if state.seq is not None else "host" if state.saved is not None else None

    def held_ids(self, session_id: str) -> list[int] | None:
        state = self.sessions.get(session_id)
        return None if state is None or (state.seq is None and state.saved is None) else list(state.ids)

    def pos_max(self, session_id: str) -> int | None:
        """The last position the session's resident sequence holds (llama.cpp's count; -1 when empty)."""
        state = self.sessions.get(session_id)
        return None if state is None or state.seq is None else int(
            self._L.llama_memory_seq_pos_max(self.pool.mem, state.seq))

    def problems(self) -> list[str]:
        """The engine's invariants, checked against llama.cpp (empty when they hold): every resident
        sequence holds exactly the positions of its ids, every saved state's ids are whole, nothing is
        served past its exact ids, the host cache is within its budget."""
        out: list[str] = []
        mem = self.pool.mem
        for seq, state in enumerate(self.pool.owner):
            if state is None:
                if self._L.llama_memory_seq_pos_max(mem, seq) != -1:
                    out.append(f"free sequence {seq} holds positions")
                continue
            if state.seq != seq:
                out.append(f"sequence {seq}'s owner thinks it is in {state.seq}")
            top = int(self._L.llama_memory_seq_pos_max(mem, seq))
            if top != len(state.ids) - 1 or (state.ids and self._L.llama_memory_seq_pos_min(mem, seq) != 0):
                out.append(f"sequence {seq} holds positions up to {top} for {len(state.ids)} ids")
        for state in [*self.sessions.values(), *self.prefix.orphans]:
            if state.exact > len(state.ids) or (state.saved is not None and state.seq is not None):
                out.append(f"state {state.session_id} is inconsistent")
        if self.host.nbytes > self.host.budget:
            out.append(f"host cache {self.host.nbytes} bytes > budget {self.host.budget}")
        disk = self.prefix.disk
        if disk is not None and disk.nbytes > disk.budget:
            out.append(f"disk tier {disk.nbytes} bytes > budget {disk.budget}")
        return out

    def stats(self) -> dict[str, Any]:
        """Counts and sizes of every tier (the scheduler thread's view: call it there)."""
        resident = [s for s in self.pool.owner if s is not None]
        held = sum(len(s.ids) for s in resident)
        disk, steps = self.prefix.disk, self.steps
        out = {"resident": len(resident), "sequences": len(self.pool.owner), "resident_tokens": held,
               "resident_orphans": sum(s.orphan for s in resident),
               "host_sessions": len(self.host), "host_bytes": self.host.nbytes, "host_budget": self.host.budget,
               "host_tokens": sum(len(s.ids) for s in self.host.states()), "host_spare_bytes": self.host.spare_bytes,
               "host_prefixes": len(self.host.shared), "host_shared_ids": self.host.shared_ids,
               "host_buffers_reused": self.host.buffers_reused, "host_buffers_new": self.host.buffers_new,
               "orphans": len(self.prefix.orphans), "evictions": self.pool.evictions, "restores": self.pool.restores,
               "host_dropped": self.host.dropped, "evict_seconds": self.pool.evict_seconds,
               "restore_seconds": self.pool.restore_seconds, "indexed": len(self.prefix.index),
               "tokens_by_source": dict(self.served), "misses_by_reason": dict(self.prefix.misses),
               "settled_tokens": steps.settled, "settle_decoded": steps.rules.settle_decoded,
               "step_probe": self.step_probe.as_stats(), "flash_attn": self.flash_attn,
               "unsettled_tokens": sum(len(s.ids) - (len(s.ids) if s.decoded_at is None else s.decoded_at)
                                   + len(s.unfed[:-1]) for s in steps.unsettled_states())}
        if disk is not None:
            out.update(disk_dir=disk.where, disk_shared=disk.shared, disk_files=len(disk.entries),
                       disk_bytes=disk.nbytes,
                       disk_tokens=sum(len(e.ids) for e in disk.entries.values()),
                       disk_budget=disk.budget, disk_writes=disk.writes, disk_write_failures=disk.write_failures,
                       disk_write_seconds=disk.write_seconds, disk_read_seconds=disk.read_seconds,
                       disk_removed=dict(disk.removed), disk_problem=disk.problem)
        return out

