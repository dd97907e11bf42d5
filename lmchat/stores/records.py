"""Append-only records shared by every store: a base snapshot, the patches since, and compaction.

A session is stored as a base (the JSON of a whole snapshot, at
``base_version``) and one patch per later version (``base_version + 1`` up to
``version``). ``load`` folds the patches into the base. When the patches' total
size exceeds ``COMPACT_AFTER`` times the base's, and ``COMPACT_FLOOR``
characters, the store folds them into a new base (*compaction*): each
compaction costs O(base + patches) = O(1.5 x patches), paid for by the patches
appended since the last one, so an append costs O(turn) amortized and a
session that only grows is compacted O(log n) times over its life. The factor
trades appends for loads: at 1 a short session (a 4 KB base, patches of
0.8 KB) was re-encoded every fifth turn; at 2, every tenth, while a load folds
at most twice the base's size in patches. The floor spares short sessions: a
new session's base is small (0.5 KB), and without it a 10-turn conversation was
folded twice (0.3 ms each on a loaded server: 0.06 ms per turn), while a
load that folds 8 KB of patches costs 0.2 ms more than one of a folded base
(and loads are rare: the manager keeps its sessions).

Compaction reads a consistent (base, patches) pair at some version ``V``, folds
it outside any lock, and installs the new base only if the base it read is
still the stored one (its random ``tag``: a compare-and-set). Patches after
``V`` appended meanwhile stay, on top of the new base; a ``save`` or another
compaction that replaced the base makes this one a no-op.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import attrs

from ..errors import StoreCorrupt, StoreError
from ..jsontypes import JSONObject
from .base import VERSION_KEY, Summary, dumps

log = logging.getLogger("lmchat.stores")


@attrs.frozen
class Stored:
    """One session's records, read in one consistent snapshot of the store."""

    version: int
    base_version: int
    tag: str
    base: str
    patches: list[str]


@attrs.frozen
class RecordInfo:
    """How a session is stored (tests, benchmarks, operators): what compaction works from."""

    version: int
    base_version: int
    patches: int
    base_chars: int
    patch_chars: int


_PROCESS: str  # set by _seed
_COUNTER: Iterator[int]


def _seed() -> None:
    global _PROCESS, _COUNTER
    _PROCESS, _COUNTER = uuid.uuid4().hex[:16], itertools.count()


_seed()
# a forked child (server workers) must not make its parent's tokens: two writers with one token would each take
# the other's write for its own retry
os.register_at_fork(after_in_child=_seed)


def new_tag() -> str:
    """A token or base tag no other write makes: random per process, counted within it (uuid4 costs more)."""
    return f"{_PROCESS}-{next(_COUNTER)}"


def encode_patch(session_id: str, patch: Mapping[str, object]) -> str:
    """Check a patch's shape (O(patch), nothing about the snapshot) and encode it."""
    where = f"session {session_id}: a patch"
    if not isinstance(patch, Mapping) or set(patch) - {"lists", "set"}:
        raise StoreError(f"{where} is a dict with 'lists' and 'set' (Session.changes()), got {_short(patch)}")
    lists, sets = patch.get("lists", {}), patch.get("set", {})
    if not isinstance(lists, Mapping) or not isinstance(sets, Mapping):
        raise StoreError(f"{where} has dicts under 'lists' and 'set', got {_short(patch)}")
    for key, entry in lists.items():
        ok = isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], list)
        if not (ok and isinstance(entry[0], int) and not isinstance(entry[0], bool) and entry[0] >= 0):
            raise StoreError(f"{where} changes list {key!r} as [index >= 0, items], got {_short(entry)}")
    if bad := {"session_id", VERSION_KEY} & set(sets):
        raise StoreError(f"{where} may not set {sorted(bad)}: a session keeps its id, the store owns the version")
    return dumps({"lists": dict(lists), "set": dict(sets)}, where)


def check_append(session_id: str, expected_version: int, summary: Summary) -> None:
    if not isinstance(session_id, str) or not session_id:
        raise StoreError(f"append needs a session id string, got {session_id!r}")
    if not isinstance(expected_version, int) or isinstance(expected_version, bool) or expected_version < 1:
        raise StoreError(f"session {session_id}: append(expected_version={expected_version!r}) extends a stored "
                         "version (>= 1); a new session is saved whole with save()")
    if not isinstance(summary, Summary):
        raise StoreError(f"session {session_id}: append needs a Summary (the columns list() shows), got {summary!r}")


