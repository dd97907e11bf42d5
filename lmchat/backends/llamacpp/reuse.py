"""The engine's prefix cache: where a new sequence's keys and values come from, and where a state goes.

A part of :class:`.engine.Engine`, run on its scheduler thread (docs/backends.md, "Where a session's KV
lives"): a dropped session's state is kept as an *orphan*, a prefix anybody may start from; a sequence that
would prefill more than it holds starts from the longest exact prefix of its prompt held anywhere (moved from
an idle orphan, copied from another sequence, restored from host memory or a KV file, every restore
checked); states pushed out of host memory, and every state at close, go to disk.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from .kvfiles import DiskEntry, DiskTier
from .kvformat import KVFileRejected
from .planning import prompt_ids
from .prefix import BLOCK, PrefixIndex, common_prefix
from .sequences import SequencePool, SessionState

if TYPE_CHECKING:
    from .hostcache import Saved
    from .jobs import Job
    from .steps import Steps
    from .vocab import LlamaVocab

log = logging.getLogger("lmchat.llamacpp")
#: the cheaper a tier is to start from, the lower: ties between holders of one prefix go to the cheapest
_RANK: dict[str | None, int] = {"session": 0, "resident": 1, "host": 2, "disk": 3}


class PrefixReuse:
    """What :class:`.engine.Engine` does as a prefix cache: the states of ``pool`` and the KV files of ``disk``,
    found by their ids in ``index``; ``sessions`` (the engine's, by session id) is read only. It keeps the
    orphans, what it published to a shared tier, and the misses."""

    def __init__(self, pool: SequencePool, index: PrefixIndex[SessionState | DiskEntry], vocab: LlamaVocab,
                 sessions: dict[str, SessionState], disk: DiskTier | None, n_ctx_seq: int) -> None:
        self.pool, self.index, self.vocab, self.sessions, self.disk = pool, index, vocab, sessions, disk
        self.n_ctx_seq = n_ctx_seq
        self.orphans: set[SessionState] = set()  # dropped sessions' states, kept as prefixes
        self.published: dict[str, DiskEntry] = {}  # a session's state in a shared tier, as this engine last put it
        self.misses: Counter[str] = Counter()  # held prefixes not used, by reason

    def persist(self, steps: Steps) -> None:
        """Every state the engine holds to disk, the most recently used last (the disk's LRU keeps those):
        the next process starts where this one stopped. ``steps`` settles the last answers first."""
        if self.disk is None:
            return
        try:
            while steps.unsettled() is not None:  # the last answers, prefilled again: all of them reusable
                steps.settle(None)
            for state in sorted({*self.sessions.values(), *self.orphans}, key=lambda s: s.tick):
                if state.exact < BLOCK or state.busy:
                    continue
                blob = self._owned(state, copy=False)  # at close nothing else writes to the host tier's buffers
                if blob is not None:
                    self.disk.put(state.ids, state.exact, blob)
                    self.disk.flush()  # a saved or joined state in memory at a time, not every state's at once
        except Exception:  # a cache that could not be kept must not stop the close
            log.exception("could not write the KV states to %s", self.disk.where)
        finally:
            self.disk.close()

    def orphan(self, state: SessionState) -> None:
        """Keep a dropped session's KV as a prefix nobody owns (or free it if it holds nothing exact)."""
        if state.exact < BLOCK:
            self.forget(state)
            return
        state.orphan = True  # its unfed ids stay: canonical ids of a drift rewind get settled all the same
        self.orphans.add(state)
        self.index.put(state)

    def forget(self, state: SessionState) -> None:
        self.index.remove(state)
        self.pool.release(state)
        self.orphans.discard(state)

    def _prompt(self, job: Job) -> list[int] | None:
        """The whole prompt of a job whose state holds nothing (None: one that holds something, or a request
        that cannot give it: :meth:`.engine.Engine._start` reports that)."""
        state = job.admitted
        if state.ids or state.saved is not None:
            return None
        if job.target is None:
            try:
                job.target = prompt_ids(job.request, self.vocab)
            except Exception:
                return None
        return job.target

    def behind_prefill(self, job: Job, active: list[Job]) -> bool:
        """Whether a new sequence's prompt shares a block or more with what another ``active`` job is prefilling right
        now, beyond what that job has computed: it then waits and copies the prefix once computed, instead
        of computing the same keys and values beside it (concurrent conversations that open with one system
        prompt compute it once)."""
        target = self._prompt(job)
        if target is None:
            return False
        for other in active:
            if other.fed >= len(other.todo):
                continue
            done = len(other.admitted.ids)
            ahead = other.admitted.ids + other.todo[other.fed:]
            if common_prefix(ahead, target, 0, len(target) - 1) >= max(done + BLOCK, BLOCK):
                return True
        return False

    def take_orphan(self, job: Job) -> bool:
        """A state new to the engine whose prompt continues an idle resident orphan takes its sequence:
        the stateless client's next request, at no copy. False: nothing to take."""
        target = self._prompt(job) if self.orphans else None
        if target is None:
            return False
        state = job.admitted
        donor, n, _ = self.index.longest(target, usable=lambda e: isinstance(e, SessionState) and e.orphan
                                         and e.seq is not None and not e.busy)
        if donor is None or donor.exact - n >= BLOCK:  # it holds more than this prompt needs: copy it later
            return False
        assert isinstance(donor, SessionState), "usable above takes only states"
        self.index.remove(donor)
        self.orphans.discard(donor)
        self.pool.move(donor, state)
        job.cached_from, job.adopted = "resident", True
        return True

    def spill(self, states: list[SessionState]) -> None:
        """States pushed out of host memory: to disk if there is one, then forgotten by the engine's
        tiers (a session keeps its SessionState: its next turn finds its prefix on disk, or prefills)."""
        for state in states:
            if self.disk is not None and state.saved is not None and not state.busy:
                # out of host memory: its own buffer is the file's (joined anew where it was held cut)
                entry, gone = self.disk.put(state.ids, state.exact, state.saved.whole())
                for old in gone:
                    self.index.remove(old)
                if entry is not None:
                    self.index.put(entry)
            state.saved = None
            self.forget(state)

    def publish(self, state: SessionState) -> None:
        """Put an idle session's state in the shared tier at once (another replica may take its next turn:
        after a kill, a drain or a redeploy); the file of its previous turn, a prefix of this one, goes."""
        disk = self.disk
        if disk is None or state.busy or state.tier is None or state.exact < BLOCK:
            return
        if self.sessions.get(state.session_id) is not state:
            return
        blob = self._owned(state)
        if blob is None:
            return
        entry, gone = disk.put(state.ids, state.exact, blob)
        for old in gone:
            self.index.remove(old)
        if entry is None:
            return
        self.index.put(entry)
        before = self.published.get(state.session_id)
        self.published[state.session_id] = entry
        if before is not None and before is not entry and not before.gone \
                and state.ids[:len(before.ids)] == before.ids:
            self.index.remove(before)
            disk.reject(before)

    def unpublish(self, session_id: str) -> None:
        """The session was dropped: its file stays, a prefix like its orphan, but is no longer its own."""
        self.published.pop(session_id, None)

    def _discover(self) -> None:
        """Index what other replicas published to (or removed from) a shared tier since the last look."""
        if self.disk is None:
            return
        new, gone = self.disk.refresh(self.n_ctx_seq)
        for entry in gone:
            self.index.remove(entry)
        for entry in new:
            self.index.put(entry)

    def reuse(self, job: Job) -> None:
        """Start the sequence from the longest exact prefix of its prompt held elsewhere, when that saves
        prefilling at least a block (and a sixteenth of what must be loaded for it)."""
        state = job.admitted
        if len(job.todo) >= BLOCK:
            self._discover()
        for _ in range(4):  # a file that fails its checks leaves the next best holder
            have = len(state.ids)
            if len(job.todo) < BLOCK:
                return
            target = state.ids + job.todo
            donor, n, blocked = self.index.longest(target, exclude=state, usable=_usable, rank=_rank)
            n = min(n, len(target) - 1)
            if blocked is not None:
                # _usable refuses a state only once it lost its tier, and that reset its ids: none matches
                assert isinstance(blocked, DiskEntry), "only a KV file is indexed and refused"
                self._missed(job, blocked.why_not, blocked.miss_kind)
            elif not have and self.disk is not None and (lost := self.disk.removed_prefix(target, n)) is not None:
                # a file removed at the start held a state from before it: only a sequence holding nothing yet
                # could have started from it (and only those pay for the look)
                self._missed(job, str(lost), lost.kind)
            if donor is None or n - have < max(BLOCK, len(donor.ids) // 16):
                return
            try:
                self._load(state, donor, target[:n])
            except KVFileRejected as exc:
                self._missed(job, str(exc), exc.kind)
                continue
            job.cached_from = donor.tier if isinstance(donor, DiskEntry) else donor.tier or "resident"
            job.todo = target[n:]
            return

    def _load(self, state: SessionState, donor: SessionState | DiskEntry, prefix: list[int]) -> None:
        """Make ``state``'s sequence hold ``prefix``, the first ids of what ``donor`` holds, from its KV;
        :class:`KVFileRejected` if it cannot (the sequence is then empty)."""
        pool = self.pool
        if isinstance(donor, DiskEntry):
            assert self.disk is not None, "a KV file is indexed only with a disk tier"
            try:
                blob = self.disk.read(donor, prefix)
            except KVFileRejected:
                self.index.remove(donor)
                raise
            if not pool.load(state, blob, len(donor.ids)):
                self.disk.reject(donor)
                self.index.remove(donor)
                raise KVFileRejected(f"llama.cpp did not restore KV file {donor.name} as written", "refused")
            self.disk.touch(donor)
            held = len(donor.ids)
        elif donor.seq is not None:
            held = pool.copy(donor.seq, state, len(donor.ids), len(prefix))
        else:
            held = len(donor.ids) if donor.saved is not None and self._restore(state, donor.saved, len(donor.ids)) \
                else 0
        if not held:
            raise KVFileRejected("the KV of another sequence could not be copied", "copy failed")
        state.ids = donor.ids[:held]
        pool.truncate(state, len(prefix))
        if len(state.ids) != len(prefix):
            raise KVFileRejected("this model's memory cannot be cut back to a shared prefix", "cannot cut")

    def _restore(self, state: SessionState, saved: Saved, n_held: int) -> bool:
        with self.pool.host.viewed(saved) as whole:
            return self.pool.load(state, whole, n_held)

    def _owned(self, state: SessionState, copy: bool = True) -> bytearray | None:
        """The whole state ``state`` holds, for a KV file written from it in the background: a buffer nothing else
        writes to, unless not ``copy`` (the host tier's own, which it restores from, cuts and reuses)."""
        if state.seq is not None:
            return self.pool.save(state.seq)
        return None if state.saved is None else state.saved.whole(copy=copy)

    def _missed(self, job: Job, reason: str | None, kind: str) -> None:
        job.miss = reason
        self.misses[kind] += 1
        log.info("session %s: %s; prefilling instead", job.session_id, reason)

    def cached(self, session_id: str, ids: list[int]) -> tuple[int, str | None]:
        """What a turn of ``session_id`` on the prompt ``ids`` would reuse, and from where (loads nothing)."""
        state = self.sessions.get(session_id)
        own, where = 0, None
        if state is not None and state.tier is not None:
            own = common_prefix(state.ids, ids, 0, min(state.kept, len(ids) - 1))
            where = "session" if state.seq is not None else "host"
        donor, n, _ = self.index.longest(ids, exclude=state, usable=_usable, rank=_rank)
        n = min(n, len(ids) - 1)
        if donor is not None and n > own:
            return n, donor.tier
        return own, where if own else None

    def reset_prefix_cache(self, disk: bool = False) -> int:
        """Forget every orphan (and with ``disk``, every KV file); sessions keep their own KV. Returns how
        many entries went."""
        gone = list(self.orphans)
        for state in gone:
            if not state.busy:
                self.forget(state)
        n = len(gone)
        if disk and self.disk is not None:
            for entry in list(self.disk.entries.values()):
                self.index.remove(entry)
                self.disk.reject(entry)
                n += 1
            self.disk.flush()
        return n


def _usable(entry: SessionState | DiskEntry) -> bool:
    if isinstance(entry, DiskEntry):
        return entry.why_not is None and not entry.gone
    return entry.tier is not None


def _rank(entry: SessionState | DiskEntry) -> int:
    return _RANK.get(entry.tier, len(_RANK))
