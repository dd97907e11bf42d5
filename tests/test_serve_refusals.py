"""Issue 35, item 1 and part of item 9: a request the server refuses (any 4xx or 5xx) changes nothing stored, in
memory or in the store, so nothing after a restart either.

1. The interactive API's ways of ending or stopping a session (``interactive_mode: false``, an empty prompt,
   ``cancel``, ``stop: true``) on the session of a Responses chain are refused (409
   ``session_owned_by_other_api``) like its turns, and the chain keeps every response; a turn refused with
   ``interactive_mode: false`` (a prompt over the limit, one that does not fit, a bad message or field) does not
   end its session. Each case seeds a session and a chain, sends the refused request, then reads both back
   through the API: the same, also after ``lmchat serve`` restarts on its SQLite file.
9. No error body names a server file (the SQLite store's path); a conversation holds at most 100,000 items, as a
   response's input; an interactive turn retried with its Idempotency-Key after a 503 (Redis stalled: SIGSTOP) is
   stored once, and a turn that failed so does not end its session.
"""
from __future__ import annotations

import signal
import sqlite3
import threading
import time
import uuid

import pytest

pytest.importorskip("fastapi")

from lmchat.validation import DEFAULT_MAX_CHARS, MAX_MESSAGES  # noqa: E402

from .serve_helpers import InProcess, Server, lines  # noqa: E402

