"""The disk tier: KV states in a bounded directory of files, authenticated before every use.

Files are written and read as :mod:`.kvformat` says, through :mod:`.kvdir` (no link followed, no FIFO or
device opened, nothing read past a file's size nor more than the tier's budget), each checked before use, its MAC
under the key of :mod:`.kvkey`. Writes and deletions run on a thread of their own, off the scheduler; a
state waiting to be written is served from memory meanwhile. A directory that cannot be created or written
(read-only, full), or a key that cannot be had, costs only the files: the engine goes on without them (each
failed write a logged miss).

A file found unusable at the start (not a regular file, truncated, of another format, not named by its ids,
larger than the tier) is removed, counted and logged, and its name kept: the turn that would have started
from it says why it did not.

A *shared* tier (``shared=True``: one directory several replicas use, one key file) is the same files, read by
every replica and written by the one that computed them: the engine publishes each finished turn's state at
once (:meth:`DiskTier.put`), and a replica looks for files others wrote (:meth:`DiskTier.refresh`) before it
would prefill. Publishing is a rename, so concurrent writers of one prefix (both files valid, one wins) and
readers (an open file is the one they opened) never meet a torn state; a file another replica evicted while
this one was about to read it is a miss that says so, and the turn prefills.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from ...errors import ConfigError
from . import kvdir
from .kvformat import (
    SUFFIX,
    TAG_BYTES,
    KVFileRejected,
    authenticated,
    difference,
    file_name,
    head_bytes,
    ids_bytes,
    ids_of,
    parse_header,
    tagger,
)
from .kvkey import KVKeyError, default_key_path, given_key, own_key

log = logging.getLogger("lmchat.llamacpp")

#: the smallest state worth a file: fewer ids are prefilled again faster than a file is read
MIN_IDS = 64
#: the names this tier writes (a digest of the ids, the suffix); anything else in the directory is not its own
_NAME = re.compile(r"[0-9a-f]{32}" + re.escape(SUFFIX))


def own_files(directory: Path) -> list[Path]:
    """The files in ``directory`` this tier wrote: its states, and writes a crash cut short (what ``lmchat cache``
    counts and clears; nothing else there, the key beside it included, is its own)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [directory / name for name in names if _NAME.fullmatch(name) or kvdir.is_temporary(name)]


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
    tier: str = "disk"  # "shared": a tier several replicas use (the metrics' source of its tokens)

    version = 0  # a file's ids never change


