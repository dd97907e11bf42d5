"""The SQLite session store: one file, durable writes, safe across threads and processes.

Tables: ``sessions`` (the columns ``list`` shows, the version, the records'
sizes), ``bases`` (one base snapshot per session) and ``patches`` (one row per
version after the base). The big base sits in a table of its own so that an
append, which updates the small ``sessions`` row, never rewrites it: an append
touches O(turn) bytes.

Durability: WAL journal with ``synchronous=FULL``, so a write that returned is
on disk, and each write runs in a transaction (several writes share one: group
commit, :mod:`.sqlite_io`), so a process killed mid-write leaves the previous
version intact. Concurrency: writes take the database lock up front (``BEGIN
IMMEDIATE``), so the compare-and-set read and the write see the same state;
other processes wait up to ``BUSY_SECONDS`` for it. Connections: one writer
(its own thread) and at most ``readers`` readers, whatever the number of
threads. The schema is versioned with ``PRAGMA user_version``; opening a file
applies the missing ``MIGRATIONS`` in one transaction.
"""
from __future__ import annotations

import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Mapping

from ..errors import StoreConflict, StoreCorrupt, StoreError
from .base import SessionInfo, Summary, record
from .records import RecordInfo, RecordStore, Stored, check_versions, compaction_due, new_tag
from .sqlite_io import BUSY_SECONDS, Readers, Row, Writer, connect

__all__ = ["BUSY_SECONDS", "MIGRATIONS", "SQLiteStore"]

_COLUMNS = "id, version, seq, created_at, updated_at, title, turns, template, owner"

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
    (
        # records: the snapshot moves to a base table of its own plus one patch per later version; sessions keeps
        # the small columns an append updates (SQLite rewrites a whole row on update: no big text may sit in it)
        "CREATE TABLE bases (id TEXT PRIMARY KEY, version INTEGER NOT NULL, tag TEXT NOT NULL, data TEXT NOT NULL)",
        "INSERT INTO bases (id, version, tag, data) SELECT id, version, lower(hex(randomblob(16))), data FROM sessions",
        """CREATE TABLE patches (
            id TEXT NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (id, version)
        ) WITHOUT ROWID""",
        """CREATE TABLE sessions_v3 (
            id TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            title TEXT NOT NULL,
            turns INTEGER NOT NULL,
            template TEXT NOT NULL,
            owner TEXT NOT NULL DEFAULT '',
            token TEXT NOT NULL DEFAULT '',
            base_chars INTEGER NOT NULL,
            patch_chars INTEGER NOT NULL DEFAULT 0
        )""",
        f"INSERT INTO sessions_v3 ({_COLUMNS}, base_chars) SELECT {_COLUMNS}, length(data) FROM sessions",
        "DROP TABLE sessions",
        "ALTER TABLE sessions_v3 RENAME TO sessions",
        "CREATE INDEX sessions_by_seq ON sessions(seq)",
        "CREATE INDEX sessions_by_owner ON sessions(owner, seq)",
    ),
]

_UPSERT = """
INSERT INTO sessions (id, version, seq, created_at, updated_at, title, turns, template, owner, token, base_chars,
                      patch_chars)
VALUES (:id, :version, (SELECT COALESCE(MAX(seq), 0) + 1 FROM sessions), :now, :now, :title, :turns, :template,
        :owner, :token, :base_chars, 0)
ON CONFLICT(id) DO UPDATE SET
    version = excluded.version, seq = excluded.seq, updated_at = excluded.updated_at,
    title = excluded.title, turns = excluded.turns, template = excluded.template, owner = excluded.owner,
    token = excluded.token, base_chars = excluded.base_chars, patch_chars = 0
"""

# the compare-and-set of an append: it changes the row only at the expected version
_APPENDED = """
UPDATE sessions SET version = :version, seq = (SELECT COALESCE(MAX(seq), 0) + 1 FROM sessions), updated_at = :now,
    title = :title, turns = :turns, template = :template, owner = :owner, token = :token,
    patch_chars = patch_chars + :chars
WHERE id = :id AND version = :version - 1
"""

#: SQLite >= 3.35 returns what an UPDATE changed: an append is then one statement on its session's row (each
#: statement hands the GIL to the other threads and back, which costs more than the statement under load)
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)


def _migrate(path: str, conn: sqlite3.Connection) -> None:
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            have = conn.execute("PRAGMA user_version").fetchone()[0]
            if have > len(MIGRATIONS):
                raise StoreError(f"schema version {have} is newer than this lmchat ({len(MIGRATIONS)})", where=path)
            for statements in MIGRATIONS[have:]:
                for sql in statements:
                    conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise StoreError(f"not a usable session store: {exc}", where=path) from None


def _shutdown(writer: Writer, readers: Readers) -> None:
    writer.close()
    readers.close()


