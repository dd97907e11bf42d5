"""Issue 26, items 9 and 10, against real ``lmchat serve`` processes (echo backend, memory and SQLite stores).

9. A retry with the same Idempotency-Key that arrives while its first attempt still runs waits for it and is
   answered its result (or 409 ``request_in_progress`` with ``Retry-After`` past the server's wait): the turn
   never runs twice (Responses continuing a chain or branching off an older response, chat completions with a
   session id, the interactive API; streamed or not).
10. Chat completions and the interactive API on the session of a Responses chain or a Conversation are refused
    (409 ``session_owned_by_other_api``): the chain reads, lists its input items and continues as before.
"""
from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402

from lmchat.manager import TurnRequest  # noqa: E402

from .serve_helpers import Server, lines  # noqa: E402

KEYS = tuple(f"sk-{n}" for n in range(64))
_next_key = itertools.count()
#: seconds per word of an answer: LONG's 9 words take over a second, long enough to overlap two requests
DELAY = "0.15"
LONG = "a long question whose answer takes a while"
#: how long after the first attempt its retry is sent (the first one is running by then)
LAG = 0.3


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


def overlapped(first, retry):
    """``first()`` and, LAG seconds later while it runs, ``retry()``, in two threads: their results."""
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(first)
        time.sleep(LAG)
        assert not a.done()  # the retry overlaps its first attempt
        b = pool.submit(retry)
        return a.result(), b.result()


def sessions(server, key: str) -> list[str]:
    with http(server, key) as h:
        return [s["id"] for s in h.get("/sessions").json()["data"]]


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


# ---------------------------------------------------------------------------------------------- item 9
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_retry_of_a_running_continuation_is_answered_its_result_not_a_branch(server, key, stream):
    root = create(server, key, None, False, input="root")
    sid = root["id"].split("_")[1]
    a, b = overlapped(lambda: create(server, key, "cont-1", stream, input=LONG, previous_response_id=root["id"]),
                      lambda: create(server, key, "cont-1", stream, input=LONG, previous_response_id=root["id"]))
    assert a["id"] == b["id"] == f"resp_{sid}_1"
    assert a["output"][0]["content"][0]["text"] == b["output"][0]["content"][0]["text"] == LONG
    assert sessions(server, key) == [sid]  # no branch was made
    with http(server, key) as h:
        assert h.get(f"/sessions/{sid}").json()["turns"] == 2  # the turn ran once
        nxt = h.post("/responses", json={"model": "m", "input": "next", "previous_response_id": a["id"]}).json()
    assert nxt["id"] == f"resp_{sid}_2"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_retry_of_a_running_branch_is_answered_its_result_not_a_second_branch(server, key, stream):
    root = create(server, key, None, False, input="root")
    create(server, key, None, False, input="latest", previous_response_id=root["id"])  # root is older now
    a, b = overlapped(lambda: create(server, key, "branch-1", stream, input=LONG, previous_response_id=root["id"]),
                      lambda: create(server, key, "branch-1", stream, input=LONG, previous_response_id=root["id"]))
    assert a["id"] == b["id"] and a["id"].split("_")[1] != root["id"].split("_")[1]
    assert len(sessions(server, key)) == 2  # the chain and one branch


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_retry_of_a_running_chat_turn_waits_and_gets_its_answer(server, key, stream):
    messages = [{"role": "user", "content": LONG}]

    def chat():
        c = client(server, key)
        kw = dict(model="m", messages=messages, extra_headers={"X-Session-Id": "chat-1", "Idempotency-Key": "c-1"})
        if not stream:
            return c.chat.completions.create(**kw).choices[0].message.content
        return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **kw)
                       if ch.choices)

    assert overlapped(chat, chat) == (LONG, LONG)
    with http(server, key) as h:
        assert h.get("/sessions/chat-1").json()["turns"] == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_retry_of_a_running_interactive_turn_waits_and_gets_its_answer(server, key, stream):
    body = {"session_id": "inter-1", "prompt": LONG, "interactive_mode": True, "stream": stream}

    def turn():
        with http(server, key) as h:
            r = h.post("/chat/interactive", json=body, headers={"Idempotency-Key": "i-1"})
            assert r.status_code == 200, r.text
            return "".join(line["text"] for line in lines(r)) if stream else r.json()["text"]

    assert overlapped(turn, turn) == (LONG, LONG)
    with http(server, key) as h:
        assert h.get("/sessions/inter-1").json()["turns"] == 1


def test_a_retry_that_would_wait_too_long_is_409_request_in_progress_and_later_its_answer(tmp_path_factory):
    s = serve("sqlite", tmp_path_factory, env={"LMCHAT_IDEMPOTENCY_WAIT": "0.2"})
    try:
        k = KEYS[0]
        root = create(s, k, None, False, input="root")
        with http(s, k) as h:
            body = {"model": "m", "input": LONG, "previous_response_id": root["id"]}
            first = threading.Thread(target=lambda: h.post("/responses", json=body,
                                                           headers={"Idempotency-Key": "slow"}))
            first.start()
            time.sleep(LAG)
            assert first.is_alive()
            busy = h.post("/responses", json=body, headers={"Idempotency-Key": "slow"})
            assert busy.status_code == 409 and busy.json()["error"]["code"] == "request_in_progress"
            assert int(busy.headers["retry-after"]) >= 1
            first.join()
            again = h.post("/responses", json=body, headers={"Idempotency-Key": "slow"}).json()
        assert again["id"] == root["id"][:-1] + "1" and again["output"][0]["content"][0]["text"] == LONG
        assert sessions(s, k) == [root["id"].split("_")[1]]
    finally:
        s.stop()


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
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "one"}], note={"n": 0}, kind="responses"))
    before = store.load(sid)
    for kind in (None, "conversation"):
        with pytest.raises(SessionKindMismatch, match="Responses API"):
            mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "two"}], kind=kind))
    with pytest.raises(SessionKindMismatch):
        mgr.run_turn(TurnRequest(sid, history=[{"role": "user", "content": "another conversation"}], kind=None))
    assert store.load(sid) == before and mgr.get(sid).turns == 1
    # no kind asked: any session (the manager's default)
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "two"}]))
    plain = mgr.create()
    assert mgr.run_turn(TurnRequest(plain, [{"role": "user", "content": "x"}], kind=None)).text == "x"


def test_inflight_waits_for_the_holder_then_gives_up_with_request_in_progress():
    import asyncio

    from lmchat.errors import RequestInProgress
    from lmchat.serve.idempotency import Inflight, releasing

    async def main():
        inflight = Inflight(wait=0.2)
        release = await inflight.hold("a", "k")
        assert (await inflight.hold("b", "k"))() is None  # another API key: another key
        with pytest.raises(RequestInProgress) as busy:
            await inflight.hold("a", "k")
        assert busy.value.retry_after >= 1
        asyncio.get_running_loop().call_later(0.05, release)
        again = await inflight.hold("a", "k")  # waited for the release
        again()
        again()  # a second release does nothing

        async def events():
            yield "e"

        stream = releasing(events(), await inflight.hold("a", "s"))
        assert [e async for e in stream] == ["e"]
        await inflight.hold("a", "s")  # let go once the stream ended
        never = releasing(events(), await inflight.hold("a", "n"))
        del never  # a stream never iterated lets go once it is collected
        (await inflight.hold("a", "n"))()

    asyncio.run(main())
