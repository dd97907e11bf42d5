"""The disk tier: KV states in a bounded directory of files, verified before every use.

Files are written and read as :mod:`.kvformat` says, each verified before it is
used. Writes and deletions run on a thread of their own, off the scheduler; a state
waiting to be written is served from memory meanwhile. A directory that cannot
be created or written (read-only, full) makes every failed write a logged miss:
the engine goes on without the files.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import queue
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

from .kvformat import (
    HEAD, MAGIC, SUFFIX, VERSION, KVFileRejected, difference, digest, ids_bytes, parse, read_head,
)

log = logging.getLogger("lmchat.llamacpp")

#: the smallest state worth a file: fewer ids are prefilled again faster than a file is read
MIN_IDS = 64


@attrs.define(eq=False)
class DiskEntry:
    """A KV file the index knows (``ids`` as a list: the index compares them with lists)."""

    name: str
    ids: list[int]
    nbytes: int
    exact: int = 0
    blob: bytes | bytearray | None = None  # the state, until the writer has written it
    tick: int = 0
    why_not: str | None = None  # set when the file is known to be unusable (another model's, a failed write)
    miss_kind: str = ""  # why_not, for the metrics
    gone: bool = False

    tier = "disk"
    version = 0  # a file's ids never change


class DiskTier:
    """KV files under ``directory``, at most ``budget`` bytes of them (least recently used go first)."""

    def __init__(self, directory: str | Path, budget: int, identity: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.budget = int(budget)
        self.identity = identity
        self.entries: dict[str, DiskEntry] = {}
        self.nbytes = 0
        self.writes = self.write_failures = 0
        self.write_seconds = self.read_seconds = 0.0
        self.ignored: Counter[str] = Counter()  # files found at start and not indexed, by reason
        self.foreign: list[DiskEntry] = []  # files of another model or other parameters: indexed, never loaded
        self._ticks = itertools.count(1)
        self._jobs: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()  # ("write", ...), ("unlink", name)
        self._idle = threading.Condition()
        self._pending = 0
        self.problem: str | None = None  # why the directory cannot be used, if it cannot
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.problem = f"cannot create the KV directory {self.directory}: {exc.strerror or exc}"
            log.warning("%s: KV states will not be kept on disk", self.problem)
        else:
            self._scan()
        self._thread = threading.Thread(target=self._work, name="lmchat-kv-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ start: what the directory holds
    def _scan(self) -> None:
        found = []
        for path in self.directory.iterdir():
            if path.name.startswith(".") and ".tmp-" in path.name:
                _unlink(path)  # a write cut short by a crash
                continue
            if path.suffix != SUFFIX:
                continue
            try:
                header, ids = read_head(path)
            except KVFileRejected as exc:
                log.info("ignored KV file %s: %s", path.name, exc)
                self.ignored["unreadable"] += 1
                continue
            if header["identity"] != self.identity:  # indexed, never used: a hit on it says why
                why = (f"KV file {path.name} was made by another model or with other cache parameters "
                       f"({difference(header['identity'], self.identity)})")
                self.foreign.append(DiskEntry(path.name, ids, 0, header["exact"], why_not=why,
                                              miss_kind="other model"))
                continue
            found.append((path.stat().st_mtime, path.name, ids, header["exact"]))
        for _, name, ids, exact in sorted(found):  # oldest first: the ticks keep their order
            entry = DiskEntry(name, ids, (self.directory / name).stat().st_size, exact, tick=next(self._ticks))
            self.entries[name] = entry
            self.nbytes += entry.nbytes
        if self.entries:
            log.info("KV directory %s: %d states, %d bytes", self.directory, len(self.entries), self.nbytes)

    # ------------------------------------------------------------------ the scheduler's side
    def put(self, ids: list[int], exact: int, blob: bytes | bytearray) -> tuple[DiskEntry | None, list[DiskEntry]]:
        """Keep a state of ``ids`` whose first ``exact`` may be served (written in the background); returns
        its entry (None: not kept) and the entries evicted to stay within the budget (the caller unindexes
        them)."""
        if self.problem is not None or exact < MIN_IDS:
            return None, []
        raw_ids = ids_bytes(ids)
        name = hashlib.blake2b(raw_ids, digest_size=16).hexdigest() + SUFFIX
        old = self.entries.get(name)
        if old is not None and old.why_not is None and old.exact >= exact:  # on disk already
            old.tick = next(self._ticks)
            return old, []
        header = json.dumps({"identity": self.identity, "n_ids": len(ids), "exact": exact,
                             "state_bytes": len(blob), "blake2b": digest(raw_ids, blob)}).encode()
        size = HEAD.size + len(header) + len(raw_ids) + len(blob)
        if size > self.budget:
            return None, []
        if old is not None:
            self._forget(old)
        entry = DiskEntry(name, list(ids), size, exact, blob=blob, tick=next(self._ticks))
        self.entries[name] = entry
        self.nbytes += size
        gone = self._trim()
        self._submit(("write", entry, header, raw_ids))
        return entry, gone

    def touch(self, entry: DiskEntry) -> None:
        entry.tick = next(self._ticks)

    def read(self, entry: DiskEntry, needed: list[int]) -> bytes | bytearray | memoryview:
        """The state of ``entry``, verified: the identity, the ids (those indexed, starting with
        ``needed``), the digest. A file that fails is deleted; :class:`KVFileRejected` says why."""
        blob = entry.blob
        if blob is not None:
            return blob
        path = self.directory / entry.name
        started = time.perf_counter()
        try:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise KVFileRejected(f"KV file {entry.name} could not be read ({exc.strerror or exc})",
                                     "unreadable") from None
            header, ids, state = parse(data, entry.name)
            if header["identity"] != self.identity:
                raise KVFileRejected(f"KV file {entry.name} was made by another model or with other "
                                     f"cache parameters ({difference(header['identity'], self.identity)})",
                                     "other model")
            if ids != entry.ids or header["exact"] != entry.exact or ids[:len(needed)] != needed:
                raise KVFileRejected(f"KV file {entry.name} holds other token ids than it was indexed with",
                                     "ids differ")
            return state
        except KVFileRejected as exc:
            self._forget(entry)
            if exc.kind != "other model":  # another engine's file in a shared directory is not ours to delete
                self._submit(("delete", entry.name))
            raise
        finally:
            self.read_seconds += time.perf_counter() - started

    def reject(self, entry: DiskEntry) -> None:
        """Delete a file whose state llama.cpp refused (a corrupt state that passed the digest cannot
        happen; a state of a llama.cpp that changed its format without its version can)."""
        self._forget(entry)
        self._submit(("delete", entry.name))

    def _trim(self) -> list[DiskEntry]:
        gone = []
        while self.nbytes > self.budget and self.entries:
            oldest = min(self.entries.values(), key=lambda e: e.tick)
            self._forget(oldest)
            self._submit(("delete", oldest.name))
            gone.append(oldest)
        return gone

    def _forget(self, entry: DiskEntry) -> None:
        if self.entries.get(entry.name) is entry:
            del self.entries[entry.name]
            self.nbytes -= entry.nbytes
        entry.gone = True

    def flush(self) -> None:
        """Wait until every queued write and deletion is done."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)

    def close(self) -> None:
        self.flush()
        self._jobs.put(None)
        self._thread.join()

    # ------------------------------------------------------------------ the writer thread
    def _submit(self, job: tuple[Any, ...]) -> None:
        with self._idle:
            self._pending += 1
        self._jobs.put(job)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                if job[0] == "write":
                    self._write(*job[1:])
                else:
                    _unlink(self.directory / job[1])
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _write(self, entry: DiskEntry, header: bytes, raw_ids: bytes) -> None:
        if entry.gone:  # evicted before its turn came
            return
        started = time.perf_counter()
        path = self.directory / entry.name
        tmp = self.directory / f".{entry.name}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as f:
                f.write(HEAD.pack(MAGIC, VERSION, len(header)))
                f.write(header)
                f.write(raw_ids)
                assert entry.blob is not None, "an entry is written once, then forgets its blob"
                f.write(entry.blob)
            os.replace(tmp, path)
        except OSError as exc:
            _unlink(tmp)
            entry.why_not = f"KV file {entry.name} could not be written ({exc.strerror or exc})"
            entry.miss_kind = "write failed"
            self.write_failures += 1
            log.warning("%s in %s", entry.why_not, self.directory)
            return
        finally:
            self.write_seconds += time.perf_counter() - started
        self.writes += 1
        if entry.gone:  # evicted while being written
            _unlink(path)
        entry.blob = None


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
