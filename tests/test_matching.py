"""Model matching: shipped-template fingerprints, config.json architecture, GGUF metadata, name rules.

Test names stay clear of model names: pytest puts them in ``tmp_path``, whose
components the name rules read.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections import defaultdict

import pytest

from lmchat import ModelMatchError, match_template
from lmchat.interop.fingerprints import OFFICIAL_TEXTS, claimed_stems, fingerprint, templates_with_fingerprint
from lmchat.interop.gguf_meta import read_gguf_metadata
from lmchat.interop.matching import Match, explain_match
from lmchat.registry import template_class, template_names

from . import gguf_files, oracle

NEEDS_OFFICIAL_TEXTS = oracle.needs_corpus_for("fingerprints the official template texts")
CUSTOM = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


def model_folder(path, template=None, *, file="tokenizer_config.json", **config):
    """A model folder as transformers saves it: config.json, and the chat template where asked."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if template is not None and file == "chat_template.jinja":
        (path / file).write_bytes(template.encode("utf-8"))
    elif template is not None:
        (path / file).write_text(json.dumps({"chat_template": template, "eos_token": "</s>"}), encoding="utf-8")
    return str(path)


def official(name: str) -> str:
    return oracle.template_text(template_class(name).official)


@NEEDS_OFFICIAL_TEXTS
def test_fingerprint_table_is_recomputed_from_the_corpus():
    by_digest = defaultdict(list)
    for path in sorted((oracle.CORPUS / "templates").glob("*.jinja")):
        by_digest[fingerprint(oracle.template_text(path.stem))].append(path.stem)
    claimed = {stem for n in template_names() for stem in claimed_stems(n)}
    expected = {d: tuple(stems) for d, stems in by_digest.items() if claimed & set(stems)}
    assert expected == OFFICIAL_TEXTS, "regenerate lmchat/interop/fingerprints.py:\n" + "\n".join(
        f"    {d!r}: {stems!r}," for d, stems in sorted(expected.items(), key=lambda kv: kv[1][0].lower())
    )
    # the corpus files are the ones SOURCES.md documents (raw sha256, first 16 hex digits)
    sources = (oracle.CORPUS / "SOURCES.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| (\S+)\.jinja \|.*?\| ([0-9a-f]{16}) \|", sources, re.MULTILINE))
    for stems in OFFICIAL_TEXTS.values():
        for stem in stems:
            raw = (oracle.CORPUS / "templates" / f"{stem}.jinja").read_bytes()
            assert hashlib.sha256(raw).hexdigest()[:16] == documented[stem], stem


@NEEDS_OFFICIAL_TEXTS
def test_every_official_template_is_found_by_its_fingerprint():
    for name in template_names():
        for stem in claimed_stems(name):
            assert name in templates_with_fingerprint(fingerprint(oracle.template_text(stem))), (name, stem)


@NEEDS_OFFICIAL_TEXTS
def test_checkpoint_folder_matches_by_fingerprint(tmp_path):
    folder = model_folder(
        tmp_path / "run" / "checkpoint-500", official("qwen2.5"), model_type="qwen2", architectures=["Qwen2ForCausalLM"]
    )
    match = explain_match(folder)
    assert match.name == "qwen2.5" and match_template(folder) == "qwen2.5"
    assert match.evidence[0].startswith("fingerprint: tokenizer_config.json is the official template of Qwen__Qwen2.5")


@NEEDS_OFFICIAL_TEXTS
def test_fingerprint_outweighs_the_folder_name(tmp_path):
    folder = model_folder(tmp_path / "Meta-Llama-3-8B-chatml-sft", official("qwen2.5"), model_type="llama")
    assert match_template(folder) == "qwen2.5"


@NEEDS_OFFICIAL_TEXTS
def test_copies_differing_in_line_endings_or_final_newline_match(tmp_path):
    text = official("llama3").replace("\n", "\r\n") + "\r\n"
    folder = model_folder(tmp_path / "step-100", text, file="chat_template.jinja")
    assert match_template(folder) == "llama3"
    listed = tmp_path / "step-200"
    listed.mkdir()
    templates = [{"name": "default", "template": official("phi4")}, {"name": "tool_use", "template": CUSTOM}]
    (listed / "tokenizer_config.json").write_text(json.dumps({"chat_template": templates}), encoding="utf-8")
    assert match_template(str(listed)) == "phi4"


