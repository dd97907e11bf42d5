"""The SQLite store's connections: one writer thread that group-commits, and a bounded pool of readers.

Whatever the number of threads calling the store, it holds ``1 + readers``
connections and one thread. Every write is a function of the writer
connection, queued to the writer thread; the thread takes every write queued
while it was busy, runs them in one transaction, each under its own savepoint
(one write's conflict or error rolls back that write only) and commits once:
one ``fsync`` (``synchronous=FULL``) for the batch. Each caller blocks until
the commit returns and then gets its own result or exception, so a write that
returned is on disk.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar, cast

from ..errors import StoreError

#: what a job's function returns, and so its caller
T = TypeVar("T")
#: a row as sqlite3 returns it: each column has the type its table declares, which sqlite3 cannot say (its own
#: stubs type a row Any); readers check what a hand-edited file could break (versions: ``_check_int``)
Row = tuple[Any, ...]

BUSY_SECONDS = 10.0
#: writes per transaction at most: bounds how long one commit holds the queue up
MAX_BATCH = 256

#: page cache of each reader connection (SQLite's default is 2,000 KiB per connection)
READER_CACHE_KIB = 256

_STOP = object()


def check_process(path: str, pid: int) -> None:
    # after fork() the writer thread is gone and SQLite connections must not be used by two processes
    if os.getpid() != pid:
        raise StoreError(f"this store was opened in process {pid}, before a fork: open one in each process", where=path)


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, ``synchronous=FULL``."""
    try:
        conn = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the session store: {exc}", where=path) from None
    try:
        if readonly:
            conn.execute("PRAGMA query_only = 1")
            # a reader mostly reads a base once (load, compaction): a big page cache per reader would only hold
            # RSS that grows with the largest session; the small rows and the indexes fit in this one
            conn.execute(f"PRAGMA cache_size = -{READER_CACHE_KIB}")
        else:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"not a usable session store: {exc}", where=path) from None
    return conn


#: what waits for a write: a thread (a concurrent future) or a coroutine (an asyncio future on its loop)
_Future = Future[object] | asyncio.Future[object]


class _Job:
    """A queued write and whoever waits for it: a thread (a ``concurrent.futures.Future``) or a coroutine on
    ``loop`` (an asyncio future, settled on its loop)."""

    __slots__ = ("fn", "what", "future", "loop")

    def __init__(self, fn: Callable[[sqlite3.Connection], object], what: str, future: _Future,
                 loop: asyncio.AbstractEventLoop | None = None):
        self.fn, self.what, self.future, self.loop = fn, what, future, loop

    def start(self) -> bool:
        """Whether to run it: not when its caller gave up waiting first (a cancelled task or future)."""
        if isinstance(self.future, Future):  # a thread waits (no loop)
            return self.future.set_running_or_notify_cancel()
        return not self.future.cancelled()  # read across threads: at worst it runs for a caller that left


def _deliver(outcomes: list[tuple[_Job, object, BaseException | None]]) -> None:
    """Hand each job its result or error: threads at once, coroutines with one call per loop for the batch
    (one wake-up of the loop, not one per write)."""
    waiting: dict[asyncio.AbstractEventLoop, list[tuple[_Future, object, BaseException | None]]] = {}
    for job, result, exc in outcomes:
        if job.loop is not None:
            waiting.setdefault(job.loop, []).append((job.future, result, exc))
        elif not job.future.done():
            if exc is None:
                job.future.set_result(result)
            else:
                job.future.set_exception(exc)
    for loop, settled in waiting.items():
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[_Future, object, BaseException | None]]) -> None:  # on the waiting loop
    for future, result, exc in settled:
        if not future.done():  # a cancelled caller
            if exc is None:
                future.set_result(result)
            else:
                future.set_exception(exc)


