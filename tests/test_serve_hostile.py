"""A hostile client: every malformed request gets a 4xx in OpenAI's error shape with a code, and the
session it aimed at is byte-identical afterwards (in the store, and as the server shows it)."""
from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("fastapi")

from .serve_helpers import InProcess  # noqa: E402

KEY = "hostile-key"
SID = "target"
GOOD = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"}]


def nested(depth: int, leaf="x"):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def chat(**fields):
    return ("/v1/chat/completions", {"messages": GOOD, "session_id": SID, **fields})


def interactive(**fields):
    return ("/v1/chat/interactive", {"prompt": "hi", "session_id": SID, "interactive_mode": True, **fields})


RAW = {  # bodies that are not JSON a Python client could even write
    "infinity": '{"messages": [{"role": "user", "content": "hi"}], "session_id": "target", "temperature": Infinity}',
    "nan": '{"messages": [{"role": "user", "content": "hi"}], "session_id": "target", "top_p": NaN}',
    "lone surrogate": '{"messages": [{"role": "user", "content": "\\ud800"}], "session_id": "target"}',
    "surrogate key": '{"messages": [{"role": "user", "content": "x", "\\udfff": 1}], "session_id": "target"}',
    "not json": '{"messages": [',
    "too deep": '{"messages": ' + "[" * 5000 + "]" * 5000 + ', "session_id": "target"}',
    "array": "[1, 2, 3]",
    "empty": "",
}

CASES = {
    "temperature negative": chat(temperature=-1), "temperature huge": chat(temperature=1e300),
    "temperature text": chat(temperature="0.5"), "temperature bool": chat(temperature=True),
    "top_p zero": chat(top_p=0), "top_p two": chat(top_p=2), "top_k negative": chat(top_k=-1),
    "top_k float": chat(top_k=1.5), "top_k text": chat(top_k="3"),
    "max_tokens zero": chat(max_tokens=0), "max_tokens 1e100": chat(max_tokens=1e100),
    "max_tokens text": chat(max_tokens="10"), "max_tokens bool": chat(max_tokens=True),
    "seed negative": chat(seed=-1), "seed huge": chat(seed=2**70), "seed text": chat(seed="x"),
    "stop number": chat(stop=1), "stop numbers": chat(stop=[1]), "stop object": chat(stop={"a": 1}),
    "stream yes": chat(stream="yes"), "stream 1": chat(stream=1), "n 2": chat(n=2), "n text": chat(n="1"),
    "tools text": chat(tools="x"), "tools numbers": chat(tools=[1]),
    "tool no function": chat(tools=[{"type": "function"}]),
    "tool empty name": chat(tools=[{"type": "function", "function": {"name": ""}}]),
    "tool nested 300": chat(tools=[{"type": "function", "function": {"name": "f", "parameters": nested(300)}}]),
    "tool_choice number": chat(tool_choice=5),
    "messages empty": chat(messages=[]), "messages text": chat(messages="x"), "messages numbers": chat(messages=[1]),
    "role robot": chat(messages=[{"role": "robot", "content": "x"}]), "no role": chat(messages=[{"content": "x"}]),
    "content number": chat(messages=[{"role": "user", "content": 5}]),
    "part without type": chat(messages=[{"role": "user", "content": [{"text": "x"}]}]),
    "content nested 600": chat(messages=[{"role": "user", "content": nested(600)}]),
    "tool_calls text": chat(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": "x"}]),
    "tool_calls bad args": chat(messages=[{"role": "user", "content": "x"}, {
        "role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]),
    "tool result for nothing": chat(messages=[{"role": "user", "content": "x"},
                                              {"role": "tool", "tool_call_id": "nope", "content": "x"}]),
    "history edited with bad tools": chat(messages=[{"role": "user", "content": "another"}], tools=[1]),
    "history edited with a bad message": chat(messages=[{"role": "user", "content": "other"},
                                                        {"role": "robot", "content": "x"}]),
    "session id with a slash": ("/v1/chat/completions", {"messages": GOOD, "session_id": "a/b"}),
    "interactive session list": interactive(session_id=[1]), "interactive prompt number": interactive(prompt=5),
    "interactive output -1": interactive(request_output_len=-1), "interactive stop 1": interactive(stop=1),
    "interactive cancel yes": interactive(cancel="yes"), "interactive mode 1": interactive(interactive_mode=1),
    "completion prompt number": ("/v1/completions", {"prompt": 5}),
    "completion max_tokens huge": ("/v1/completions", {"prompt": "x", "max_tokens": 10**12}),
    "completion echo": ("/v1/completions", {"prompt": "x", "echo": True}),
    "new session bad tools": ("/v1/sessions", {"session_id": "fresh", "tools": [{"type": "nope"}]}),
    "new session bad id": ("/v1/sessions", {"session_id": "../etc"}),
    "fork bad id": (f"/v1/sessions/{SID}/fork", {"session_id": "x y"}),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("hostile") / "sessions.db"
    s = InProcess("--template", "qwen2.5", "--store", f"sqlite:{db}", "--backend-option", "prefix=",
               "--max-body-bytes", "2000000", keys=(KEY,))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with server.client(KEY, timeout=60) as c:
        first = c.post("/v1/chat/completions", json={"messages": GOOD[:1], "session_id": SID})
        assert first.status_code == 200, first.text
        second = c.post("/v1/chat/completions", json={"messages": GOOD, "session_id": SID})
        assert second.status_code == 200, second.text
        yield c


def stored(client) -> tuple[str, str]:
    """The session as exported, and as shown: byte for byte."""
    return client.get(f"/v1/sessions/{SID}/export").text, client.get(f"/v1/sessions/{SID}").text


def assert_refused(response: httpx.Response, label: str) -> None:
    assert 400 <= response.status_code < 500, f"{label}: {response.status_code} {response.text[:300]}"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] and error["message"], label


@pytest.mark.parametrize("label", sorted(CASES))
def test_malformed_json_bodies_leave_the_session_as_it_was(client, label):
    before = stored(client)
    path, body = CASES[label]
    assert_refused(client.post(path, json=body), label)
    assert stored(client) == before, label


@pytest.mark.parametrize("label", sorted(RAW))
def test_bodies_no_json_library_would_write_are_refused(client, label):
    before = stored(client)
    response = client.post("/v1/chat/completions", content=RAW[label].encode("utf-8", "surrogatepass"),
                           headers={"content-type": "application/json"})
    assert_refused(response, label)
    assert stored(client) == before, label


#: the turn cases: sent as the first request of an id nothing holds (one id each), they must create nothing
FIRST = sorted(label for label, (_, body) in CASES.items() if body.get("session_id") == SID)


@pytest.mark.parametrize("label", FIRST)
def test_malformed_first_requests_of_an_id_create_no_session(client, label):
    path, body = CASES[label]
    fresh = f"newcomer-{FIRST.index(label)}"
    assert_refused(client.post(path, json={**body, "session_id": fresh}), label)
    missing = client.get(f"/v1/sessions/{fresh}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found", label


def test_the_session_still_works_after_the_battery(client):
    before = json.loads(stored(client)[0])
    ok = client.post("/v1/chat/completions", json={"messages": [*GOOD, {"role": "assistant", "content": "again"},
                                                                {"role": "user", "content": "still here?"}],
                                                   "session_id": SID})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "still here?"
    after = json.loads(stored(client)[0])
    assert after["messages"][: len(before["messages"])] == before["messages"]
    assert ok.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the engine kept its cache