class SQLiteStore(RecordStore):
    """Sessions in an SQLite file (created with its folder when missing); ``readers``: reader connections at most."""

    loop_safe = True  # reads are local; writes are queued to the writer thread and awaited

    def __init__(self, path: str | os.PathLike[str], *, readers: int = 4):
        self.path = os.fspath(path)
        if self.path == ":memory:" or not self.path:
            raise StoreError("SQLiteStore needs a file path (its writer and readers each open it); use MemoryStore")
        if readers < 1:
            raise StoreError(f"readers must be >= 1, got {readers}", where=self.path)
        self.spec = f"sqlite:{os.path.abspath(self.path)}"
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        conn = connect(self.path)
        try:
            _migrate(self.path, conn)
            self._readers = Readers(self.path, readers)
        except BaseException:
            conn.close()
            raise
        self._writer = Writer(self.path, conn)
        # a store dropped without close() still stops its thread and closes its files
        self._finalizer = weakref.finalize(self, _shutdown, self._writer, self._readers)

    @property
    def group_commits(self) -> tuple[int, int]:
        """(transactions, writes) committed so far: writes / transactions is the mean batch size."""
        return self._writer.transactions, self._writer.writes

    # ------------------------------------------------------------------ writes
    def save(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
             token: str | None = None) -> int:
        return self._writer.submit(*self._save_job(session_dict, expected_version, token))

    async def asave(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
                    token: str | None = None) -> int:
        return await self._writer.run(*self._save_job(session_dict, expected_version, token))

    def _append(self, session_id: str, patch: str, expected: int, summary: Summary, token: str) -> tuple[int, bool]:
        return self._writer.submit(*self._append_job(session_id, patch, expected, summary, token))

    async def _append_soon(self, session_id: str, patch: str, expected: int, summary: Summary,
                           token: str) -> tuple[int, bool]:
        return await self._writer.run(*self._append_job(session_id, patch, expected, summary, token))

    def _save_job(self, session_dict: Mapping[str, object], expected_version: int | None, token: str | None
                  ) -> tuple[Callable[[sqlite3.Connection], int], str]:
        rec = record(session_dict)
        token = token or new_tag()

        def write(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT version, token FROM sessions WHERE id = ?", (rec.id,)).fetchone()
            current = self._check_int(rec.id, "version", row[0]) if row else 0
            if expected_version is not None and expected_version != current:
                if row is not None and row[1] == token and current == expected_version + 1:
                    return current  # a retry of the write that made this version
                raise StoreConflict(rec.id, expected=expected_version, actual=current)
            conn.execute(_UPSERT, {
                "id": rec.id, "version": current + 1, "now": time.time(),
                "title": rec.title, "turns": rec.turns, "template": rec.template, "owner": rec.owner,
                "token": token, "base_chars": len(rec.data),
            })
            conn.execute("INSERT OR REPLACE INTO bases (id, version, tag, data) VALUES (?, ?, ?, ?)",
                         (rec.id, current + 1, new_tag(), rec.data))
            conn.execute("DELETE FROM patches WHERE id = ?", (rec.id,))
            return current + 1

        return write, f"save session {rec.id}"

    def _append_job(self, session_id: str, patch: str, expected: int, summary: Summary, token: str
                    ) -> tuple[Callable[[sqlite3.Connection], tuple[int, bool]], str]:
        params = {"id": session_id, "version": expected + 1, "now": time.time(), "title": summary.title,
                  "turns": summary.turns, "template": summary.template, "owner": summary.owner, "token": token,
                  "chars": len(patch)}

        def write(conn: sqlite3.Connection) -> tuple[int, bool]:
            if _RETURNING:
                row = conn.execute(_APPENDED + " RETURNING base_chars, patch_chars", params).fetchall()
                if not row:
                    return self._unappended(conn, session_id, expected, token)
                base_chars, patch_chars = row[0]
            else:
                row = conn.execute("SELECT version, base_chars, patch_chars FROM sessions WHERE id = ?",
                                   (session_id,)).fetchone()
                if row is None or row[0] != expected:
                    return self._unappended(conn, session_id, expected, token)
                conn.execute(_APPENDED, params)
                base_chars, patch_chars = row[1], row[2] + len(patch)
            conn.execute("INSERT INTO patches (id, version, data) VALUES (?, ?, ?)", (session_id, expected + 1, patch))
            return expected + 1, compaction_due(patch_chars, base_chars)

        return write, f"append to session {session_id}"

    def _unappended(self, conn: sqlite3.Connection, session_id: str, expected: int, token: str) -> tuple[int, bool]:
        """An append whose compare-and-set failed: the retry of the write that made this version, or a conflict."""
        row = conn.execute("SELECT version, token FROM sessions WHERE id = ?", (session_id,)).fetchone()
        current = self._check_int(session_id, "version", row[0]) if row else 0
        if row is not None and row[1] == token and current == expected + 1:
            return current, False
        raise StoreConflict(session_id, expected=expected, actual=current)

    def _install(self, session_id: str, tag: str, at_version: int, base: str, folded_chars: int) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT s.version, b.tag FROM sessions s JOIN bases b ON b.id = s.id WHERE s.id = ?",
                               (session_id,)).fetchone()
            if row is None or row[1] != tag or self._check_int(session_id, "version", row[0]) < at_version:
                return False  # saved, compacted or deleted since it was read
            conn.execute("UPDATE bases SET version = ?, tag = ?, data = ? WHERE id = ?",
                         (at_version, new_tag(), base, session_id))
            conn.execute("DELETE FROM patches WHERE id = ? AND version <= ?", (session_id, at_version))
            conn.execute("UPDATE sessions SET base_chars = ?, patch_chars = patch_chars - ? WHERE id = ?",
                         (len(base), folded_chars, session_id))
            return True

        return self._writer.submit(write, f"compact session {session_id}")

    def delete(self, session_id: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            for table in ("sessions", "bases", "patches"):
                conn.execute(f"DELETE FROM {table} WHERE id = ?", (session_id,))

        self._writer.submit(write, f"delete session {session_id}")

    # ------------------------------------------------------------------ reads
    def _read(self, session_id: str) -> Stored | None:
        def read(conn: sqlite3.Connection) -> tuple[Row | None, list[Row]]:
            head = conn.execute("SELECT s.version, b.version, b.tag, b.data FROM sessions s "
                                "LEFT JOIN bases b ON b.id = s.id WHERE s.id = ?", (session_id,)).fetchone()
            if head is None or head[1] is None:
                return head, []
            return head, conn.execute("SELECT version, data FROM patches WHERE id = ? AND version > ? "
                                      "ORDER BY version", (session_id, head[1])).fetchall()

        head, rows = self._readers.read(read, f"load session {session_id}")
        if head is None:
            return None
        version, base_version, tag, base = head
        if base_version is None:
            raise StoreCorrupt(f"session {session_id} has no stored base: the records are inconsistent",
                               where=self.path)
        check_versions(session_id, version, base_version, self.path)
        # O(patches stored), never O(version): a damaged row may claim any version
        if len(rows) != version - base_version or any(v != n for n, (v, _) in enumerate(rows, base_version + 1)):
            raise StoreCorrupt(f"session {session_id} is at version {version} but its stored patches "
                               f"are versions {[v for v, _ in rows[:10]]} after base {base_version}: the records "
                               "are inconsistent", where=self.path)
        return Stored(version, base_version, tag, base, [data for _, data in rows])

    def records(self, session_id: str) -> RecordInfo | None:
        row = self._readers.read(lambda conn: conn.execute(
            "SELECT s.version, b.version, (SELECT COUNT(*) FROM patches p WHERE p.id = s.id), s.base_chars, "
            "s.patch_chars FROM sessions s LEFT JOIN bases b ON b.id = s.id WHERE s.id = ?", (session_id,)
        ).fetchone(), f"read session {session_id}")
        return None if row is None else RecordInfo(*row)

    def _rows(self, sql: str, params: tuple[object, ...], what: str) -> list[Row]:
        return self._readers.rows(sql, params, what)

    def _check_int(self, session_id: str, what: str, value: object) -> int:
        # SQLite columns take any type: a hand-edited file may hold text where a number belongs
        if not isinstance(value, int):
            raise StoreCorrupt(f"session {session_id}: its stored {what} is not a number: {value!r:.80}",
                               where=self.path)
        return value

    def version(self, session_id: str) -> int:
        rows = self._rows("SELECT version FROM sessions WHERE id = ?", (session_id,), f"read session {session_id}")
        if not rows:
            return 0
        version: int = rows[0][0]
        check_versions(session_id, version, 1, self.path)
        return version

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        columns = "SELECT id, title, turns, updated_at, template, version, owner FROM sessions"
        if owner is None:
            rows = self._rows(f"{columns} ORDER BY seq DESC LIMIT ?", (limit,), "list sessions")
        else:
            rows = self._rows(f"{columns} WHERE owner = ? ORDER BY seq DESC LIMIT ?", (owner, limit), "list sessions")
        return [SessionInfo(*row) for row in rows]

    def latest(self) -> str | None:
        rows = self._rows("SELECT id FROM sessions ORDER BY seq DESC LIMIT 1", (), "list sessions")
        return rows[0][0] if rows else None

    def close(self) -> None:
        """Finish the queued writes, stop the writer thread, close every connection; later calls raise StoreError."""
        self._finalizer()