OWNER, OTHER = "sk-owner", "sk-other"
SESSION_LEN = 20_000  # characters: the echo backend has no tokenizer
BIG = "x" * (DEFAULT_MAX_CHARS + 1)
OVER = "word " * (SESSION_LEN // 4)  # within the text limit, but more than the session holds


def serve_args(db) -> tuple[str, ...]:
    return ("--template", "qwen2.5", "--store", f"sqlite:{db}", "--backend-option", "prefix=",
            "--session-len", str(SESSION_LEN))


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    s = InProcess(*serve_args(tmp_path_factory.mktemp("refusals") / "sessions.db"), keys=(OWNER, OTHER))
    yield s
    s.stop()


def seed(server) -> dict:
    """A plain session of two interactive turns and a chain of two responses, the owner's."""
    plain = f"plain-{uuid.uuid4().hex[:8]}"
    with server.client(OWNER, base="/v1") as api:
        for prompt in ("one", "two"):
            r = api.post("/chat/interactive", json={"session_id": plain, "prompt": prompt, "interactive_mode": True})
            assert r.status_code == 200, r.text
        first = api.post("/responses", json={"model": "m", "input": "one"})
        assert first.status_code == 200, first.text
        second = api.post("/responses", json={"model": "m", "input": "two",
                                               "previous_response_id": first.json()["id"]})
        assert second.status_code == 200, second.text
    ids = [first.json()["id"], second.json()["id"]]
    return {"plain": plain, "chain": ids[0].split("_")[1], "responses": ids}


def state(server, seeded: dict) -> dict:
    """Everything the API shows of the seeded session and chain (every read must answer 200), once what the server
    would do in the background after a response (an interactive session's end) has run."""
    server.settle()
    with server.client(OWNER, base="/v1") as api:
        reads = {"plain": api.get(f"/sessions/{seeded['plain']}/export"),
                 "chain": api.get(f"/sessions/{seeded['chain']}/export"),
                 "input_items": api.get(f"/responses/{seeded['responses'][1]}/input_items")}
        reads.update({rid: api.get(f"/responses/{rid}") for rid in seeded["responses"]})
    failed = {name: (r.status_code, r.text[:300]) for name, r in reads.items() if r.status_code != 200}
    assert not failed, failed
    return {name: r.json() for name, r in reads.items()}


#: (id, target, API key, fields, status, code): refused interactive requests at the seeded session (``plain``) or
#: the chain's (``chain``); ``None``: session_id -1
REFUSED = [
    ("chain end with a prompt", "chain", OWNER, {"prompt": "hijack"}, 409, "session_owned_by_other_api"),
    ("chain end streamed", "chain", OWNER, {"prompt": "hijack", "stream": True}, 409, "session_owned_by_other_api"),
    ("chain turn", "chain", OWNER, {"prompt": "hijack", "interactive_mode": True}, 409, "session_owned_by_other_api"),
    ("chain empty prompt", "chain", OWNER, {"prompt": ""}, 409, "session_owned_by_other_api"),
    ("chain empty list", "chain", OWNER, {"prompt": []}, 409, "session_owned_by_other_api"),
    ("chain cancel", "chain", OWNER, {"cancel": True, "interactive_mode": True}, 409, "session_owned_by_other_api"),
    ("chain stop true", "chain", OWNER, {"stop": True}, 409, "session_owned_by_other_api"),
    ("chain end by another key", "chain", OTHER, {"prompt": ""}, 404, "session_not_found"),
    ("end with too long a prompt", "plain", OWNER, {"prompt": BIG}, 400, "string_above_max_length"),
    ("end streamed too long", "plain", OWNER, {"prompt": BIG, "stream": True}, 400, "string_above_max_length"),
    ("end with a message too long", "plain", OWNER, {"prompt": [{"role": "user", "content": BIG}]}, 400,
     "string_above_max_length"),
    ("end with a prompt that does not fit", "plain", OWNER, {"prompt": OVER}, 400, "context_length_exceeded"),
    ("end streamed, does not fit", "plain", OWNER, {"prompt": OVER, "stream": True}, 400, "context_length_exceeded"),
    ("end with a bad role", "plain", OWNER, {"prompt": [{"role": "wizard", "content": "x"}]}, 400, None),
    ("end with a message not an object", "plain", OWNER, {"prompt": ["x"]}, 400, "invalid_value"),
    ("end with ignore_eos", "plain", OWNER, {"prompt": "x", "ignore_eos": True}, 400, "unsupported_value"),
    ("end with a budget of 0", "plain", OWNER, {"prompt": "x", "request_output_len": 0}, 400, "invalid_value"),
    ("end with a negative temperature", "plain", OWNER, {"prompt": "x", "temperature": -1}, 400, "invalid_value"),
    ("end with a top_p of 0", "plain", OWNER, {"prompt": "x", "top_p": 0}, 400, "invalid_value"),
    ("interactive_mode a string", "plain", OWNER, {"prompt": "", "interactive_mode": "no"}, 400, "invalid_value"),
    ("a number as prompt", "plain", OWNER, {"prompt": 5}, 400, "invalid_value"),
    ("a number as stop", "plain", OWNER, {"prompt": "x", "stop": 1}, 400, "invalid_value"),
    ("cancel a string", "plain", OWNER, {"prompt": "", "cancel": "yes"}, 400, "invalid_value"),
    ("end by another key", "plain", OTHER, {"prompt": ""}, 404, "session_not_found"),
    ("cancel by another key", "plain", OTHER, {"cancel": True}, 404, "session_not_found"),
    ("end session -1", None, OWNER, {"prompt": ""}, 400, "invalid_request"),
    ("cancel session -1", None, OWNER, {"cancel": True}, 400, "invalid_request"),
]


def refuse(server, seeded: dict, target: str | None, key: str, fields: dict, status: int, code: str | None) -> None:
    body = {"session_id": -1 if target is None else seeded[target], "interactive_mode": False, **fields}
    with server.client(key, base="/v1") as api:
        r = api.post("/chat/interactive", json=body)
    assert r.status_code == status, r.text[:500]
    if code is not None:
        assert r.json()["error"]["code"] == code, r.text[:500]


@pytest.mark.parametrize(("target", "key", "fields", "status", "code"), [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_a_refused_interactive_request_changes_nothing(app, target, key, fields, status, code):
    seeded = seed(app)
    before = state(app, seeded)
    refuse(app, seeded, target, key, fields, status, code)
    assert state(app, seeded) == before
    # and the session still takes turns, then ends when asked, as before the refusal
    with app.client(OWNER, base="/v1") as api:
        r = api.post("/chat/interactive", json={"session_id": seeded["plain"], "prompt": "three"})
        assert r.status_code == 200 and r.json()["ended"] is True
        assert api.get(f"/sessions/{seeded['plain']}").status_code == 404


def test_every_refusal_changes_nothing_after_a_restart_either(tmp_path):
    db = tmp_path / "sessions.db"
    server = Server(*serve_args(db), keys=(OWNER, OTHER))
    try:
        seeded = seed(server)
        before = state(server, seeded)
        for _, target, key, fields, status, code in REFUSED:
            refuse(server, seeded, target, key, fields, status, code)
        assert state(server, seeded) == before
    finally:
        server.stop()
    server = Server(*serve_args(db), keys=(OWNER, OTHER))
    try:
        assert state(server, seeded) == before
    finally:
        server.stop()


def test_a_turn_refused_with_interactive_mode_false_leaves_the_session_to_its_next_turn(app):
    seeded = seed(app)
    with app.client(OWNER, base="/v1") as api:
        refused = api.post("/chat/interactive", json={"session_id": seeded["plain"], "prompt": BIG})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "prompt"
        assert api.get(f"/sessions/{seeded['plain']}").json()["turns"] == 2
        kept = api.post("/chat/interactive", json={"session_id": seeded["plain"], "prompt": "three",
                                                   "interactive_mode": True})
        assert kept.json()["text"] == "three" and api.get(f"/sessions/{seeded['plain']}").json()["turns"] == 3
        # a first turn (session_id -1) that is refused leaves no session behind
        sessions = len(api.get("/sessions").json()["data"])
        new = api.post("/chat/interactive", json={"session_id": -1, "prompt": BIG, "interactive_mode": True})
        assert new.status_code == 400 and len(api.get("/sessions").json()["data"]) == sessions


def test_deleting_a_chains_session_as_a_conversation_is_404_and_the_chain_stays(app):
    seeded = seed(app)
    before = state(app, seeded)
    with app.client(OWNER, base="/v1") as api:
        r = api.delete(f"/conversations/conv_{seeded['chain']}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "conversation_not_found"
    assert state(app, seeded) == before


# ---------------------------------------------------------------------------------------------- item 9
def test_a_conversation_holds_at_most_as_many_items_as_a_response_takes(app):
    item = {"type": "message", "role": "user", "content": "x"}
    with app.client(OWNER, base="/v1", timeout=300) as api:
        too_many = api.post("/conversations", json={"items": [item] * (MAX_MESSAGES + 1)})
        assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "items"
        cid = api.post("/conversations", json={"items": [item] * (MAX_MESSAGES - 25)}).json()["id"]
        assert api.post(f"/conversations/{cid}/items", json={"items": [item] * 20}).status_code == 200
        latest = api.get(f"/conversations/{cid}/items", params={"limit": 1}).json()
        over = api.post(f"/conversations/{cid}/items", json={"items": [item] * 6})
        assert over.status_code == 400 and over.json()["error"]["param"] == "items"
        assert f"holds {MAX_MESSAGES - 5} items" in over.json()["error"]["message"]
        assert api.get(f"/conversations/{cid}/items", params={"limit": 1}).json() == latest  # nothing added
        assert api.post(f"/conversations/{cid}/items", json={"items": [item] * 5}).status_code == 200  # 100,000
        assert api.post(f"/conversations/{cid}/items", json={"items": [item]}).status_code == 400


def test_no_error_body_names_the_stores_file(tmp_path, caplog):
    db = tmp_path / "private-folder" / "sessions.db"
    server = InProcess(*serve_args(db), keys=(OWNER, OTHER))
    try:
        seeded = seed(server)
        with sqlite3.connect(db) as conn:  # a damaged row: its version is no number
            assert conn.execute("UPDATE sessions SET version = 'seven' WHERE id LIKE ?",
                                (f"%/{seeded['plain']}",)).rowcount == 1
        with server.client(OWNER, base="/v1") as api, caplog.at_level("WARNING", logger="lmchat.serve"):
            replies = [api.get(f"/sessions/{seeded['plain']}"),
                       api.post("/chat/interactive", json={"session_id": seeded["plain"], "prompt": "x"})]
            server.http.app.state.manager.store.close()  # a request that comes as the server shuts down
            replies += [api.get(f"/sessions/{seeded['chain']}"), api.get(f"/responses/{seeded['responses'][0]}"),
                        api.post("/chat/interactive", json={"session_id": "new", "prompt": "x"})]
        assert [r.status_code for r in replies] == [500, 500, 503, 503, 503]
        assert [r.json()["error"]["code"] for r in replies[:3]] == ["store_corrupt", "store_corrupt",
                                                                    "store_unavailable"]
        assert "is not a number" in replies[0].json()["error"]["message"]
        assert "the store is closed" in replies[2].json()["error"]["message"]
        for r in replies:
            assert str(tmp_path) not in r.text and "sessions.db" not in r.text, r.text
        assert str(db) in caplog.text  # the operator's log names the file
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- Redis stalled
#: seconds per token of an answer: PROMPT's takes about 2 s, and the store stalls at STALL_AFTER, mid-answer
DELAY = "0.05"
PROMPT = " ".join(f"w{n}" for n in range(12))
STALL_AFTER = 0.6


@pytest.fixture
def redis_server_process(own_redis):
    # a stalled Redis fails a write after 2 x 1 s (the timeout, retried once by redis-py), not the default 2 x 2 s
    s = Server("--template", "qwen2.5", "--store", f"{own_redis.url}?socket_timeout=1",
               "--backend-option", "prefix=", "--backend-option", f"delay={DELAY}")
    yield s, own_redis
    s.stop()


def stalled(redis, send):
    """``send()`` while Redis stalls (SIGSTOP) from STALL_AFTER seconds on; Redis goes on once it answered."""
    timer = threading.Timer(STALL_AFTER, lambda: redis.proc.send_signal(signal.SIGSTOP))
    timer.start()
    try:
        return send()
    finally:
        timer.cancel()
        redis.proc.send_signal(signal.SIGCONT)


def test_an_interactive_turn_retried_after_its_503_is_stored_once(redis_server_process):
    server, redis = redis_server_process
    with server.client(timeout=60) as http:
        http.post("/v1/chat/interactive", json={"session_id": "named", "prompt": "one", "interactive_mode": True})
        for sid, key in (("named", "retry-named"), (-1, "retry-new")):
            body = {"session_id": sid, "prompt": PROMPT, "interactive_mode": True}
            first = stalled(redis, lambda: http.post("/v1/chat/interactive", json=body,  # noqa: B023
                                                     headers={"Idempotency-Key": key}))  # noqa: B023
            assert first.status_code == 503 and first.json()["error"]["code"] == "store_timeout", first.text
            assert f"127.0.0.1:{redis.port}" not in first.text  # the store's host:port is not told
            retry = http.post("/v1/chat/interactive", json=body, headers={"Idempotency-Key": key})
            assert retry.status_code == 200 and retry.json()["text"] == PROMPT
        sessions = {s["id"]: s["turns"] for s in http.get("/v1/sessions").json()["data"]}
        # the named session has its first turn and the retried one, once; session -1 made one session, not two
        assert sessions.pop("named") == 2 and list(sessions.values()) == [1], sessions
        assert http.get(f"/v1/sessions/{retry.json()['session_id']}").json()["turns"] == 1


def test_a_turn_that_fails_with_interactive_mode_false_does_not_end_its_session(redis_server_process):
    server, redis = redis_server_process
    with server.client(timeout=60) as http:
        http.post("/v1/chat/interactive", json={"session_id": "ending", "prompt": "one", "interactive_mode": True})
        for stream in (False, True):
            body = {"session_id": "ending", "prompt": PROMPT, "stream": stream}
            key = f"end-{stream}"

            def send():
                if not stream:  # noqa: B023
                    return http.post("/v1/chat/interactive", json=body, headers={"Idempotency-Key": key})  # noqa: B023
                with http.stream("POST", "/v1/chat/interactive", json=body,  # noqa: B023
                                 headers={"Idempotency-Key": key}) as r:  # noqa: B023
                    return lines(r)[-1]

            failed = stalled(redis, send)
            if stream:  # the status line was out: the error is the stream's last line
                assert failed["finish_reason"] == "error" and failed["error"]["code"] == "store_timeout", failed
            else:
                assert failed.status_code == 503 and failed.json()["error"]["code"] == "store_timeout", failed.text
            assert f"127.0.0.1:{redis.port}" not in str(failed if stream else failed.text)
            time.sleep(0.5)  # an end would have run by now
            got = http.get("/v1/sessions/ending")
            assert got.status_code == 200, got.text  # the session stays (with the turn if its write landed)
        # the retry is answered the stored turn, and then ends the session
        retry = http.post("/v1/chat/interactive", json={"session_id": "ending", "prompt": PROMPT},
                          headers={"Idempotency-Key": "end-True"})
        assert retry.status_code == 200 and retry.json()["ended"] is True and retry.json()["text"] == PROMPT
        assert http.get("/v1/sessions/ending").status_code == 404
