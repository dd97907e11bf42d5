"""Templates as data: LMDeploy configs, XTuner dicts, registration, and `--chat-template`."""
from __future__ import annotations

import json
import subprocess
import sys

import attrs
import pytest

import lmchat
from lmchat import Session, get_template, load_template, register_template
from lmchat.errors import TemplateConfigError, UnknownTemplate
from lmchat.interop.loading import template_from_lmdeploy_config, template_from_xtuner
from lmchat.registry import ALIASES, CHAT_TEMPLATES, template_class

from . import oracle
from .test_seed_templates import META

#: the seed's InternLM-Chat-7B (002) written as an LMDeploy ChatTemplateConfig under a new name
INTERNLM_CONFIG = {
    "model_name": "my-internlm",
    "system": "<|System|>:",
    "meta_instruction": META,
    "eosys": "\n",
    "user": "<|User|>:",
    "eoh": "\n",
    "assistant": "<|Bot|>:",
    "eoa": "<eoa>",
    "separator": "\n",
    "capability": "chat",
    "stop_words": ["<eoa>"],
    "tool": None,
}
#: the seed's XTuner `internlm_chat` (003)
INTERNLM_XTUNER = {
    "SYSTEM": "<|System|>:{system}\n",
    "INSTRUCTION": "<|User|>:{input}<eoh>\n<|Bot|>:",
    "SUFFIX": "<eoa>",
    "SUFFIX_AS_EOS": True,
    "SEP": "\n",
    "STOP_WORDS": ["<eoa>"],
}
CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "Q2"},
]


def write(path, data) -> str:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


@pytest.fixture
def registered():
    """Names registered by a test, removed afterwards so the registry stays the built-ins."""
    names = []
    yield names
    for name in names:
        CHAT_TEMPLATES.module_dict.pop(name, None)
        for alias in [a for a, n in ALIASES.items() if n == name]:
            del ALIASES[alias]


def test_lmdeploy_config_reproduces_the_seed_internlm_strings(tmp_path):
    t = load_template(write(tmp_path / "internlm.json", INTERNLM_CONFIG))
    assert t.name == "my-internlm" and t.stop_words == ("<eoa>",)
    assert t.get_prompt("你叫什么名字？") == f"<|System|>:{META}\n<|User|>:你叫什么名字？\n<|Bot|>:"
    assert t.decorate_prompt("U2", sequence_start=False) == "\n<|User|>:U2\n<|Bot|>:"
    builtin = get_template("internlm-chat-7b")
    assert t.messages2prompt(CONVERSATION) == builtin.messages2prompt(CONVERSATION)
    s = Session(t)
    s.prompt("U1")
    s.commit("A1")
    assert s.prompt("U2").text == "\n<|User|>:U2\n<|Bot|>:"


def test_lmdeploy_config_starts_from_a_registered_template():
    assert template_from_lmdeploy_config({"model_name": "internlm-chat-7b"}) == get_template("internlm-chat-7b")
    # null keeps the default, as in LMDeploy; an alias names the template too
    config = {"model_name": "internlm-chat-20b", "system": None, "session_len": 4096, "top_p": 1}
    t = template_from_lmdeploy_config(config)
    assert t == get_template("internlm-chat-7b-8k", session_len=4096, top_p=1.0)
    # overrides of a built-in survive a saved session
    assert t.to_dict() == {"name": "internlm-chat-7b-8k", "session_len": 4096, "top_p": 1.0}


@pytest.mark.parametrize(
    "change, field, needle",
    [
        ({"eoh": 3}, "eoh", "expected a string"),
        ({"stop_words": "<eoa>"}, "stop_words", "a list of strings"),
        ({"stop_words": ["<eoa>", 1]}, "stop_words", "a list of strings"),
        ({"session_len": True}, "session_len", "an integer"),
        ({"temperature": "hot"}, "temperature", "a number"),
        ({"capability": "python"}, "capability", "'chat' or 'completion'"),
        ({"tool": "<|tool|>"}, "tool", "not supported"),
        ({"roles": {}}, "roles", "unknown LMDeploy chat template field"),
        ({"model_name": None}, "model_name", "missing"),
        ({"model_name": "internlm_chat"}, "system", "is an XTuner template"),  # a name LMDeploy lacks
    ],
)
def test_lmdeploy_config_errors_name_the_field_and_file(tmp_path, change, field, needle):
    path = write(tmp_path / "bad.json", {**INTERNLM_CONFIG, **change})
    with pytest.raises(TemplateConfigError) as info:
        load_template(path)
    assert info.value.field == field and needle in str(info.value) and path in str(info.value)