def materialize(session_id: str, stored: Stored) -> JSONObject:
    """The snapshot ``load`` returns: the base with every patch applied, plus ``VERSION_KEY``."""
    snapshot = fold(session_id, stored)
    snapshot[VERSION_KEY] = stored.version
    return snapshot


def fold(session_id: str, stored: Stored) -> JSONObject:
    """The base with the patches applied, as :func:`lmchat.session.patches.apply` would, in O(base + patches).

    ``patches.apply`` copies each list it patches (a fresh snapshot per turn); here every object is freshly
    parsed and ours, so the lists are cut and extended in place instead: k patches cost O(k turns), not O(k n).
    Damaged records are a :class:`StoreCorrupt`.
    """
    check_versions(session_id, stored.version, stored.base_version)
    if len(stored.patches) != stored.version - stored.base_version:
        raise StoreCorrupt(f"session {session_id}: {len(stored.patches)} stored patches for versions "
                           f"{stored.base_version + 1}..{stored.version}: the records are inconsistent")
    snapshot = _parse(session_id, stored.base, f"base (version {stored.base_version})")
    if not isinstance(snapshot, dict):
        raise StoreCorrupt(f"session {session_id}: the stored base is not a JSON object")
    for n, text in enumerate(stored.patches, start=stored.base_version + 1):
        _apply(session_id, n, snapshot, _parse(session_id, text, f"patch of version {n}"))
    return snapshot


#: no store reaches this version honestly (a write a microsecond for 285 years): a larger one is damage, and
#: would overflow SQLite's 64-bit integers on the next write
MAX_VERSION = 2**53


def check_versions(session_id: str, version: object, base_version: object, where: str | None = None) -> None:
    """Stored versions are whole numbers, 1 <= base version <= version <= :data:`MAX_VERSION`: O(1), whatever
    a damaged row holds (no work in proportion to a version). ``where``: the store, as ``StoreError`` takes it."""
    top, base = (_whole(session_id, what, value, where)
                 for what, value in (("version", version), ("base version", base_version)))
    if not 1 <= base <= top <= MAX_VERSION:
        raise StoreCorrupt(f"session {session_id}: stored version {_short(version)} on a base of version "
                           f"{_short(base_version)}: a version is 1..{MAX_VERSION} and no older than its base",
                           where=where)