@NEEDS_OFFICIAL_TEXTS
@pytest.mark.parametrize(
    "template, model_type, expected",
    [
        ("gemma", "gemma", "gemma"),
        ("gemma", "gemma2", "gemma2"),
        ("zephyr", "mistral", "zephyr"),
        ("zephyr", "llama", "tinyllama"),
        ("mistral", "mixtral", "mixtral"),
        ("deepseek", "deepseek_v2", "deepseek-v2"),
        ("internlm2", "internlm3", "internlm3"),
    ],
    ids=["a", "b", "c", "d", "e", "f", "g"],
)
def test_architecture_breaks_a_fingerprint_tie(tmp_path, template, model_type, expected):
    match = explain_match(model_folder(tmp_path / "checkpoint-500", official(template), model_type=model_type))
    assert match.name == expected
    assert match.evidence[1].startswith(f"config.json: model_type {model_type!r} narrows")


@NEEDS_OFFICIAL_TEXTS
def test_architectures_list_is_read_without_model_type(tmp_path):
    folder = model_folder(tmp_path / "checkpoint-500", official("gemma2"), architectures=["Gemma2ForCausalLM"])
    assert match_template(folder) == "gemma2"


@NEEDS_OFFICIAL_TEXTS
def test_names_break_the_remaining_tie(tmp_path):
    text = official("internlm2")
    by_parent = model_folder(tmp_path / "internlm2_5-7b-chat" / "checkpoint-500", text, model_type="internlm2")
    assert match_template(by_parent) == "internlm2.5"
    origin = model_folder(
        tmp_path / "checkpoint-700", text, model_type="internlm2", _name_or_path="internlm/internlm2-chat-7b"
    )
    match = explain_match(origin)
    assert match.name == "internlm2" and "config.json _name_or_path 'internlm2-chat-7b'" in match.evidence[-1]


@NEEDS_OFFICIAL_TEXTS
def test_equal_evidence_is_ambiguous(tmp_path):
    folder = model_folder(tmp_path / "checkpoint-500", official("internlm2"), model_type="internlm2")
    with pytest.raises(ModelMatchError) as info:
        match_template(folder)
    assert info.value.candidates == ["internlm2", "internlm2.5"] and "equal evidence" in str(info.value)


def test_unknown_folder_lists_the_architecture_candidates(tmp_path):
    folder = model_folder(tmp_path / "checkpoint-500", model_type="internlm2")
    with pytest.raises(ModelMatchError) as info:
        match_template(folder)
    assert info.value.candidates == ["internlm2", "internlm2.5"] and "model_type 'internlm2' fits" in str(info.value)


def test_unknown_shipped_template_points_to_chat_template(tmp_path):
    folder = model_folder(tmp_path / "checkpoint-500", CUSTOM, model_type="mystery")
    with pytest.raises(ModelMatchError, match="--chat-template") as info:
        match_template(folder)
    assert "no built-in template's official text" in str(info.value)


def test_names_still_match_where_nothing_else_is_known(tmp_path):
    folder = tmp_path / "Qwen2.5-7B-Instruct" / "checkpoint-500"
    folder.mkdir(parents=True)
    assert match_template(str(folder)) == "qwen2.5"
    custom = model_folder(tmp_path / "Qwen2-7B-Instruct-sft", CUSTOM, model_type="qwen2")
    match = explain_match(custom)
    assert match.name == "qwen" and match.evidence[0].startswith("fingerprint: tokenizer_config.json is no built-in")
    with pytest.raises(FileNotFoundError):
        match_template("./no/such/checkpoint")


def lmchat_match(*args):
    return subprocess.run([sys.executable, "-m", "lmchat", "match", *args], capture_output=True, timeout=120, text=True)


def test_match_command_prints_the_name_then_the_evidence(tmp_path):
    out = lmchat_match("internlm/internlm2-chat-7b")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "internlm2" and lines[1].startswith("  name: id 'internlm2-chat-7b' matches")
    data = json.loads(lmchat_match("--json", "Qwen/Qwen2.5-7B-Instruct").stdout)
    assert data["template"] == "qwen2.5" and data["evidence"]
    bad = lmchat_match(model_folder(tmp_path / "checkpoint-500", model_type="internlm2"))
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1
    assert "candidates: internlm2, internlm2.5" in bad.stderr


# ---------------------------------------------------------------- GGUF files: what they embed before their names
SMOL_FINGERPRINT = ("fingerprint: the GGUF's tokenizer.chat_template is the official template of "
                    "HuggingFaceTB__SmolLM2-135M-Instruct -> smollm2")