def test_xtuner_dict_reproduces_internlm_chat(tmp_path):
    from .test_seed_templates import XTUNER_SEED_MESSAGES, XTUNER_SEED_TEXT

    t = load_template(write(tmp_path / "xtuner.json", INTERNLM_XTUNER))
    assert t.messages2prompt(XTUNER_SEED_MESSAGES, add_generation_prompt=False) == XTUNER_SEED_TEXT
    assert attrs.asdict(t) == attrs.asdict(get_template("internlm_chat"))
    assert t.eoa == "<eoa>" and t.stop_words == ("<eoa>",)


@pytest.mark.parametrize(
    "change, field, needle",
    [
        ({"INSTRUCTION": "<|User|>:<eoh>\n<|Bot|>:"}, "INSTRUCTION", "{input}"),
        ({"INSTRUCTION": "{input} {json}"}, "INSTRUCTION", "not a valid format string"),
        ({"SYSTEM": "<|System|>:\n"}, "SYSTEM", "{system}"),
        ({"SUFFIX_AS_EOS": "yes"}, "SUFFIX_AS_EOS", "expected bool"),
        ({"STOP_WORDS": "<eoa>"}, "STOP_WORDS", "a list of strings"),
        ({"SEPARATOR": "\n"}, "SEPARATOR", "unknown XTuner template key"),
    ],
)
def test_xtuner_errors_name_the_key_and_file(tmp_path, change, field, needle):
    path = write(tmp_path / "bad.json", {**INTERNLM_XTUNER, **change})
    with pytest.raises(TemplateConfigError) as info:
        load_template(path)
    assert info.value.field == field and needle in str(info.value) and path in str(info.value)


def test_xtuner_dict_needs_an_instruction():
    with pytest.raises(TemplateConfigError) as info:
        template_from_xtuner({"SYSTEM": "{system}", "SEP": "\n"})
    assert info.value.field == "INSTRUCTION"


def test_json_syntax_errors_name_file_and_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "model_name": "x",\n  "eoh": "a"\n  "eoa": "b"\n}', encoding="utf-8")
    with pytest.raises(TemplateConfigError, match=r"broken\.json:4:3: not valid JSON"):
        load_template(str(path))
    (tmp_path / "list.json").write_text("[]", encoding="utf-8")
    with pytest.raises(TemplateConfigError, match="expected a JSON object"):
        load_template(str(tmp_path / "list.json"))


def test_load_template_takes_names_paths_and_overrides(tmp_path):
    assert load_template("qwen_chat") == get_template("qwen")
    assert load_template("qwen", top_k=5).top_k == 5
    path = write(tmp_path / "internlm.json", INTERNLM_CONFIG)
    assert load_template(path, session_len=4096).session_len == 4096
    with pytest.raises(TemplateConfigError) as info:
        load_template(path, sesion_len=1)
    assert info.value.field == "sesion_len"
    with pytest.raises(UnknownTemplate):
        load_template("no-such-template")
    with pytest.raises(FileNotFoundError):
        load_template(str(tmp_path / "missing.json"))
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(TemplateConfigError, match="unsupported chat template file"):
        load_template(str(tmp_path / "notes.txt"))


def test_registered_template_round_trips(tmp_path, registered):
    loaded = load_template(write(tmp_path / "internlm.json", INTERNLM_CONFIG))
    registered.append("my-internlm-chat")
    t = register_template("my-internlm-chat", loaded, "my-internlm-alias")
    assert get_template("my-internlm-chat").messages2prompt(CONVERSATION) == loaded.messages2prompt(CONVERSATION)
    assert attrs.asdict(get_template("my-internlm-alias")) == attrs.asdict(loaded) == attrs.asdict(t)
    assert t.name == "my-internlm-chat" and t.to_dict() == {"name": "my-internlm-chat"}
    assert get_template("my-internlm-chat", session_len=8192).session_len == 8192  # overrides as for a built-in
    session = Session("my-internlm-chat")
    session.prompt("U1")
    session.commit("A1")
    assert Session.from_dict(json.loads(json.dumps(session.to_dict()))).context == session.context
    assert lmchat.load_template("my-internlm-chat").stop_words == ("<eoa>",)