def _whole(session_id: str, what: str, value: object, where: str | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise StoreCorrupt(f"session {session_id}: its stored {what} is not a number: {_short(value)}", where=where)
    return value


def _apply(session_id: str, version: int, snapshot: JSONObject, patch: object) -> None:
    where = f"session {session_id}: the stored patch of version {version}"
    if not isinstance(patch, dict):
        raise StoreCorrupt(f"{where} is not a JSON object")
    lists, sets = patch.get("lists", {}), patch.get("set", {})
    if not isinstance(lists, dict) or not isinstance(sets, dict):
        raise StoreCorrupt(f"{where} has no dicts under 'lists' and 'set'")
    for key, entry in lists.items():
        if not (isinstance(entry, list) and len(entry) == 2):
            raise StoreCorrupt(f"{where} changes {key!r} with {_short(entry)}, not [index, items]")
        low, items = entry
        current = snapshot.get(key)
        if current is None:
            current = snapshot[key] = []
        if not isinstance(current, list) or not isinstance(items, list) or not isinstance(low, int) \
                or not 0 <= low <= len(current):
            raise StoreCorrupt(f"{where} does not fit the snapshot: {key!r} from {low!r} of "
                               f"{len(current) if isinstance(current, list) else type(current).__name__}")
        del current[low:]
        current.extend(items)
    snapshot.update(sets)


def _parse(session_id: str, text: str | bytes, what: str) -> object:
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise StoreCorrupt(f"session {session_id}: the stored {what} is not valid JSON: {exc}") from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


#: compaction is due once the patches' total size exceeds this many times the base's (see the module docstring)
COMPACT_AFTER = 2
#: ... and once they exceed this many characters (see the module docstring)
COMPACT_FLOOR = 8192


#: the background compactions of awaited appends (:meth:`RecordStore.aappend`) run one at a time: a burst of
#: them must not take every reader connection (nor the GIL) from the event loop that serves the turns
_COMPACTOR = ThreadPoolExecutor(1, thread_name_prefix="lmchat-compact")
#: (store, session) of the compactions queued or running there: one per session at a time
_COMPACTING: set[tuple[int, str]] = set()


def compactions_idle(timeout: float = 30.0) -> None:
    """Wait until the background compactions queued so far have run (tests; a store about to be copied)."""
    _COMPACTOR.submit(lambda: None).result(timeout)


def compaction_due(patch_chars: int, base_chars: int) -> bool:
    return patch_chars > max(COMPACT_AFTER * base_chars, COMPACT_FLOOR)


class RecordStore:
    """What the three stores share: append (check, encode, write, compact when due), load and compact.

    An implementation provides ``_append`` (the compare-and-set write of one
    encoded patch; returns the new version and whether compaction is due),
    ``_read`` (a consistent :class:`Stored`, or None) and ``_install`` (the
    compare-and-set of a compacted base on the tag it was read with).
    """

    #: reads are local and quick (no network round trip, no lock held across I/O): an event loop may make
    #: them itself, and the session manager then runs asyncio callers' turns on the loop
    loop_safe = False

    def append(self, session_id: str, patch: Mapping[str, object], *, expected_version: int, summary: Summary,
               token: str | None = None) -> int:
        check_append(session_id, expected_version, summary)
        text = encode_patch(session_id, patch)
        version, due = self._append(session_id, text, expected_version, summary, token or new_tag())
        if due:
            self._compact_after(session_id, version)
        return version

    async def aappend(self, session_id: str, patch: Mapping[str, object], *, expected_version: int,
                      summary: Summary, token: str | None = None) -> int:
        """:meth:`append` for an event loop: the write is awaited, never waited on; a compaction that is
        due runs in the background, in one worker thread for the process (it reads and folds the whole
        session, and the append is durable without it: the turn that crossed the threshold does not
        wait for it; :func:`compactions_idle` waits for them)."""
        check_append(session_id, expected_version, summary)
        text = encode_patch(session_id, patch)
        version, due = await self._append_soon(session_id, text, expected_version, summary, token or new_tag())
        if due and (id(self), session_id) not in _COMPACTING:
            _COMPACTING.add((id(self), session_id))
            _COMPACTOR.submit(self._compact_in_background, session_id, version)
        return version

    if TYPE_CHECKING:  # each store's own
        def save(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
                 token: str | None = None) -> int: ...

    async def asave(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
                    token: str | None = None) -> int:
        """``save`` for an event loop (here: in a worker thread)."""
        return await asyncio.to_thread(self.save, session_dict, expected_version=expected_version, token=token)

    def _compact_in_background(self, session_id: str, version: int) -> None:
        try:
            self._compact_after(session_id, version)
        finally:
            _COMPACTING.discard((id(self), session_id))

    def _compact_after(self, session_id: str, version: int) -> None:
        try:
            self.compact(session_id)
        except StoreError as exc:  # the append itself is durable: say so rather than fail the turn
            log.warning("session %s: compaction after version %d failed (the append stands): %s",
                        session_id, version, exc)

    def load(self, session_id: str) -> JSONObject | None:
        stored = self._read(session_id)
        return None if stored is None else materialize(session_id, stored)

    def compact(self, session_id: str) -> bool:
        stored = self._read(session_id)
        if stored is None or not stored.patches:
            return False
        text = dumps(fold(session_id, stored), f"session {session_id}")
        return self._install(session_id, stored.tag, stored.version, text,
                             sum(len(p) for p in stored.patches))

    def _append(self, session_id: str, patch: str, expected: int, summary: Summary, token: str) -> tuple[int, bool]:
        raise NotImplementedError

    async def _append_soon(self, session_id: str, patch: str, expected: int, summary: Summary,
                           token: str) -> tuple[int, bool]:
        """``_append`` for an event loop (here: in a worker thread)."""
        return await asyncio.to_thread(self._append, session_id, patch, expected, summary, token)

    def _read(self, session_id: str) -> Stored | None:
        raise NotImplementedError

    def _install(self, session_id: str, tag: str, at_version: int, base: str, folded_chars: int) -> bool:
        raise NotImplementedError
