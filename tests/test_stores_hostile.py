"""Hostile store rows: someone with access to the store (the SQLite file, the Redis keys) damages a session.

Every read of it does bounded work (no O(version) step) and fails with a typed ``StoreCorrupt`` (or a
``SnapshotError`` for a snapshot naming a template this lmchat does not know); ``lmchat serve`` answers each
route with 500 ``store_corrupt``, never a Python exception's name, and ``DELETE /v1/sessions/{id}`` removes the
damaged session.
"""
from __future__ import annotations

import json
import sqlite3
import time

import pytest

from lmchat import Session
from lmchat.errors import SnapshotError, StoreCorrupt
from lmchat.stores import MemoryStore, SQLiteStore

#: a read of a damaged row answers well within this (before: 9.6 s for a version of 30,000,000)
BOUNDED_SECONDS = 2.0

DAMAGE = ["version 2^62", "version 30,000,000", "version text", "version zero", "base ahead", "unknown template"]


def damage_sqlite(path, key: str, how: str) -> None:
    conn = sqlite3.connect(path, timeout=10)
    try:
        if how == "unknown template":
            conn.execute("UPDATE bases SET data = json_set(data, '$.template.name', 'no-such-template') WHERE id = ?",
                         (key,))
        elif how == "base ahead":
            conn.execute("UPDATE bases SET version = version + 5 WHERE id = ?", (key,))
        else:
            value = {"version 2^62": 2**62, "version 30,000,000": 30_000_000, "version text": "seven",
                     "version zero": 0}[how]
            conn.execute("UPDATE sessions SET version = ? WHERE id = ?", (value, key))
        conn.commit()
    finally:
        conn.close()


def damage_redis(url: str, prefix: str, key: str, how: str) -> None:
    import redis

    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        hash_key = f"{prefix}s:{key}"
        if how == "unknown template":
            data = json.loads(client.hget(hash_key, "data"))
            data["template"]["name"] = "no-such-template"
            client.hset(hash_key, "data", json.dumps(data))
        elif how == "base ahead":
            client.hincrby(hash_key, "base_version", 5)
        elif how == "wrong key type":
            client.delete(hash_key)
            client.set(hash_key, "not a hash")
        else:
            value = {"version 2^62": 2**62, "version 30,000,000": 30_000_000, "version text": "seven",
                     "version zero": 0}[how]
            client.hset(hash_key, "version", value)
    finally:
        client.close()


def damage_memory(store: MemoryStore, key: str, how: str) -> None:
    row = store._rows[key]  # the process's own memory: what a bug elsewhere in it could do
    if how == "unknown template":
        data = json.loads(row.base)
        data["template"]["name"] = "no-such-template"
        row.base = json.dumps(data)
    elif how == "base ahead":
        row.base_version += 5
    else:
        row.version = {"version 2^62": 2**62, "version 30,000,000": 30_000_000, "version text": "seven",
                       "version zero": 0}[how]


# ---------------------------------------------------------------------- the stores themselves
@pytest.fixture(params=["memory", "sqlite", "redis"])
def damaged_store(request, tmp_path):
    """(store, damage(key, how)) of each kind."""
    if request.param == "memory":
        store = MemoryStore()
        yield store, lambda key, how: damage_memory(store, key, how)
    elif request.param == "sqlite":
        path = tmp_path / "sessions.db"
        store = SQLiteStore(path)
        yield store, lambda key, how: damage_sqlite(path, key, how)
    else:
        pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
        from lmchat.stores.redis import RedisStore

        server, pre = request.getfixturevalue("redis_server"), request.getfixturevalue("prefix")
        store = RedisStore(server.url, prefix=pre)
        yield store, lambda key, how: damage_redis(server.url, pre, key, how)
    store.close()


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_row_fails_its_reads_quickly_with_store_corrupt_and_can_be_deleted(damaged_store, how):
    store, damage = damaged_store
    session = Session("qwen2.5")
    session.prompt("hi")
    session.commit("hello")
    store.save(session.to_dict(), expected_version=0)
    damage(session.session_id, how)
    started = time.monotonic()
    if how == "unknown template":
        data = store.load(session.session_id)  # the records are sound: the snapshot is not
        with pytest.raises(SnapshotError, match="no-such-template"):
            Session.from_dict(data)
    else:
        with pytest.raises(StoreCorrupt, match=session.session_id):
            store.load(session.session_id)
    assert time.monotonic() - started < BOUNDED_SECONDS
    if how.startswith("version") and how != "version 30,000,000" and not isinstance(store, MemoryStore):
        with pytest.raises(StoreCorrupt):
            store.version(session.session_id)
    store.delete(session.session_id)
    assert store.load(session.session_id) is None and store.version(session.session_id) == 0