class DiskTier:
    """KV files under ``directory``, at most ``budget`` bytes of them (least recently used go first),
    authenticated with the key in ``key_file`` (None: the directory's own, ``<directory>.key``, made at the
    first start; a key file given that cannot be read is a :class:`ConfigError`). ``files``: where they are
    kept instead of the directory (a Redis server: :class:`.kvredis.RedisFiles`; it needs ``key_file``)."""

    def __init__(self, directory: str | Path, budget: int, identity: dict[str, Any],
                 key_file: str | Path | None = None, shared: bool = False, files: kvdir.Files | None = None) -> None:
        self.directory = Path(directory)
        self.where = self.directory.as_posix() if files is None else files.where
        self.shared = shared
        self.tier = "shared" if shared else "disk"
        self._seen: set[str] = set()  # names indexed, or found unusable: a refresh reads only new ones
        self.budget = int(budget)
        self.identity = identity
        self.entries: dict[str, DiskEntry] = {}
        self.nbytes = 0
        self.writes = self.write_failures = 0
        self.write_seconds = self.read_seconds = 0.0
        self.removed: Counter[str] = Counter()  # files removed as unusable (at the start or on a read), by reason
        self.lost: dict[bytes, KVFileRejected] = {}  # the digest in the name of a file removed at the start -> why
        self.foreign: list[DiskEntry] = []  # files of another model or other parameters: indexed, never loaded
        self._ticks = itertools.count(1)
        self._jobs: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()  # ("write", ...), ("unlink", name)
        self._idle = threading.Condition()
        self._pending = 0
        self.key = b""
        self.files: kvdir.Files | None = files
        self.problem: str | None = None  # why the directory cannot be used, if it cannot
        if files is not None and key_file is None:
            raise ConfigError(f"KV states kept in {files.where} need a key file every replica is given "
                              "(--kv-key-file)", field="kv_key_file")
        if files is None:
            try:
                self.files = kvdir.DirFiles(self.directory)
            except OSError as exc:
                self.problem = f"cannot create the KV directory {self.directory}: {exc.strerror or exc}"
        if self.files is not None:
            try:
                self.key = given_key(Path(key_file)) if key_file is not None else own_key(
                    default_key_path(self.directory))
            except KVKeyError as exc:
                if key_file is not None:
                    self.files.close()
                    raise ConfigError(str(exc), field="kv_key_file") from None
                self.problem = str(exc)
        if self.problem is not None:
            log.warning("%s: KV states will not be kept on disk", self.problem)
        self._thread = threading.Thread(target=self._work, name="lmchat-kv-writer", daemon=True)
        self._thread.start()

    @property
    def _files(self) -> kvdir.Files:
        assert self.files is not None and self.problem is None, "used only when the tier works"
        return self.files

    # ------------------------------------------------------------------ start: what the directory holds
    def start(self, max_ids: int) -> list[DiskEntry]:
        """Index the directory for an engine whose sequences hold at most ``max_ids`` ids: returns the
        entries for its index (the usable files, and other engines' files, which say why they are not used)."""
        if self.problem is not None:
            return []
        try:
            self._files.sweep()
            names = self._files.names()
        except OSError as exc:
            log.warning("KV files in %s cannot be listed (%s): none used for now", self.where, exc)
            return []
        found = [file for name in names
                 if _NAME.fullmatch(name) and (file := self._index(name, max_ids, at_start=True)) is not None]
        self._add(found)
        self._trim()  # a budget lowered since the files were written: the oldest go
        if self.entries or self.removed:
            log.info("KV directory %s: %d states, %d bytes; files removed: %d", self.where, len(self.entries),
                     self.nbytes, sum(self.removed.values()))
        return [*self.entries.values(), *self.foreign]

    def refresh(self, max_ids: int) -> tuple[list[DiskEntry], list[DiskEntry]]:
        """What other replicas did to a shared directory since the last look: the entries of files they
        published (for the index: usable ones and other engines') and of files they removed (to unindex);
        a tier of one process's own finds nothing."""
        if not self.shared or self.problem is not None:
            return [], []
        try:
            names = set(self._files.names())
        except OSError:
            return [], []
        gone = [e for e in self.entries.values() if e.blob is None and e.name not in names]
        for entry in gone:
            self._forget(entry)
        self._seen &= names  # a name removed may come back, published again
        n_foreign = len(self.foreign)
        found = [file for name in sorted(names - self._seen)
                 if _NAME.fullmatch(name) and (file := self._index(name, max_ids, at_start=False)) is not None]
        new = self._add(found)
        gone += self._trim()  # the replicas share the budget: each trims what it sees, the least recently used
        return [*new, *self.foreign[n_foreign:]], gone

    def _index(self, name: str, max_ids: int, at_start: bool) -> tuple[float, str, list[int], int, int] | None:
        """The file ``name`` of this engine to index (its mtime, name, ids, exact, size); None if it is not:
        another engine's (kept in ``foreign``), or unusable (removed, its reason kept for the turn that
        would have started from it)."""
        self._seen.add(name)
        try:
            header, raw, size, mtime = self._files.head(name, max_ids)
            foreign = header.identity != self.identity  # another engine's: kept, never read whole
            if raw is None:
                if foreign:
                    return None  # of a longer context than ours: not even indexed
                raise KVFileRejected(f"holds {header.n_ids} ids, more than a sequence here ({max_ids})", "too long")
            if not foreign and size > self.budget:
                raise KVFileRejected(f"is larger than the whole disk tier ({self.budget} bytes)", "too large")
            if file_name(raw) != name:
                raise KVFileRejected("is not named by the ids it holds", "misnamed")
        except KVFileRejected as exc:
            if exc.kind == "gone":  # removed by another replica since the listing
                return None
            if exc.kind == "unavailable":  # the store is down: looked at again next time
                self._seen.discard(name)
                return None
            self._removed(name, exc)
            self._files.delete(name)
            self.lost[bytes.fromhex(name[:32])] = KVFileRejected(
                f"KV file {name} {exc}: it was removed " + ("at the start" if at_start else "when found"), exc.kind)
            return None
        if foreign:  # indexed, never used: a hit on it says why
            why = (f"KV file {name} was made by another model or with other cache parameters "
                   f"({difference(header.identity, self.identity)})")
            self.foreign.append(DiskEntry(name, ids_of(raw), 0, header.exact, why_not=why,
                                          miss_kind="other model", tier=self.tier))
            return None
        return mtime, name, ids_of(raw), header.exact, size

    def _add(self, found: list[tuple[float, str, list[int], int, int]]) -> list[DiskEntry]:
        new = []
        for _, name, ids, exact, size in sorted(found):  # oldest first: the ticks keep their order
            entry = DiskEntry(name, ids, size, exact, tick=next(self._ticks), tier=self.tier)
            self.entries[name] = entry
            self.nbytes += entry.nbytes
            new.append(entry)
        return new

    def removed_prefix(self, ids: list[int], beyond: int) -> KVFileRejected | None:
        """Why the file removed at the start that held the longest prefix of ``ids``, longer than ``beyond``
        ids, is not there (None: none did). Told once: the turn that would have started from it says why."""
        first = max(beyond + 1, MIN_IDS)
        if not self.lost or len(ids) < first:
            return None
        raw = memoryview(ids_bytes(ids))
        h = hashlib.blake2b(raw[:4 * (first - 1)], digest_size=16)
        found = None
        for n in range(first, len(ids) + 1):  # a file is named by the digest of all its ids
            h.update(raw[4 * n - 4:4 * n])
            if (digest := h.copy().digest()) in self.lost:
                found = digest
        return None if found is None else self.lost.pop(found)

    # ------------------------------------------------------------------ the scheduler's side
    def put(self, ids: list[int], exact: int, blob: bytes | bytearray) -> tuple[DiskEntry | None, list[DiskEntry]]:
        """Keep a state of ``ids`` whose first ``exact`` may be served (written in the background); returns
        its entry (None: not kept) and the entries evicted to stay within the budget (the caller unindexes
        them)."""
        if self.problem is not None or exact < MIN_IDS:
            return None, []
        raw_ids = ids_bytes(ids)
        name = file_name(raw_ids)
        self._seen.add(name)
        old = self.entries.get(name)
        if old is not None and old.why_not is None and old.exact >= exact:  # on disk already
            old.tick = next(self._ticks)
            return old, []
        head = head_bytes(self.identity, len(ids), exact, len(blob))
        size = len(head) + len(raw_ids) + len(blob) + TAG_BYTES
        if size > self.budget:
            return None, []
        if old is not None:
            self._forget(old)
        entry = DiskEntry(name, list(ids), size, exact, blob=blob, tick=next(self._ticks), tier=self.tier)
        self.entries[name] = entry
        self.nbytes += size
        gone = self._trim()
        self._submit(("write", entry, head, raw_ids))
        return entry, gone

    def touch(self, entry: DiskEntry) -> None:
        entry.tick = next(self._ticks)

    def read(self, entry: DiskEntry, needed: list[int]) -> bytes | bytearray | memoryview:
        """The state of ``entry``, verified: a regular file (no larger than the tier: no more is read) of the
        size its header says, the identity, its MAC, the ids (those indexed, starting with ``needed``). A
        file that fails is removed, but for another engine's (another identity: the directory may be
        shared); :class:`KVFileRejected` says why."""
        blob = entry.blob
        if blob is not None:
            return blob
        started = time.perf_counter()
        try:
            return self._verified(entry, needed)
        except KVFileRejected as exc:
            self._forget(entry)
            if exc.kind in ("gone", "unavailable"):  # another replica's eviction, a store down: nothing to remove
                self._seen.discard(entry.name)  # published again, it is found again
                raise KVFileRejected(f"KV file {entry.name} {exc}", exc.kind) from None
            if exc.kind != "other model":  # another engine's file in a shared directory is not ours to delete
                self._removed(entry.name, exc)
                self._submit(("delete", entry.name))
            raise KVFileRejected(f"KV file {entry.name} {exc}", exc.kind) from None
        finally:
            self.read_seconds += time.perf_counter() - started

    def _verified(self, entry: DiskEntry, needed: list[int]) -> memoryview:
        data = self._files.read(entry.name, self.budget)
        header = parse_header(data, len(data))
        if header.identity != self.identity:  # another engine's, under a key of its own: not ours to judge
            raise KVFileRejected(f"was made by another model or with other cache parameters "
                                 f"({difference(header.identity, self.identity)})", "other model")
        ids, state = authenticated(data, header, self.key)
        # another replica may have published these ids again since they were indexed (another exact count)
        if ids != entry.ids or header.exact < len(needed) or ids[:len(needed)] != needed:
            raise KVFileRejected("holds other token ids than it was indexed with", "ids differ")
        return state

    def reject(self, entry: DiskEntry) -> None:
        """Delete a file whose state llama.cpp refused (a corrupt state that passed the MAC cannot
        happen; a state of a llama.cpp that changed its format without its version can)."""
        self._forget(entry)
        self._submit(("delete", entry.name))

    def _removed(self, name: str, exc: KVFileRejected) -> None:
        self.removed[exc.kind] += 1
        log.warning("KV directory %s: removing %s (%s)", self.where, name, exc)

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
        if self.files is not None:
            self.files.close()

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
                    self._files.delete(job[1])
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _write(self, entry: DiskEntry, head: bytes, raw_ids: bytes) -> None:
        if entry.gone:  # evicted before its turn came
            return
        blob = entry.blob
        assert blob is not None, "an entry is written once, then forgets its blob"
        started = time.perf_counter()
        mac = tagger(self.key)

        def parts() -> Iterator[bytes | bytearray]:
            for part in (head, raw_ids, blob):
                mac.update(part)
                yield part
            yield mac.digest()

        try:
            self._files.write(entry.name, parts())
        except OSError as exc:
            entry.why_not = f"KV file {entry.name} could not be written ({exc.strerror or exc})"
            entry.miss_kind = "write failed"
            self.write_failures += 1
            log.warning("%s in %s", entry.why_not, self.where)
            return
        finally:
            self.write_seconds += time.perf_counter() - started
        self.writes += 1
        if entry.gone:  # evicted while being written
            self._files.delete(entry.name)
        entry.blob = None
