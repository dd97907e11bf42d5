"""The Redis store against a real redis-server: protocol, compare-and-set across clients, TTL, outages."""
from __future__ import annotations

import threading
import time

import pytest
import redis

from lmchat import Session
from lmchat.errors import StoreConflict, StoreError
from lmchat.stores import VERSION_KEY, SQLiteStore, open_store
from lmchat.stores.redis import RedisStore

from .redis_fixtures import own_redis, prefix, redis_server  # noqa: F401  (fixtures)


def conversation(first: str, turns: int = 1, session_id: str | None = None, owner: str | None = None) -> dict:
    session = Session("qwen2.5", system="Be brief.", session_id=session_id)
    for i in range(turns):
        session.prompt(first if i == 0 else f"question {i}")
        session.commit(f"answer {i}")
    data = session.to_dict()
    if owner is not None:
        data["owner"] = owner
    return data


@pytest.fixture
def store(redis_server, prefix):  # noqa: F811
    s = RedisStore(redis_server.url, prefix=prefix)
    yield s
    s.close()


def test_round_trip_versions_and_compare_and_set(store):
    data = conversation("What is the capital of France?", turns=2)
    sid = data["session_id"]
    assert store.version(sid) == 0 and store.load(sid) is None
    assert store.save(data, expected_version=0) == 1
    back = store.load(sid)
    assert back.pop(VERSION_KEY) == 1 and back == data
    assert Session.from_dict(back).context == Session.from_dict(data).context
    assert store.save(data) == 2  # no expectation: unconditional
    with pytest.raises(StoreConflict) as info:
        store.save(data, expected_version=1)
    assert (info.value.expected, info.value.actual) == (1, 2)
    with pytest.raises(StoreConflict):
        store.save(data, expected_version=0)
    assert store.version(sid) == 2


def test_list_latest_owner_and_delete(store):
    a = conversation("first question", turns=3, owner="o1")
    b = conversation("second", owner="o2")
    store.save(a)
    store.save(b)
    assert [i.id for i in store.list()] == [b["session_id"], a["session_id"]]
    assert store.latest() == b["session_id"]
    info = store.list(owner="o1")[0]
    assert (info.id, info.title, info.turns, info.template, info.version, info.owner) == (
        a["session_id"], "first question", 3, "qwen2.5", 1, "o1")
    assert store.list(owner="nobody") == []
    store.save(a)  # saving again makes it the latest
    assert store.latest() == a["session_id"] and len(store.list(limit=1)) == 1
    store.save({**a, "owner": "o3"})  # a new owner: it leaves the old owner's list
    assert store.list(owner="o1") == [] and [i.id for i in store.list(owner="o3")] == [a["session_id"]]
    store.delete(a["session_id"])
    store.delete("absent")
    assert [i.id for i in store.list()] == [b["session_id"]] and store.list(owner="o3") == []
    with pytest.raises(StoreError):
        store.save({"messages": []})


def test_two_clients_never_both_extend_one_version(redis_server, prefix):  # noqa: F811
    """Replicas racing on the same version: exactly one save lands, the others conflict."""
    replicas = [RedisStore(redis_server.url, prefix=prefix) for _ in range(6)]
    data = conversation("shared")
    sid = data["session_id"]
    replicas[0].save(data)
    barrier = threading.Barrier(len(replicas))
    outcomes = []

    def race(store, n):
        barrier.wait()
        try:
            outcomes.append(store.save({**data, "counter": n}, expected_version=1))
        except StoreConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=race, args=(s, n)) for n, s in enumerate(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(o for o in outcomes if isinstance(o, int)) == [2]
    assert sum(isinstance(o, StoreConflict) for o in outcomes) == len(replicas) - 1
    assert replicas[1].version(sid) == 2
    for s in replicas:
        s.close()


def test_load_and_save_loops_never_lose_an_update(redis_server, prefix):  # noqa: F811
    stores = [RedisStore(redis_server.url, prefix=prefix) for _ in range(4)]
    data = conversation("counter")
    sid = data["session_id"]
    stores[0].save(data)

    def work(store):
        for _ in range(20):
            while True:
                d = store.load(sid)
                version = d.pop(VERSION_KEY)
                d["counter"] = d.get("counter", 0) + 1
                try:
                    store.save(d, expected_version=version)
                    break
                except StoreConflict:
                    continue

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = stores[0].load(sid)
    assert final["counter"] == 80 and final[VERSION_KEY] == 81


def test_a_retried_save_finds_its_own_write(store):
    """The script recognises its token: a retry after a lost reply is not a false conflict."""
    data = conversation("retry")
    assert store.save(data, expected_version=0, token="token-1") == 1
    assert store.save(data, expected_version=0, token="token-1") == 1  # as redis-py's retry would send it
    with pytest.raises(StoreConflict):
        store.save(data, expected_version=0, token="token-2")  # another writer: a conflict


def test_ttl_expires_sessions_and_list_forgets_them(redis_server, prefix):  # noqa: F811
    store = RedisStore(redis_server.url, prefix=prefix, ttl=0.3)
    kept = RedisStore(redis_server.url, prefix=prefix)  # no ttl: persists
    short, long_ = conversation("short-lived"), conversation("kept")
    store.save(short)
    kept.save(long_)
    assert {i.id for i in store.list()} == {short["session_id"], long_["session_id"]}
    time.sleep(0.5)
    assert store.load(short["session_id"]) is None and store.version(short["session_id"]) == 0
    assert [i.id for i in store.list()] == [long_["session_id"]]
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert raw.zrange(f"{prefix}index", 0, -1) == [long_["session_id"]]  # the expired id was pruned
    assert raw.ttl(f"{prefix}s:{long_['session_id']}") == -1
    raw.close()


def test_an_outage_raises_store_error_and_recovers(own_redis):  # noqa: F811
    store = RedisStore(own_redis.url, timeout=1.0)
    data = conversation("before the outage")
    store.save(data)
    own_redis.kill()
    for call in (lambda: store.save(data), lambda: store.load(data["session_id"]), store.list,
                 lambda: store.version("x"), lambda: store.delete("x")):
        with pytest.raises(StoreError, match=f"Redis at {own_redis.url}.*is Redis running"):
            call()
    own_redis.start()  # same port, same append-only file
    assert store.load(data["session_id"])[VERSION_KEY] == 1  # pooled dead sockets are replaced
    assert store.save(data, expected_version=1) == 2
    store.close()


def test_open_store_specs(redis_server, tmp_path):  # noqa: F811
    s = open_store(redis_server.url, prefix="spec:")
    assert isinstance(s, RedisStore) and s.prefix == "spec:"
    s.close()
    for spec in (f"sqlite:{tmp_path}/a.db", f"sqlite://{tmp_path}/b.db", str(tmp_path / "c.db")):
        s = open_store(spec)
        assert isinstance(s, SQLiteStore) and s.path.startswith(str(tmp_path))
        s.close()
    with pytest.raises(StoreError, match="not a Redis URL"):
        RedisStore("redis://host:notaport/0")
