"""Issue 26, item 10, against real ``lmchat serve`` processes (echo backend, memory and SQLite stores).

Chat completions and the interactive API on the session of a Responses chain or a Conversation are refused
(409 ``session_owned_by_other_api``): the chain reads, lists its input items and continues as before.
"""
from __future__ import annotations

import itertools

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402

from .serve_helpers import Server  # noqa: E402

KEYS = tuple(f"sk-{n}" for n in range(64))
_next_key = itertools.count()
#: seconds per word of an answer (the echo backend's pace)
DELAY = "0.15"


def serve(store: str, tmp_path_factory, *extra: str, env: dict | None = None) -> Server:
    spec = "memory" if store == "memory" else f"sqlite:{tmp_path_factory.mktemp('idem')}/sessions.db"
    return Server("--template", "qwen2.5", "--store", spec, "--backend-option", "prefix=", "--backend-option",
                  f"delay={DELAY}", *extra, keys=KEYS, env=env)


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def server(request, tmp_path_factory):
    s = serve(request.param, tmp_path_factory)
    yield s
    s.stop()


@pytest.fixture
def key():
    """An API key of this test's own: its sessions are the only ones it lists."""
    return KEYS[next(_next_key)]


def http(server, key: str) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60)


def client(server, key: str):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=60)


def create(server, key: str, idem: str | None, stream: bool, **fields) -> dict:
    """``POST /v1/responses`` with the openai client: the response (the last event's when streamed) as JSON."""
    headers = {"Idempotency-Key": idem} if idem else {}
    c = client(server, key)
    if not stream:
        return c.responses.create(model="m", extra_headers=headers, **fields).model_dump()
    with c.responses.create(model="m", extra_headers=headers, stream=True, **fields) as events:
        final = [e for e in events if e.type in ("response.completed", "response.incomplete")]
    assert len(final) == 1
    return final[0].response.model_dump()


# ---------------------------------------------------------------------------------------------- item 10
def test_chat_and_interactive_on_a_chains_session_are_refused_and_the_chain_stays_whole(server, key):
    first = create(server, key, None, False, input="one")
    second = create(server, key, None, False, input="two", previous_response_id=first["id"])
    sid = first["id"].split("_")[1]
    c = client(server, key)
    for stream in (False, True):
        with pytest.raises(openai.ConflictError) as refused:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hijack"}], stream=stream,
                                      extra_headers={"X-Session-Id": sid})
        assert refused.value.code == "session_owned_by_other_api" and "Responses API" in refused.value.message
    with http(server, key) as h:
        for stream in (False, True):
            r = h.post("/chat/interactive", json={"session_id": sid, "prompt": "hijack", "interactive_mode": True,
                                                  "stream": stream})
            assert r.status_code == 409 and r.json()["error"]["code"] == "session_owned_by_other_api"
        assert h.get(f"/responses/{first['id']}").json()["output"][0]["content"][0]["text"] == "one"
        assert h.get(f"/responses/{second['id']}").json()["output"][0]["content"][0]["text"] == "two"
        items = h.get(f"/responses/{second['id']}/input_items")
        assert items.status_code == 200 and items.json()["data"][0]["content"][0]["text"] == "two"
        third = h.post("/responses", json={"model": "m", "input": "three", "previous_response_id": second["id"]})
        assert third.status_code == 200 and third.json()["id"] == f"resp_{sid}_2"
        assert third.json()["output"][0]["content"][0]["text"] == "three"
        assert h.get(f"/sessions/{sid}").json()["turns"] == 3


def test_chat_on_a_conversations_session_is_refused_and_its_items_stay(server, key):
    c = client(server, key)
    conv = c.conversations.create()
    c.responses.create(model="m", input="hello", conversation=conv.id)
    sid = conv.id[len("conv_"):]
    with pytest.raises(openai.ConflictError) as refused:
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hijack"}],
                                  extra_headers={"X-Session-Id": sid})
    assert "Conversations API" in refused.value.message
    assert [i.content[0].text for i in c.conversations.items.list(conv.id, order="asc")] == ["hello", "hello"]
    assert c.responses.create(model="m", input="again", conversation=conv.id).output_text == "again"


def test_responses_and_conversations_do_not_find_a_chat_session(server, key):
    c = client(server, key)
    sid = "0123456789abcdef" * 2  # shaped like a chain's session id
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "mine"}],
                              extra_headers={"X-Session-Id": sid})
    with http(server, key) as h:
        r = h.post("/responses", json={"model": "m", "input": "x", "previous_response_id": f"resp_{sid}_0"})
        assert r.status_code == 404
        r = h.post("/responses", json={"model": "m", "input": "x", "conversation": f"conv_{sid}"})
        assert r.status_code == 404
        assert h.get(f"/sessions/{sid}").json()["turns"] == 1


# ---------------------------------------------------------------------------------------------- the parts
def test_a_turn_asking_for_another_kind_of_session_changes_nothing():
    from lmchat import SessionManager
    from lmchat.backends import get_backend
    from lmchat.errors import SessionKindMismatch
    from lmchat.stores import MemoryStore

    store = MemoryStore()
    mgr = SessionManager(get_backend("echo", prefix=""), template="qwen2.5", store=store)
    sid = mgr.create(extra={"kind": "responses"})
    mgr.run_turn(sid, [{"role": "user", "content": "one"}], note={"n": 0}, kind="responses")
    before = store.load(sid)
    for kind in (None, "conversation"):
        with pytest.raises(SessionKindMismatch, match="Responses API"):
            mgr.run_turn(sid, [{"role": "user", "content": "two"}], kind=kind)
    with pytest.raises(SessionKindMismatch):
        mgr.run_turn(sid, history=[{"role": "user", "content": "another conversation"}], kind=None)
    assert store.load(sid) == before and mgr.get(sid).turns == 1
    mgr.run_turn(sid, [{"role": "user", "content": "two"}])  # no kind asked: any session (the manager's default)
    plain = mgr.create()
    assert mgr.run_turn(plain, [{"role": "user", "content": "x"}], kind=None).text == "x"


