"""An in-process store: the SQLite store's semantics without a file (tests, `--store memory`)."""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import attrs

from ..errors import StoreConflict, StoreError
from .base import SessionInfo, Summary, record
from .records import RecordInfo, RecordStore, Stored, compaction_due, new_tag


@attrs.define
class _Row:
    version: int
    base_version: int
    tag: str
    base: str
    patches: list[str]
    patch_chars: int
    summary: Summary
    updated_at: float
    seq: int
    token: str


class MemoryStore(RecordStore):
    """Sessions in a dict of records, JSON-encoded as the SQLite store's; every write is atomic under one lock.

    Encoding, decoding and compaction's folding run outside the lock: the lock
    only covers the compare-and-set and list operations, O(1) per append.
    """

    spec = "memory"
    loop_safe = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._seq = 0  # orders writes even within one clock tick
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("memory store: the store is closed")

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def save(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
             token: str | None = None) -> int:
        rec = record(session_dict)
        token = token or new_tag()
        with self._lock:
            self._check_open()
            row = self._rows.get(rec.id)
            current = row.version if row else 0
            if expected_version is not None and expected_version != current:
                if row is not None and row.token == token and current == expected_version + 1:
                    return current  # a retry of the write that made this version
                raise StoreConflict(rec.id, expected=expected_version, actual=current)
            self._rows[rec.id] = _Row(current + 1, current + 1, new_tag(), rec.data, [], 0, rec.summary,
                                      time.time(), self._next_seq(), token)
            return current + 1

    async def asave(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
                    token: str | None = None) -> int:
        return self.save(session_dict, expected_version=expected_version, token=token)  # never waits

    async def _append_soon(self, session_id: str, patch: str, expected: int, summary: Summary,
                           token: str) -> tuple[int, bool]:
        return self._append(session_id, patch, expected, summary, token)

    def _append(self, session_id: str, patch: str, expected: int, summary: Summary, token: str) -> tuple[int, bool]:
        with self._lock:
            self._check_open()
            row = self._rows.get(session_id)
            current = row.version if row else 0
            if row is None or current != expected:  # None: 0, and expected is >= 1
                if row is not None and row.token == token and current == expected + 1:
                    return current, False
                raise StoreConflict(session_id, expected=expected, actual=current)
            row.version += 1
            row.patches.append(patch)
            row.patch_chars += len(patch)
            row.summary, row.updated_at, row.seq, row.token = summary, time.time(), self._next_seq(), token
            return row.version, compaction_due(row.patch_chars, len(row.base))

    def _read(self, session_id: str) -> Stored | None:
        with self._lock:
            self._check_open()
            row = self._rows.get(session_id)
            if row is None:
                return None
            return Stored(row.version, row.base_version, row.tag, row.base, list(row.patches))

    def _install(self, session_id: str, tag: str, at_version: int, base: str, folded_chars: int) -> bool:
        with self._lock:
            self._check_open()
            row = self._rows.get(session_id)
            if row is None or row.tag != tag or row.version < at_version:
                return False
            del row.patches[: at_version - row.base_version]
            row.base, row.base_version, row.tag = base, at_version, new_tag()
            row.patch_chars -= folded_chars
            return True

    def records(self, session_id: str) -> RecordInfo | None:
        with self._lock:
            self._check_open()
            row = self._rows.get(session_id)
            if row is None:
                return None
            return RecordInfo(row.version, row.base_version, len(row.patches), len(row.base), row.patch_chars)

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._check_open()
            self._rows.pop(session_id, None)

    def version(self, session_id: str) -> int:
        with self._lock:
            self._check_open()
            row = self._rows.get(session_id)
        return 0 if row is None else row.version

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        with self._lock:
            self._check_open()
            rows = [(sid, r.summary, r.updated_at, r.version, r.seq) for sid, r in self._rows.items()
                    if owner is None or r.summary.owner == owner]
        rows.sort(key=lambda r: r[4], reverse=True)
        return [SessionInfo(sid, s.title, s.turns, updated, s.template, version, s.owner)
                for sid, s, updated, version, _ in rows[:limit]]

    def latest(self) -> str | None:
        infos = self.list(limit=1)
        return infos[0].id if infos else None

    def close(self) -> None:
        """Forget everything; later calls raise StoreError, as the other stores' do."""
        with self._lock:
            self._closed = True
            self._rows.clear()
