"""A Responses chain or a conversation whose stored records this lmchat cannot read, on a real ``lmchat serve``
process over SQLite and Redis: a state or a note in a format it does not know (what a newer lmchat sharing the store
writes), a snapshot naming a template it does not know. Every Responses and Conversations route answers 500
``store_corrupt`` (before: ``internal_error``, and the connection was reset after it), DELETE removes the session,
and one client's requests keep their connection throughout."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")

import httpx  # noqa: E402

from lmchat.stores import SQLiteStore  # noqa: E402

from .serve_helpers import Server  # noqa: E402

ARGS = ("--template", "qwen2.5", "--backend-option", "prefix=")


def damage(store, sid: str, how: str) -> None:
    """Rewrite the session ``sid`` in ``store`` as another lmchat could have written it (a new version)."""
    data = store.load(sid)
    if how == "state format":
        data["extra"]["format"] = 99
    elif how == "note format":
        data["notes"][-1] = {**data["notes"][-1], "format": "next"}
    else:  # the snapshot names a template this lmchat does not know
        data["template"]["name"] = "no-such-template"
    store.save(data, expected_version=store.version(sid))


def made(api: httpx.Client) -> dict[str, str]:
    """A chain of two responses and a conversation with an answered item and a queued one."""
    first = api.post("/responses", json={"input": "one"}).json()
    second = api.post("/responses", json={"input": "two", "previous_response_id": first["id"]}).json()
    conv = api.post("/conversations", json={"items": [{"role": "user", "content": "hello"}]}).json()["id"]
    answered = api.post("/responses", json={"input": [], "conversation": conv}).json()
    api.post(f"/conversations/{conv}/items", json={"items": [{"role": "user", "content": "queued"}]})
    return {"response": second["id"], "chain": second["id"].split("_")[1], "conversation": conv,
            "conversation_sid": conv[5:], "item": answered["output"][0]["id"]}


def chain_routes(rid: str) -> list[tuple[str, str, dict | None, dict]]:
    """(method, path, body, headers) of every Responses route on the chain's latest response."""
    return [
        ("POST", "/responses", {"input": "x", "previous_response_id": rid}, {}),
        ("POST", "/responses", {"input": "x", "previous_response_id": rid, "stream": True}, {}),
        ("POST", "/responses", {"input": "x", "previous_response_id": rid}, {"Idempotency-Key": "retry-1"}),
        ("GET", f"/responses/{rid}", None, {}),
        ("GET", f"/responses/{rid}/input_items", None, {}),
    ]


def conversation_routes(cid: str, item: str) -> list[tuple[str, str, dict | None, dict]]:
    return [
        ("POST", "/responses", {"input": "x", "conversation": cid}, {}),
        ("GET", f"/conversations/{cid}", None, {}),
        ("POST", f"/conversations/{cid}", {"metadata": {"a": "b"}}, {}),
        ("GET", f"/conversations/{cid}/items", None, {}),
        ("POST", f"/conversations/{cid}/items", {"items": [{"role": "user", "content": "x"}]}, {}),
        ("GET", f"/conversations/{cid}/items/{item}", None, {}),
        ("DELETE", f"/conversations/{cid}/items/{item}", None, {}),
    ]


def check(api: httpx.Client, store, how: str, ports: set) -> None:
    """Make the records, damage them, then every route: store_corrupt; DELETE: gone."""
    ids = made(api)
    sound = api.post("/responses", json={"input": "sound"}).json()["id"]
    damage(store, ids["chain"], how)
    routes = chain_routes(ids["response"])
    if how != "note format":  # a conversation's routes read its state; most never read a note
        damage(store, ids["conversation_sid"], how)
        routes += conversation_routes(ids["conversation"], ids["item"])
    for method, path, body, headers in routes:
        r = api.request(method, path, json=body, headers=headers)
        ports.add(r.extensions["network_stream"].get_extra_info("client_addr"))
        where = f"{how}: {method} {path}: {r.status_code} {r.text[:300]}"
        error = json.loads(r.text).get("error") or {}
        assert r.status_code == 500 and error.get("code") == "store_corrupt", where
        assert error.get("type") == "server_error" and "Error" not in error.get("message", ""), where
    gone = api.delete(f"/responses/{ids['response']}")
    assert gone.status_code == 200 and gone.json()["deleted"] is True, f"{how}: {gone.text}"
    assert api.get(f"/responses/{ids['response']}").status_code == 404, how
    assert api.get(f"/sessions/{ids['chain']}").status_code == 404, how  # the whole session went
    if how != "note format":
        gone = api.delete(f"/conversations/{ids['conversation']}")
        assert gone.status_code == 200 and gone.json()["deleted"] is True, f"{how}: {gone.text}"
        assert api.get(f"/conversations/{ids['conversation']}").status_code == 404, how
    else:  # its conversation is sound and answers as ever
        assert api.get(f"/conversations/{ids['conversation']}/items").status_code == 200
    assert api.get(f"/responses/{sound}").status_code == 200, how  # the others are untouched
    ports.add(api.get("/models").extensions["network_stream"].get_extra_info("client_addr"))


def served(store_spec: str, store) -> None:
    server = Server(*ARGS, "--store", store_spec)
    try:
        ports: set = set()
        with server.client(base="/v1") as api:
            for how in ("state format", "note format", "unknown template"):
                check(api, store, how, ports)
        assert len(ports) == 1, ports  # one connection throughout: no answer closed it
    finally:
        server.stop()


def test_unreadable_responses_records_on_sqlite_answer_store_corrupt_and_can_be_deleted(tmp_path):
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    try:
        served(f"sqlite:{path}", store)
    finally:
        store.close()


def test_unreadable_responses_records_on_redis_answer_store_corrupt_and_can_be_deleted(own_redis):
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
    from lmchat.stores.redis import RedisStore

    store = RedisStore(own_redis.url, prefix="lmchat:")
    try:
        served(own_redis.url, store)
    finally:
        store.close()
