"""What a new user meets first: one-line errors, one store per engine, metrics a scraper reads."""
from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from lmchat.errors import MissingExtra
from lmchat.extras import needs

from .serve_helpers import Server


def lmchat(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lmchat", *args], capture_output=True, text=True, timeout=60, **kwargs)


@pytest.mark.parametrize("role", ["robot", "", 7])
def test_render_refuses_unknown_roles_like_the_session_and_the_server(tmp_path, role):
    conv = tmp_path / "conv.json"
    conv.write_text(json.dumps([{"role": role, "content": "hi"}]))
    for template in ("qwen2.5", "llama3"):  # one drops unknown roles silently, the other prints them
        for extra in ([], ["--deltas"]):
            out = lmchat("render", "--template", template, "--messages", str(conv), *extra)
            assert out.returncode == 2 and out.stdout == "" and "messages[0] field 'role'" in out.stderr
            assert out.stderr.count("\n") == 1


def test_a_missing_extra_names_the_extra_to_install():
    with pytest.raises(MissingExtra) as err, needs("the frobnicator", "local"):
        import llama_cpp_not_installed_anywhere  # noqa: F401
    assert str(err.value) == ("the frobnicator needs the 'local' extra (llama_cpp_not_installed_anywhere is not "
                              "installed): pip install 'lmchat[local]'")
    with pytest.raises(MissingExtra, match=r"pip install 'lmchat\[serve\]'"), needs("lmchat serve"):
        raise ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn")
    # a module no extra brings is a bug, not a missing extra
    with pytest.raises(ModuleNotFoundError), needs("something"):
        raise ModuleNotFoundError("No module named 'nowhere'", name="nowhere")


def test_two_engines_never_share_a_default_store_and_a_foreign_session_is_refused(tmp_path):
    env = {"LMCHAT_DATA_DIR": str(tmp_path)}
    echo = Server("--template", "qwen2.5", env=env)
    other = Server("--template", "qwen2.5", "--backend-option", "model=other", env=env)
    try:
        for server, engine in ((echo, "echo:echo"), (other, "echo:other")):
            health = httpx.get(server.url + "/health").json()
            assert health["engine"] == engine and health["store"].startswith(f"sqlite:{tmp_path}/server-echo-")
        assert httpx.get(echo.url + "/health").json()["store"] != httpx.get(other.url + "/health").json()["store"]
        body = {"messages": [{"role": "user", "content": "hi"}], "session_id": "s7"}
        assert httpx.post(echo.url + "/v1/chat/completions", json=body).status_code == 200
        assert httpx.get(other.url + "/v1/sessions/s7").status_code == 404  # another file: not there at all
    finally:
        other.stop()
    # the same store under another engine: refused with both names, the session untouched
    shared = httpx.get(echo.url + "/health").json()["store"]
    before = httpx.get(echo.url + "/v1/sessions/s7/export").json()
    foreign = Server("--template", "llama3", "--store", shared, "--backend-option", "model=other", env=env)
    try:
        reply = httpx.post(foreign.url + "/v1/chat/completions", json={**body, "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "echo: hi"},
            {"role": "user", "content": "again"}]})
        error = reply.json()["error"]
        assert reply.status_code == 409 and error["code"] == "engine_mismatch"
        assert "echo:echo" in error["message"] and "echo:other" in error["message"]
    finally:
        foreign.stop()
    assert httpx.get(echo.url + "/v1/sessions/s7/export").json() == before
    echo.stop()


def test_metrics_parse_with_the_prometheus_reference_parser(tmp_path):
    parser = pytest.importorskip("prometheus_client.parser")
    server = Server("--template", "qwen2.5", "--store", "memory")
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "session_id": "new-one"}
        assert httpx.post(server.url + "/v1/chat/completions", json=body).status_code == 200  # creates it
        interactive = {"prompt": "hello", "session_id": 41, "interactive_mode": True}
        assert httpx.post(server.url + "/v1/chat/interactive", json=interactive).status_code == 200
        families = {f.name: f for f in parser.text_string_to_metric_families(httpx.get(server.url + "/metrics").text)}
    finally:
        server.stop()
    types = {name: f.type for name, f in families.items()}
    assert types["lmchat_turns"] == "counter" and types["lmchat_tokens_reused"] == "counter"
    assert types["lmchat_sessions_active"] == "gauge" and types["lmchat_turn_latency_seconds"] == "histogram"
    assert types["lmchat_http_requests"] == "counter" and types["lmchat_errors"] == "counter"
    assert types["lmchat_http_request_duration_seconds"] == "histogram"
    assert "unknown" not in types.values() and "untyped" not in types.values()
    assert [s.value for s in families["lmchat_turns"].samples if s.name == "lmchat_turns_total"] == [2.0]
    assert not families["lmchat_errors"].samples  # creating sessions (by either protocol) is not an error