def test_a_redis_session_key_of_another_type_is_store_corrupt_and_can_be_deleted(redis_server, prefix):
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
    from lmchat.stores.redis import RedisStore

    store = RedisStore(redis_server.url, prefix=prefix)
    try:
        session = Session("qwen2.5")
        store.save(session.to_dict(), expected_version=0)
        damage_redis(redis_server.url, prefix, session.session_id, "wrong key type")
        with pytest.raises(StoreCorrupt, match="damaged"):
            store.load(session.session_id)
        store.delete(session.session_id)
        assert store.load(session.session_id) is None
    finally:
        store.close()


# ---------------------------------------------------------------------- through `lmchat serve`'s app (in this process)
def _routes(sid: str) -> list[tuple[str, str, dict | None]]:
    return [
        ("GET", f"/v1/sessions/{sid}", None),
        ("GET", f"/v1/sessions/{sid}/export", None),
        ("POST", f"/v1/sessions/{sid}/fork", {}),
        ("POST", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                          "session_id": sid}),
        ("POST", "/v1/chat/interactive", {"session_id": sid, "prompt": "again", "interactive_mode": True}),
    ]


def _check_server(store_spec: str, damage, env: dict | None = None) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from .serve_helpers import InProcess

    args = ("--template", "qwen2.5", "--store", store_spec)
    sids = {how: f"damaged-{n}" for n, how in enumerate(DAMAGE)}
    server = InProcess(*args, env=env)
    try:
        for sid in sids.values():
            r = server.client().post("/v1/chat/interactive",
                                     json={"session_id": sid, "prompt": "hi", "interactive_mode": True})
            assert r.status_code == 200, r.text
        sound = server.client().post("/v1/sessions", json={"session_id": "sound"})
        assert sound.status_code == 201, sound.text
    finally:
        server.stop()
    for how, sid in sids.items():
        damage(sid, how)
    server = InProcess(*args, env=env)  # a new app after the first's shutdown: nothing of the sessions in its memory
    try:
        with server.client() as client:
            for how, sid in sids.items():
                for method, path, body in _routes(sid):
                    started = time.monotonic()
                    r = client.request(method, path, json=body)
                    elapsed = time.monotonic() - started
                    error = r.json().get("error") or {}
                    where = f"{how}: {method} {path}: {r.status_code} {r.text[:300]}"
                    assert r.status_code == 500 and error.get("code") == "store_corrupt", where
                    assert error.get("type") == "server_error" and "Error" not in error.get("message", ""), where
                    assert elapsed < BOUNDED_SECONDS, f"{where}: {elapsed:.1f} s"
                gone = client.delete(f"/v1/sessions/{sid}")
                assert gone.status_code == 200 and gone.json()["deleted"] is True, f"{how}: {gone.text}"
                assert client.get(f"/v1/sessions/{sid}").status_code == 404, how
            assert client.get("/v1/sessions").status_code == 200
            assert client.get("/v1/sessions/sound").status_code == 200  # the sound session is untouched
            listed = [s["id"] for s in client.get("/v1/sessions").json()["data"]]
            assert listed == ["sound"]
    finally:
        server.stop()


def test_serve_answers_damaged_sqlite_rows_with_store_corrupt_and_deletes_them(tmp_path):
    path = tmp_path / "sessions.db"
    _check_server(f"sqlite:{path}", lambda sid, how: damage_sqlite(path, sid, how))


def test_serve_answers_damaged_redis_rows_with_store_corrupt_and_deletes_them(own_redis):
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
    _check_server(own_redis.url, lambda sid, how: damage_redis(own_redis.url, "lmchat:", sid, how))
