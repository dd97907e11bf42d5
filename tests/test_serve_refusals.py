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

import sqlite3
import uuid

import pytest

pytest.importorskip("fastapi")

from .serve_helpers import InProcess  # noqa: E402

OWNER, OTHER = "sk-owner", "sk-other"
SESSION_LEN = 20_000  # characters: the echo backend has no tokenizer


def serve_args(db) -> tuple[str, ...]:
    return ("--template", "qwen2.5", "--store", f"sqlite:{db}", "--backend-option", "prefix=",
            "--session-len", str(SESSION_LEN))


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
