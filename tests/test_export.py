"""`lmchat export` and `lmchat check`: built-ins as Jinja, and Jinja compared with built-ins."""
from __future__ import annotations

import pytest

from lmchat import JinjaTemplate, get_template
from lmchat.errors import TemplateConfigError
from lmchat.interop.battery import first_difference
from lmchat.interop.export import export_jinja, exportable_names

from . import oracle
from .test_cli import lmchat
from .test_jinja_files import smollm2_gguf

EXPORTABLE = exportable_names()


def test_exportable_templates_are_the_data_templates():
    required = {"chatml", "qwen", "yi", "smollm2", "internlm-chat-7b",
                "default", "internlm_chat", "vicuna", "baichuan2_chat", "chatglm2"}
    assert required <= set(EXPORTABLE)
    # (Hermes renders its tool_use template when tools are given: code)
    assert not {"llama3", "qwen2.5", "mistral", "internlm-7b", "internlm2", "chatglm3", "hermes3"} & set(EXPORTABLE)


@pytest.mark.parametrize("name", EXPORTABLE)
def test_export_renders_like_the_builtin(name):
    builtin = get_template(name)
    exported = JinjaTemplate.from_string(export_jinja(builtin))
    count, difference = first_difference(builtin, exported, with_tools=True)  # both generation-prompt settings
    assert difference is None, difference.describe()
    assert count >= 40


def test_code_templates_are_refused_with_their_official_template():
    with pytest.raises(TemplateConfigError, match="meta-llama__Meta-Llama-3-8B-Instruct"):
        export_jinja(get_template("llama3"))
    with pytest.raises(TemplateConfigError, match="completion template"):
        export_jinja(get_template("internlm-7b"))


def test_exported_template_survives_overrides():
    custom = get_template("qwen", meta_instruction="Sé breve.\n{{ not jinja }}")
    exported = JinjaTemplate.from_string(export_jinja(custom))
    assert first_difference(custom, exported)[1] is None


# ---------------------------------------------------------------------- CLI
def test_cli_export_then_check(tmp_path):
    out_file = tmp_path / "chat_template.jinja"
    out = lmchat("export", "--template", "qwen", "--output", str(out_file))
    assert out.returncode == 0, out.stderr
    assert out_file.read_text(encoding="utf-8") == export_jinja(get_template("qwen"))
    check = lmchat("check", "--template", "qwen", "--jinja", str(out_file))
    assert check.returncode == 0, check.stderr
    assert b"identical on 38 conversations" in check.stdout


def test_cli_check_reports_the_first_difference(tmp_path):
    path = tmp_path / "yi.jinja"
    path.write_text(export_jinja(get_template("yi")), encoding="utf-8")
    out = lmchat("check", "--template", "qwen", "--jinja", str(path))
    assert out.returncode == 1, out.stderr
    text = out.stdout.decode()
    assert "conversation 'single-user'" in text and "first difference at character 12" in text
    assert "'<|im_start|>system\\nYou are a helpful assis'" in text  # the built-in's side, in context


def test_cli_export_refuses_code_templates():
    out = lmchat("export", "--template", "llama3.1")
    assert out.returncode == 2 and b"official template 'meta-llama__Llama-3.1-8B-Instruct'" in out.stderr
    assert out.stdout == b""


def test_cli_export_to_stdout_and_help():
    out = lmchat("export", "--template", "vicuna")
    assert out.returncode == 0 and out.stdout.decode("utf-8") == export_jinja(get_template("vicuna"))
    assert b"--jinja" in lmchat("check", "--help").stdout


@oracle.needs_corpus_for("runs lmchat check on the official template file")
def test_cli_check_official_template():
    official = oracle.CORPUS / "templates" / "meta-llama__Llama-3.1-8B-Instruct.jinja"
    out = lmchat("check", "--template", "llama3.1", "--jinja", str(official))
    assert out.returncode == 0 and b"identical on 43 conversations" in out.stdout, out.stdout + out.stderr


def test_cli_check_gguf():
    pytest.importorskip("gguf")
    gguf = lmchat("check", "--template", "smollm2", "--jinja", str(smollm2_gguf()))
    assert gguf.returncode == 0 and b"identical on 38 conversations" in gguf.stdout, gguf.stdout + gguf.stderr