def test_xtuner_template_registers_too(tmp_path, registered):
    loaded = template_from_xtuner(INTERNLM_XTUNER)
    registered.append("my-xtuner")
    t = register_template("my-xtuner", loaded)
    assert t.messages2prompt(CONVERSATION) == get_template("internlm_chat").messages2prompt(CONVERSATION)


def test_built_ins_are_not_replaced_silently(registered):
    mine = get_template("qwen", top_k=1)
    for name, aliases in (("qwen", ()), ("mine", ("qwen_chat",))):
        with pytest.raises(TemplateConfigError, match="force=True"):
            register_template(name, mine, *aliases)
    with pytest.raises(TemplateConfigError, match="cannot become an alias"):
        register_template("mine", mine, "qwen", force=True)
    assert "mine" not in CHAT_TEMPLATES.module_dict and get_template("qwen").top_k == 20
    original = CHAT_TEMPLATES.module_dict["qwen"]
    try:
        register_template("qwen", mine, force=True)
        assert get_template("qwen").top_k == 1 and get_template("qwen_chat").top_k == 1  # aliases follow
    finally:
        CHAT_TEMPLATES.module_dict["qwen"] = original
    assert get_template("qwen").top_k == 20


def lmchat_cli(*args):
    return subprocess.run([sys.executable, "-m", "lmchat", *args], capture_output=True, timeout=120)


@pytest.fixture
def conv_file(tmp_path):
    return write(tmp_path / "conv.json", CONVERSATION)


@pytest.mark.parametrize("config", [INTERNLM_CONFIG, INTERNLM_XTUNER], ids=["lmdeploy", "xtuner"])
def test_render_with_chat_template_file(tmp_path, conv_file, config):
    path = write(tmp_path / "template.json", config)
    out = lmchat_cli("render", "--chat-template", path, "--messages", conv_file)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode("utf-8") == load_template(path).messages2prompt(CONVERSATION)
    deltas = json.loads(lmchat_cli("render", "--chat-template", path, "--messages", conv_file, "--deltas").stdout)
    assert [d["reset"] for d in deltas] == [False, False]


@pytest.mark.parametrize(
    "content, needle",
    [
        ('{"model_name": "x",\n "eoh": 1}', "field 'eoh'"),
        ('{"model_name": "x"\n "eoh": "a"}', "bad.json:2:2: not valid JSON"),
        ('{"INSTRUCTION": "no placeholder"}', "field 'INSTRUCTION'"),
        (None, "no such chat template file"),
    ],
)
def test_bad_chat_template_file_is_one_line_and_exit_2(tmp_path, conv_file, content, needle):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    out = lmchat_cli("render", "--chat-template", str(path), "--messages", conv_file)
    err = out.stderr.decode()
    assert out.returncode == 2 and needle in err and err.count("\n") == 1 and out.stdout == b""


def test_template_and_chat_template_are_exclusive_and_one_is_required(conv_file):
    both = lmchat_cli("render", "--template", "qwen", "--chat-template", conv_file, "--messages", conv_file)
    neither = lmchat_cli("render", "--messages", conv_file)
    assert both.returncode == 2 and b"not allowed with" in both.stderr
    assert neither.returncode == 2 and b"--template --chat-template is required" in neither.stderr


@oracle.needs_corpus_for("loads the official template text from files")
def test_jinja_files_folders_and_json_load_as_jinja_templates(tmp_path):
    text = oracle.template_text(template_class("qwen2.5").official)
    (tmp_path / "t.jinja").write_text(text, encoding="utf-8")
    write(tmp_path / "t.json", {"chat_template": text})
    folder = tmp_path / "model"
    folder.mkdir()
    write(folder / "tokenizer_config.json", {"chat_template": text, "eos_token": "<|im_end|>"})
    expected = get_template("qwen2.5").messages2prompt(CONVERSATION)
    for path in ("t.jinja", "t.json", "model"):
        assert load_template(str(tmp_path / path)).messages2prompt(CONVERSATION) == expected, path
    assert load_template(str(tmp_path / "t.jinja"), session_len=4096).session_len == 4096
