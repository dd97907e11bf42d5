"""The remote backend against a real /v1/completions SSE server running in a thread on 127.0.0.1."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx")

import lmchat  # noqa: E402
from lmchat.backends import GenerationRequest, SamplingParams, get_backend  # noqa: E402
from lmchat.errors import BackendError  # noqa: E402


class Handler(BaseHTTPRequestHandler):
    """A tiny OpenAI-style completions server: answers 'you said <last user message>' word by word.

    It applies ``max_tokens`` (words) and ``stop`` as vLLM does (unless ``ignore_stop``, like a
    server that caps the number of stop words), and reports a prefix cache per ``user``
    (characters shared with that user's previous prompt) as ``cached_tokens``.
    """

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append((dict(self.headers), body))
        if self.path != "/v1/completions":
            return self.fail(404, "no such route")
        if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
            return self.fail(401, "invalid api key")
        if server.fail_with:
            return self.fail(server.fail_with, "the model crashed")
        prompt = body["prompt"]
        said = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt, re.S)[-1]
        previous = server.prompts.get(body["user"], "")
        cached = next((i for i, (a, b) in enumerate(zip(previous, prompt)) if a != b), min(len(previous), len(prompt)))
        server.prompts[body["user"]] = prompt
        words = re.findall(r"\S+\s*", f"you said {said}")
        finish = "length" if len(words) > body["max_tokens"] else "stop"
        text, stop_reason = "".join(words[: body["max_tokens"]]), None
        stops = [] if server.ignore_stop else body["stop"]
        cut = min(((text.find(s), s) for s in stops if s in text), default=None)
        if cut:
            text, finish, stop_reason = text[: cut[0]], "stop", cut[1]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for word in re.findall(r"\S+\s*|\s+", text):
                self.event({"choices": [{"index": 0, "text": word, "finish_reason": None}]})
                time.sleep(server.delay)
        except (BrokenPipeError, ConnectionResetError):  # the client closed the stream: abort, as vLLM does
            server.aborted += 1
            return
        self.event({"choices": [{"index": 0, "text": "", "finish_reason": finish, "stop_reason": stop_reason}]})
        usage = {"prompt_tokens": len(prompt), "prompt_tokens_details": {"cached_tokens": cached}}
        self.event({"choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")

    def event(self, payload):
        self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()

    def fail(self, status, message):
        data = json.dumps({"error": {"message": message}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.requests, httpd.prompts, httpd.api_key, httpd.fail_with = [], {}, None, None
    httpd.delay, httpd.ignore_stop, httpd.aborted = 0.0, False, 0
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(httpd, suffix=""):
    return f"http://127.0.0.1:{httpd.server_address[1]}{suffix}"


def turn(backend, session, content, **params):
    delta = session.prompt(content)
    params = SamplingParams.from_template(session.template, **params)
    chunks = list(backend.generate(GenerationRequest.from_session(session, delta, params)))
    text = "".join(c.text for c in chunks)
    session.commit(text, stop=chunks[-1].stop)
    return text, chunks[-1]


def test_each_turn_sends_the_whole_prompt_with_the_session_id(server):
    backend = get_backend("remote", base_url=url(server, "/v1"), model="smollm2", api_key="k")
    server.api_key = "k"
    session = lmchat.Session("smollm2")
    text, last = turn(backend, session, "Hello", temperature=0, max_new_tokens=64)
    assert (text, last.finish_reason) == ("you said Hello", "stop")
    assert (last.prefilled, last.reused) == (len(session.context) - len(text) - len("<|im_end|>"), 0)
    text, last = turn(backend, session, "How are you?", temperature=0.5, top_k=20, seed=7, max_new_tokens=64)
    assert text == "you said How are you?"
    headers, body = server.requests[-1]
    assert body["prompt"] == session.context[: -len(text + "<|im_end|>")]  # the full prompt, not the delta
    assert body["user"] == headers["X-Session-Id"] == session.session_id
    assert body["stop"] == ["<|im_end|>", "<|endoftext|>"] and body["model"] == "smollm2"
    assert (body["temperature"], body["top_k"], body["seed"], body["max_tokens"]) == (0.5, 20, 7, 64)
    assert body["stream"] and body["add_special_tokens"] is False
    assert last.reused > 0 and last.prefilled + last.reused == len(body["prompt"])  # the server's cached_tokens
    backend.close()


@pytest.mark.parametrize("server_stops", [True, False])
def test_stop_words_and_max_tokens(server, server_stops):
    server.ignore_stop = not server_stops  # then lmchat's own matcher cuts the stream
    backend = get_backend("remote", base_url=url(server))  # without /v1: added
    session = lmchat.Session("smollm2")
    text, last = turn(backend, session, "one two three four", max_new_tokens=3)
    assert (text, last.finish_reason, last.stop) == ("you said one ", "length", None)
    text, last = turn(backend, session, "one two three four", stop=["ee f"])
    assert (text, last.finish_reason, last.stop) == ("you said one two thr", "stop", "ee f")


def test_cancel_from_another_thread_closes_the_stream(server):
    server.delay = 0.02
    backend = get_backend("remote", base_url=url(server))
    session = lmchat.Session("smollm2")
    delta = session.prompt(" ".join(f"w{i}" for i in range(300)))
    request = GenerationRequest.from_session(session, delta, SamplingParams(max_new_tokens=1000))
    started, pieces = time.monotonic(), []
    for chunk in backend.generate(request):
        pieces.append(chunk)
        if len(pieces) == 2:
            threading.Thread(target=backend.cancel, args=(session.session_id,)).start()
    assert pieces[-1].finish_reason == "cancelled"
    assert "".join(c.text for c in pieces).startswith("you said ") and len(pieces) < 10
    assert time.monotonic() - started < 3  # far less than the 6 s the whole answer takes
    deadline = time.monotonic() + 5
    while not server.aborted and time.monotonic() < deadline:  # the server notices at its next write
        time.sleep(0.01)
    assert server.aborted == 1


@pytest.mark.parametrize("status", [401, 500])
def test_http_errors_name_the_url_and_status(server, status):
    if status == 401:
        server.api_key = "secret"
    else:
        server.fail_with = 500
    backend = get_backend("remote", base_url=url(server), api_key="wrong")
    session = lmchat.Session("smollm2")
    request = GenerationRequest.from_session(session, session.prompt("hi"), SamplingParams())
    with pytest.raises(BackendError) as info:
        list(backend.generate(request))
    assert info.value.status == status and info.value.url == url(server, "/v1/completions")
    assert f"HTTP {status}" in str(info.value) and url(server) in str(info.value)
    assert ("invalid api key" if status == 401 else "the model crashed") in str(info.value)


def test_backend_down_is_a_clear_error():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = get_backend("remote", base_url=f"http://127.0.0.1:{port}", timeout=5)
    session = lmchat.Session("smollm2")
    request = GenerationRequest.from_session(session, session.prompt("hi"), SamplingParams())
    with pytest.raises(BackendError, match=rf"cannot reach http://127.0.0.1:{port}/v1/completions") as info:
        list(backend.generate(request))
    assert info.value.status is None and isinstance(info.value, RuntimeError)
