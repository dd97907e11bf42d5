"""What a user notices at the command line: a closed pipe, --version, leaving the REPL, bad match candidates."""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

import pexpect
import pytest

from lmchat.errors import ModelMatchError
from lmchat.interop.matching import explain_match

ROOT = Path(__file__).resolve().parent.parent


def lmchat(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "lmchat", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, **kwargs)


def test_a_reader_that_goes_away_ends_the_chat_quietly(tmp_path):
    """`lmchat chat ... | head`: no "error: [Errno 32] Broken pipe" per remaining line, and the store stays whole."""
    store = str(tmp_path / "s.db")
    # answers of 20 KB: the pipe (64 KB) fills long before the 40 messages are answered
    messages = "".join(f"{i} {'x' * 20_000}\n" for i in range(40))
    proc = subprocess.Popen([sys.executable, "-m", "lmchat", "chat", "--backend", "echo", "--template", "qwen2.5",
                             "--store", store], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)

    def feed():  # from a thread: the child stops reading while its stdout is full
        with contextlib.suppress(OSError):
            proc.stdin.write(messages.encode())
            proc.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    assert proc.stdout.readline().startswith(b"echo: 0 xxx")
    proc.stdout.close()  # what `head -n 1` does
    assert proc.wait(timeout=60) == 0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert err == "", err
    # every turn that started was committed and saved once, in order: the session resumes and goes on
    out = lmchat("chat", "--backend", "echo", "--store", store, "--resume", input="last\n/sessions\n")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    turns = int(re.search(r"^\* [0-9a-f]{8} .* (\d+) turns ", out.stdout, re.M).group(1))
    assert 2 <= turns < 40


def test_one_shot_answer_into_a_closed_pipe(tmp_path):
    proc = subprocess.run(f"{shlex.quote(sys.executable)} -m lmchat chat --backend echo --template qwen2.5 "
                          f"--store {shlex.quote(str(tmp_path / 's.db'))} \"$(printf '%0200d ' $(seq 600))\" "
                          "| head -c 10", shell=True, capture_output=True, text=True, cwd=ROOT, timeout=60,
                          executable="/bin/bash")
    # an answer that never repeats itself (a repetition stop would end it early) and, cut at max_new_tokens
    # (512 words), still fills the pipe (64 KB): 512 words of 200 digits. A shorter one fits in the pipe, and
    # the note saying it was cut then goes to stderr, rightly, before the process can know the reader left
    assert proc.stdout == "echo: 0000" and proc.stderr == "", proc.stderr


def test_version():
    out = lmchat("--version")
    assert out.returncode == 0 and out.stdout == f"lmchat {metadata.version('lmchat')}\n"


def test_match_suggests_only_close_names():
    with pytest.raises(ModelMatchError) as unrelated:
        explain_match("foo/bar")
    assert unrelated.value.candidates == [] and "`lmchat templates` lists them" in str(unrelated.value)
    with pytest.raises(ModelMatchError) as typo:
        explain_match("acme/lama3-8b")
    assert typo.value.candidates == ["llama3", "llama3.1", "llama3.2"]
    out = lmchat("match", "foo/bar")
    assert out.returncode == 2 and "candidates" not in out.stderr and "lmchat templates" in out.stderr


def _expand(path: str) -> set[str]:
    """``/v1/sessions[/ID[/export]]`` -> its three spellings."""
    m = re.search(r"\[([^\[\]]*)\]", path)
    if not m:
        return {path}
    return _expand(path[:m.start()] + m.group(1) + path[m.end():]) | _expand(path[:m.start()] + path[m.end():])


def test_serve_help_lists_every_documented_endpoint():
    out = lmchat("serve", "--help")
    assert out.returncode == 0, out.stderr
    listed = {p for token in re.findall(r"/[\w/\[\]]+", out.stdout) for p in _expand(token)}
    table = (ROOT / "docs" / "server.md").read_text().split("## Endpoints", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(?:GET|POST|DELETE) (/[\w/]+)`", table))
    assert {"/v1/responses", "/v1/conversations/ID/items/ITEM_ID", "/v1/sessions/ID/export"} <= documented
    assert documented - listed == set()


@pytest.fixture
def chat_env(tmp_path):
    return dict(os.environ, LMCHAT_DATA_DIR=str(tmp_path), PROMPT_TOOLKIT_NO_CPR="1", TERM="xterm",
                COLUMNS="300", LINES="30")  # wide: the hint on one line


def _chat_in_a_terminal(env, *args, typed=()):
    child = pexpect.spawn(sys.executable, ["-m", "lmchat", "chat", *args], cwd=str(ROOT), env=env,
                          encoding="utf-8", dimensions=(30, 300), timeout=30)
    try:
        child.expect(">>>")
        for text in typed:
            child.send(text + "\r")
            child.expect("echo: ")  # the reply
            child.expect(">>>")
        time.sleep(0.5)  # the prompt is in raw mode again: a Ctrl-D sent earlier could be lost
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before)  # without the terminal's escapes
    finally:
        child.close(force=True)


def test_leaving_says_how_to_resume(chat_env, tmp_path):
    store = str(tmp_path / "my sessions.db")
    args = ("--backend", "echo", "--template", "qwen2.5", "--store", store)
    shown = _chat_in_a_terminal(chat_env, *args, typed=["remember the word walnut"])
    command = re.search(r"continue it with: (lmchat chat --resume [0-9a-f]{8} .*?)\r?\n", shown).group(1)
    assert command.endswith(f"--backend echo --store {shlex.quote(store)}")
    argv = shlex.split(command)
    out = subprocess.run([sys.executable, "-m", *argv], input="/show context\n", env=chat_env,
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and "walnut" in out.stdout, out.stderr
    assert "nothing was saved" in _chat_in_a_terminal(chat_env, *args)
    assert "not kept (--store memory)" in _chat_in_a_terminal(chat_env, "--backend", "echo", "--template", "qwen2.5",
                                                              "--store", "memory", typed=["hi"])
