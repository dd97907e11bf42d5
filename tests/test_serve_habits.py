"""What `lmchat serve` says about itself, and the habits llama-server's and Ollama's users bring to it (issue 39):
the start lines, the context length in /v1/models, every default in --help."""
from __future__ import annotations

import re

import pytest

from lmchat.cli.main import build_parser

pytest.importorskip("fastapi")


def _subcommand(name: str):
    sub = build_parser()._subparsers._group_actions[0]
    return sub.choices[name]


#: options whose help has no default to state: help itself, an alternative spelling of another option, a list of
#: anything, a switch
NO_DEFAULT = {"--help", "--chat-template", "--backend-option", "--allow-special-text", "--save"}


@pytest.mark.parametrize("command", ["serve", "chat"])
def test_help_states_every_default(command):
    """`serve --help` said nothing of --max-new-tokens', --idle-ttl's or --log-level's default."""
    silent = [action.option_strings[0] for action in _subcommand(command)._actions
              if action.option_strings and not NO_DEFAULT & set(action.option_strings)
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
