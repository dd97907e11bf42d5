"""The `lmchat` command, run as a real subprocess."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lmchat import get_template

from . import golden

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi 你好 😀"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "  spaces around  "},
]


def lmchat(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "lmchat", *args], input=stdin, capture_output=True, timeout=120
    )


@pytest.fixture
def conv_file(tmp_path):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(CONVERSATION, ensure_ascii=False), encoding="utf-8")
    return path


def test_render_is_byte_exact_and_adds_nothing(conv_file):
    out = lmchat("render", "--template", "qwen2.5", "--messages", str(conv_file))
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode("utf-8") == get_template("qwen2.5").messages2prompt(CONVERSATION)
    assert out.stderr == b""


#: the official renderings these tests compare with (tests/golden)
GOLDEN = [("qwen2.5", CONVERSATION, {"add_generation_prompt": False})]


def test_render_matches_the_official_template(conv_file):
    out = lmchat("render", "--template", "qwen2d5", "--messages", str(conv_file), "--no-generation-prompt")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode("utf-8") == golden.expected("qwen2.5", CONVERSATION, add_generation_prompt=False)


def test_render_reads_stdin_and_kwargs():
    payload = json.dumps({"messages": CONVERSATION[1:2]}).encode()
    out = lmchat("render", "--template", "qwen3", "--messages", "-", "--kwargs", '{"enable_thinking": false}',
                 stdin=payload)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_deltas_concatenate_to_the_full_prompt(conv_file):
    out = lmchat("render", "--template", "qwen", "--messages", str(conv_file), "--deltas")
    records = json.loads(out.stdout)
    assert [r["sequence_start"] for r in records] == [True, False]
    assert not any(r["reset"] for r in records)
    full = get_template("qwen").messages2prompt(CONVERSATION)
    assert "".join(r["text"] for r in records[:1]) + "Hello.<|im_end|>" + records[1]["text"] == full


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--template", "no-such-template"], "unknown chat template 'no-such-template'"),
        (["--template", "qwen", "--date", "26/07/2024"], "--date"),
        (["--template", "qwen", "--kwargs", "[1]"], "--kwargs"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(conv_file, args, needle):
    out = lmchat("render", "--messages", str(conv_file), *args)
    assert out.returncode == 2
    err = out.stderr.decode()
    assert needle in err and err.count("\n") == 1 and out.stdout == b""


def test_bad_messages_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    out = lmchat("render", "--template", "qwen", "--messages", str(bad))
    assert out.returncode == 2 and b"not valid JSON" in out.stderr
    missing = lmchat("render", "--template", "qwen", "--messages", str(tmp_path / "missing.json"))
    assert missing.returncode == 2 and b"No such file" in missing.stderr
    empty = tmp_path / "empty.json"
    empty.write_text("[]", encoding="utf-8")
    out = lmchat("render", "--template", "qwen", "--messages", str(empty))
    assert out.returncode == 2 and b"empty conversation" in out.stderr


def test_templates_json_lists_hyperparameters_and_aliases():
    out = lmchat("templates", "--json")
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["qwen2.5"]["top_k"] == 20 and "qwen2d5" in rows["qwen2.5"]["aliases"]
    assert rows["internlm-20b"]["capability"] == "completion" and rows["internlm-20b"]["session_len"] == 4096
    # family, tool-call format and reasoning: what the model writes, beside how it is prompted
    assert (rows["qwq"]["family"], rows["qwq"]["tool_format"], rows["qwq"]["reasoning"]) == \
        ("Qwen", "hermes", "<think> (opened)")
    assert (rows["gpt-oss"]["tool_format"], rows["gpt-oss"]["reasoning"]) == ("harmony", "harmony markers")
    assert rows["llama3.1"]["reasoning"] == "—" and rows["command-r-plus"]["official_tool_use"]
    table = lmchat("templates").stdout.decode()
    assert table.splitlines()[0].split()[:2] == ["NAME", "FAMILY"] and "internlm2_chat" in table
    assert "TOOL_CALLS" in table and "REASONING" in table


def test_help_describes_every_subcommand():
    out = lmchat("--help").stdout.decode()
    assert "templates" in out and "render" in out
    assert b"--deltas" in lmchat("render", "--help").stdout


def test_render_path_never_imports_heavy_libraries(conv_file):
    """`lmchat render` must start fast: no torch, transformers or tokenizers on its path."""
    code = (
        "import sys, lmchat.cli.main as m\n"
        "m.main(['render', '--template', 'qwen', '--messages', sys.argv[1]])\n"
        "heavy = [x for x in ('torch', 'transformers', 'tokenizers', 'fastapi') if x in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(conv_file)], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