@pytest.mark.parametrize("name", ["my-model.gguf", "Qwen2.5-7B-Instruct.gguf", "weights"])
def test_a_renamed_gguf_matches_by_its_embedded_template(tmp_path, name):
    """The bundled file under a neutral name, another model's name, no extension: its own template decides."""
    match = explain_match(str(gguf_files.linked(gguf_files.bundled_gguf(), tmp_path, name)))
    assert match == Match("smollm2", (SMOL_FINGERPRINT,))


def test_gguf_metadata_names_outweigh_the_file_name(tmp_path, tmp_path_factory):
    """Gemma 3 270M (a base model: no chat template in the file) called after another model: its
    general.name decides, as its own file name gemma-3-270m-q4_k_m.gguf would."""
    other = gguf_files.other_family_gguf(tmp_path_factory)
    for name in ("my-model.gguf", "Qwen2.5-7B-Instruct.gguf"):
        match = explain_match(str(gguf_files.linked(other, tmp_path, name)))
        by_name = ("name: GGUF general.name 'Gemma 3 270m', read as 'Gemma-3-270m' matches the name rule "
                   "r'gemma-3' -> gemma3")
        assert match == Match("gemma3", (by_name,))
    assert match_template(str(other)) == "gemma3"


def test_gguf_evidence_in_order_of_strength(tmp_path):
    """Embedded template > general.name > general.basename > file name, on files whose metadata says so."""
    smol = read_gguf_metadata(gguf_files.bundled_gguf(), ["tokenizer.chat_template"])["tokenizer.chat_template"]
    write = gguf_files.metadata_only
    template_first = write(tmp_path / "Phi-3-mini.gguf", "llama", general_name="Qwen2.5 7B Instruct",
                           tokenizer_chat_template=smol)
    assert explain_match(str(template_first)) == Match("smollm2", (SMOL_FINGERPRINT,))
    both = write(tmp_path / "Phi-3-mini-2.gguf", "llama", general_name="InternLM2 Chat 7B", general_basename="qwen2.5")
    by_name = ("name: GGUF general.name 'InternLM2 Chat 7B', read as 'InternLM2-Chat-7B' matches the name rule "
               "r'internlm2-chat' -> internlm2")
    assert explain_match(str(both)).evidence == (by_name,)
    basename = write(tmp_path / "Phi-3-mini-3.gguf", "llama", general_basename="qwen2.5")
    assert match_template(str(basename)) == "qwen2.5"
    nameless = write(tmp_path / "Phi-3-mini-4.gguf", "phi3")
    assert explain_match(str(nameless)).evidence == (
        "name: path 'Phi-3-mini-4.gguf' matches the name rule r'phi-3' -> phi3",)


def test_a_gguf_with_a_template_of_its_own_and_no_known_name(tmp_path):
    """Nothing built-in fits: the error says the llamacpp backend uses the file's own template."""
    custom = gguf_files.metadata_only(tmp_path / "model-q4.gguf", "internlm2", tokenizer_chat_template=CUSTOM)
    with pytest.raises(ModelMatchError, match="renders it as shipped") as info:
        match_template(str(custom))
    assert info.value.candidates == ["internlm2", "internlm2.5"]  # what its architecture fits
    assert "general.architecture 'internlm2' fits" in str(info.value)


@NEEDS_OFFICIAL_TEXTS
def test_gguf_architecture_breaks_a_fingerprint_tie(tmp_path):
    path = gguf_files.metadata_only(tmp_path / "model-q4.gguf", "gemma2", tokenizer_chat_template=official("gemma"))
    match = explain_match(str(path))
    assert match.name == "gemma2"
    assert match.evidence[1] == "GGUF: general.architecture 'gemma2' narrows gemma, gemma2 -> gemma2"


def test_match_command_on_a_gguf_says_which_evidence(tmp_path, tmp_path_factory):
    out = lmchat_match(str(gguf_files.linked(gguf_files.bundled_gguf(), tmp_path, "my-model.gguf")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["smollm2", "  " + SMOL_FINGERPRINT]
    other = gguf_files.linked(gguf_files.other_family_gguf(tmp_path_factory), tmp_path, "model.gguf")
    data = json.loads(lmchat_match("--json", str(other)).stdout)
    assert data["template"] == "gemma3" and data["evidence"][0].startswith("name: GGUF general.name 'Gemma 3 270m'")