class Writer:
    """The one thread that writes; ``submit(fn, what)`` runs ``fn(conn)`` in a group commit and returns its result
    (``await run(fn, what)`` on an event loop)."""

    def __init__(self, path: str, conn: sqlite3.Connection):
        self.path, self._conn = path, conn
        self._queue: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()  # a job, or _STOP
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        #: transactions and writes committed: writes / transactions is the mean batch size
        self.transactions = self.writes = 0
        # the thread holds the writer, never the store: a store dropped without close() can still be finalized
        self._thread = threading.Thread(target=self._run, name=f"lmchat-sqlite-writer:{path}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        future: Future[object] = Future()
        self._put(_Job(fn, what, future))
        return cast(T, future.result())  # the job's future holds what fn returned

    async def run(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        """:meth:`submit` for a coroutine: the write is awaited, the loop never blocked. Cancelled before the
        writer takes it, it is not written."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        self._put(_Job(fn, what, future, loop))
        return cast(T, await future)  # the job's future holds what fn returned

    def _put(self, job: _Job) -> None:
        check_process(self.path, self._pid)
        with self._lock:  # a write queued before close()'s stop marker is still run
            if self._closed:
                raise StoreError("the store is closed", where=self.path)
            self._queue.put(job)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if os.getpid() != self._pid:
                return  # a forked child: no writer thread here, and the connection is the parent's
            self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        stopping = False
        try:
            while not stopping:
                taken = [self._queue.get()]
                while len(taken) < MAX_BATCH:
                    try:
                        taken.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stopping = _STOP in taken
                batch = [job for job in taken if isinstance(job, _Job)]  # all but _STOP
                del taken
                if batch:
                    try:
                        self._commit(batch)
                    except Exception as exc:  # noqa: BLE001  (a bug must not leave callers waiting forever)
                        self._fail(batch, exc)
                # a job's closure may hold the store: keeping it while waiting would stop its finalizer
                del batch
        finally:
            self._conn.close()

    def _commit(self, batch: list[_Job]) -> None:
        conn = self._conn
        outcomes: list[tuple[_Job, object, BaseException | None]] = []
        # a write alone in its batch (most of them, unless the server is busy) needs no savepoint: when it fails
        # the whole transaction is rolled back. Each statement is a GIL round trip with the event loop.
        alone = len(batch) == 1
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            return self._fail(batch, exc)
        try:
            for job in batch:
                if not job.start():
                    continue  # its caller gave up waiting before it ran (a cancelled task): not written
                if not alone:
                    conn.execute("SAVEPOINT write")
                try:
                    outcomes.append((job, job.fn(conn), None))
                except Exception as exc:  # noqa: BLE001  (handed to the caller, typed below)
                    conn.execute("ROLLBACK" if alone else "ROLLBACK TO write")
                    outcomes.append((job, None, self._typed(exc, job.what)))
                if not alone:
                    conn.execute("RELEASE write")
            if conn.in_transaction:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:  # the transaction itself failed (disk full, I/O): no write of it landed
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            return self._fail(batch, exc)
        self.transactions += 1
        self.writes += len(outcomes)
        _deliver(outcomes)

    def _typed(self, exc: Exception, what: str) -> Exception:
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, sqlite3.Error):
            return StoreError(f"cannot {what}: {exc}", where=self.path)
        return StoreError(f"cannot {what}: unexpected {type(exc).__name__}: {exc}", where=self.path)

    def _fail(self, batch: list[_Job], exc: Exception) -> None:
        _deliver([(job, None, StoreError(f"cannot {job.what}: {exc}", where=self.path)) for job in batch])


class Readers:
    """``size`` reader connections shared by every thread (one at a time each).

    All are opened (and their WAL files with them) up front, so that the
    store's descriptors are a constant from open to close: ``3 + 2 * size``
    (the database and its WAL per connection, one shared-memory file).
    """

    def __init__(self, path: str, size: int):
        self.path = path
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        self._pid = os.getpid()
        try:
            for _ in range(size):
                self._idle.append(connect(path, readonly=True))
                self.read(lambda conn: conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchall(), "open a reader")
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        check_process(self.path, self._pid)
        with self._slots:
            with self._lock:
                if self._closed:
                    raise StoreError("the store is closed", where=self.path)
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = connect(self.path, readonly=True)
            try:
                yield conn
            finally:
                with self._lock:
                    if self._closed or conn.in_transaction:
                        conn.close()  # a closed store keeps nothing; a broken read is not reused
                    else:
                        self._idle.append(conn)

    def read(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        """``fn(conn)`` inside one read transaction: every query of it sees the same state."""
        with self.connection() as conn:
            try:
                conn.execute("BEGIN")
                try:
                    return fn(conn)
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot {what}: {exc}", where=self.path) from None

    def rows(self, sql: str, params: tuple[object, ...], what: str) -> list[Row]:
        """The rows of one query: a single statement is its own read transaction (no BEGIN and COMMIT around
        it, two statements fewer)."""
        with self.connection() as conn:
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot {what}: {exc}", where=self.path) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        if os.getpid() != self._pid:
            return  # a forked child: closing the parent's connections here could checkpoint or unlink its WAL
        for conn in idle:
            conn.close()
