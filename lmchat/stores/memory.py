"""An in-process store: the SQLite store's semantics without a file (tests, `--store memory`)."""
from __future__ import annotations

import threading
import time
from typing import Any, Mapping

from ..errors import StoreConflict
from .base import Record, SessionInfo, loaded, record


class MemoryStore:
    """Sessions in a dict; saves are atomic under a lock and JSON-encoded, as the SQLite store's."""

    spec = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[Record, int, float, int]] = {}  # id -> (record, version, updated_at, seq)
        self._seq = 0  # orders saves even within one clock tick

    def save(self, session_dict: Mapping[str, Any], *, expected_version: int | None = None) -> int:
        rec = record(session_dict)
        with self._lock:
            current = self._rows[rec.id][1] if rec.id in self._rows else 0
            if expected_version is not None and expected_version != current:
                raise StoreConflict(rec.id, expected=expected_version, actual=current)
            self._seq += 1
            self._rows[rec.id] = (rec, current + 1, time.time(), self._seq)
            return current + 1

    def load(self, session_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._rows.get(session_id)
        return None if row is None else loaded(row[0].data, row[1], session_id)

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._rows.pop(session_id, None)

    def version(self, session_id: str) -> int:
        with self._lock:
            row = self._rows.get(session_id)
        return 0 if row is None else row[1]

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        with self._lock:
            rows = [r for r in self._rows.values() if owner is None or r[0].owner == owner]
        rows = sorted(rows, key=lambda r: r[3], reverse=True)[:limit]
        return [
            SessionInfo(r.id, r.title, r.turns, updated, r.template, version, r.owner)
            for r, version, updated, _ in rows
        ]

    def latest(self) -> str | None:
        infos = self.list(limit=1)
        return infos[0].id if infos else None

    def close(self) -> None:
        """Nothing to release; present for the protocol."""
