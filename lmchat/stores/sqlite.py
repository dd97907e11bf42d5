"""The SQLite session store: one file, durable saves, safe across threads and processes.

Durability: WAL journal with ``synchronous=FULL``, so a save that returned is
on disk, and each save is one transaction, so a process killed mid-save leaves
the previous version intact (never half a turn). Concurrency: a connection per
thread (sqlite3 connections must not be shared without a lock), writes take
the database lock up front (``BEGIN IMMEDIATE``) so the compare-and-set read
and the write see the same state, and other processes wait up to
``BUSY_SECONDS`` for it. The schema is versioned with ``PRAGMA user_version``;
opening a file applies the missing ``MIGRATIONS`` in one transaction.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from typing import Any, Iterator, Mapping

from ..errors import StoreConflict, StoreError
from .base import SessionInfo, loaded, record

BUSY_SECONDS = 10.0

#: migration i brings the schema from version i to i + 1; append, never edit
MIGRATIONS: list[tuple[str, ...]] = [
    (
        # the snapshot as JSON, plus the columns `list` shows and sorts by; seq orders saves within a clock tick
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            title TEXT NOT NULL,
            turns INTEGER NOT NULL,
            template TEXT NOT NULL,
            data TEXT NOT NULL
        )""",
        "CREATE INDEX sessions_by_seq ON sessions(seq)",
    ),
    (
        # who may see a session (the session manager's owner hash; '' for the REPL's sessions)
        "ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX sessions_by_owner ON sessions(owner, seq)",
    ),
]

_UPSERT = """
INSERT INTO sessions (id, version, seq, created_at, updated_at, title, turns, template, owner, data)
VALUES (:id, :version, :seq, :now, :now, :title, :turns, :template, :owner, :data)
ON CONFLICT(id) DO UPDATE SET
    version = excluded.version, seq = excluded.seq, updated_at = excluded.updated_at,
    title = excluded.title, turns = excluded.turns, template = excluded.template, owner = excluded.owner,
    data = excluded.data
"""


class SQLiteStore:
    """Sessions in an SQLite file (created with its folder when missing)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        if self.path == ":memory:" or not self.path:
            raise StoreError("SQLiteStore needs a file path (each thread opens its own connection); use MemoryStore")
        self.spec = f"sqlite:{os.path.abspath(self.path)}"
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self._migrate()

    # ------------------------------------------------------------------ connections
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreError(f"{self.path}: the store is closed")
            try:
                # autocommit mode: transactions are explicit, so each save is exactly one
                conn = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot open the session store: {exc}") from None
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"{self.path}: {exc}") from None

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from None

    def _migrate(self) -> None:
        try:
            with self._write() as conn:
                have = conn.execute("PRAGMA user_version").fetchone()[0]
                if have > len(MIGRATIONS):
                    raise StoreError(f"{self.path}: schema version {have} is newer than this lmchat ({len(MIGRATIONS)})")
                for statements in MIGRATIONS[have:]:
                    for sql in statements:
                        conn.execute(sql)
                conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: not a usable session store: {exc}") from None

    # ------------------------------------------------------------------ protocol
    def save(self, session_dict: Mapping[str, Any], *, expected_version: int | None = None) -> int:
        rec = record(session_dict)
        try:
            with self._write() as conn:
                row = conn.execute("SELECT version FROM sessions WHERE id = ?", (rec.id,)).fetchone()
                current = row[0] if row else 0
                if expected_version is not None and expected_version != current:
                    raise StoreConflict(rec.id, expected=expected_version, actual=current)
                seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM sessions").fetchone()[0]
                conn.execute(_UPSERT, {
                    "id": rec.id, "version": current + 1, "seq": seq, "now": time.time(),
                    "title": rec.title, "turns": rec.turns, "template": rec.template, "owner": rec.owner,
                    "data": rec.data,
                })
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot save session {rec.id}: {exc}") from None
        return current + 1

    def load(self, session_id: str) -> dict[str, Any] | None:
        rows = self._read("SELECT data, version FROM sessions WHERE id = ?", (session_id,))
        return loaded(rows[0][0], rows[0][1], session_id) if rows else None

    def delete(self, session_id: str) -> None:
        try:
            with self._write() as conn:
                conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot delete session {session_id}: {exc}") from None

    def version(self, session_id: str) -> int:
        rows = self._read("SELECT version FROM sessions WHERE id = ?", (session_id,))
        return rows[0][0] if rows else 0

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        columns = "SELECT id, title, turns, updated_at, template, version, owner FROM sessions"
        if owner is None:
            rows = self._read(f"{columns} ORDER BY seq DESC LIMIT ?", (limit,))
        else:
            rows = self._read(f"{columns} WHERE owner = ? ORDER BY seq DESC LIMIT ?", (owner, limit))
        return [SessionInfo(*row) for row in rows]

    def latest(self) -> str | None:
        rows = self._read("SELECT id FROM sessions ORDER BY seq DESC LIMIT 1")
        return rows[0][0] if rows else None

    def close(self) -> None:
        """Close every thread's connection; the store cannot be used afterwards."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
        self._local = threading.local()
