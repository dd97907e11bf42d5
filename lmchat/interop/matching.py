"""Which registered template fits a model: ``match_template(path_or_id)``.

Evidence, strongest first:

1. **fingerprint** (local folders and GGUF files): the chat template the model
   ships (a folder's ``chat_template.jinja``, ``tokenizer_config.json``; a
   GGUF's ``tokenizer.chat_template``) is, after normalisation, the official
   text of built-in templates (see :mod:`.fingerprints`). A fine-tuned
   ``checkpoint-500`` folder keeps its tokenizer's template, so it matches
   whatever it is called; so does a GGUF saved as ``my-model.gguf``.
2. **architecture** (``config.json`` ``model_type`` / ``architectures``, a
   GGUF's ``general.architecture``): only narrows the candidates of stronger
   evidence, e.g. gemma and gemma2 ship one official text; it never picks a
   template alone (an architecture serves base, chat and fine-tuned models alike).
3. **name rules**: an ordered list of (pattern, template) tried against each
   component of the id or path (innermost first; a folder's ``config.json``
   ``_name_or_path``, the model it was trained from, right after the folder's
   own name; a GGUF's ``general.name`` and ``general.basename`` before its file
   name: the converter wrote them from the model, the user named the file),
   most specific rule first.

Several candidates with equal evidence, or none, is a :class:`ModelMatchError`
listing the candidates. (The llamacpp backend then uses a GGUF's own template
as shipped: that is no built-in, so it is not this module's answer.)
"""
from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path

import attrs

from ..errors import ModelMatchError, TemplateConfigError
from ..jsonfile import read_json
from ..registry import canonical_name, template_names
from .fingerprints import OFFICIAL_TEXTS, fingerprint, templates_with_fingerprint
from .gguf_meta import GGUFError, is_gguf, read_gguf_metadata
from .jinja_files import shipped_templates

# Base models whose chat tokens were never trained map to XTuner's `default`.
NAME_RULES: list[tuple[str, str]] = [
    (r"baichuan2-.*-chat", "baichuan2_chat"),
    (r"baichuan-.*-chat", "baichuan_chat"),
    (r"baichuan", "default"),
    (r"chatglm2", "chatglm2"),
    (r"chatglm3", "chatglm3"),
    (r"glm-?4\.5(?!v)", "glm-4.5"),
    (r"glm-4-.*chat|glm4", "glm4"),
    (r"deepseek-coder", "deepseek-coder"),
    (r"deepseek-moe|deepseek-llm-.*-chat", "deepseek"),
    (r"deepseek-r1-distill", "deepseek-r1-distill"),
    (r"deepseek-r1", "deepseek-r1"),
    (r"deepseek-v3\.1", "deepseek-v3.1"),
    (r"deepseek-v3", "deepseek-v3"),
    (r"deepseek-v2\.5", "deepseek-v2.5"),
    (r"deepseek-v2", "deepseek-v2"),
    (r"internlm3-.*(instruct|chat)", "internlm3"),
    (r"internlm2[_.-]?5-.*chat", "internlm2.5"),
    (r"internlm2-chat", "internlm2"),
    (r"internlm-chat", "internlm_chat"),
    (r"internlm", "default"),
    # fine-tunes named after their Llama base: before the llama rules
    (r"hermes-2-pro-llama-3", "hermes-2-pro"),
    (r"hermes-3", "hermes3"),
    (r"functionary-.*v3\.1", "functionary-v3.1"),
    (r"functionary-.*v3\.2", "functionary-v3.2"),
    (r"firefunction-v2", "firefunction-v2"),
    (r"codellama-70b-instruct", "codellama-70b"),
    (r"llama-2", "llama2"),
    (r"llama-3\.[13]", "llama3.1"),
    (r"llama-3\.2", "llama3.2"),
    (r"llama-3", "llama3"),
    (r"tinyllama", "tinyllama"),
    (r"vicuna", "vicuna"),
    (r"wizardlm", "wizardlm"),
    (r"llama", "default"),
    (r"mistral-small-3\.2|mistral-small-.*2506", "mistral-small-3.2"),
    (r"mistral-small-3\.1|mistral-small-.*2503", "mistral-small-3.1"),
    (r"mistral-small-(24b-.*2501|2501|3(-|$))", "mistral-small-3"),
    (r"mistral-nemo", "mistral-nemo"),
    (r"mistral-large-(instruct-)?2411", "mistral-large-2411"),
    (r"codestral-22b", "codestral"),
    (r"mixtral-8x22b|mistral-7b-instruct-v0\.3", "mistral-v0.3"),
    (r"mixtral", "mixtral"),
    (r"mistral", "mistral"),
    (r"qwq-(32b-)?preview", "qwq-preview"),
    (r"qwq", "qwq"),
    (r"qwen3-coder", "qwen3-coder"),
    (r"qwen3-.*thinking-2507|qwen3-next-.*thinking", "qwen3-thinking-2507"),
    (r"qwen3-.*instruct-2507|qwen3-next-.*instruct", "qwen3-instruct-2507"),
    (r"qwen3", "qwen3"),
    (r"qwen2\.5", "qwen2.5"),
    (r"qwen.*-(chat|instruct)", "qwen"),
    (r"qwen", "default"),
    (r"zephyr-7b-gemma", "zephyr-gemma"),  # before the gemma rules
    (r"gemma-4-(e\d+b|.*-e\d+b)", "gemma4-e4b"),
    (r"gemma-4", "gemma4"),
    (r"gemma-3", "gemma3"),
    (r"gemma-2-.*-it", "gemma2"),
    (r"gemma-(1\.1-)?\d+b-it", "gemma"),
    (r"gemma", "default"),
    (r"yi-1\.5-.*chat", "yi-1.5"),
    (r"yi-coder-.*chat", "yi-coder"),
    (r"yi-.*chat", "yi"),
    (r"(^|/)yi-", "default"),
    (r"zephyr", "zephyr"),
    (r"phi-3\.5", "phi3.5"),
    (r"phi-3-medium", "phi3-medium"),
    (r"phi-3-small", "phi3-small"),
    (r"phi-3", "phi3"),
    (r"phi-4-mini", "phi4-mini"),
    (r"phi-4-reasoning", "phi4-reasoning"),
    (r"phi-4", "phi4"),
    (r"smollm2", "smollm2"),
    (r"smollm3", "smollm3"),
    (r"falcon3", "falcon3"),
    (r"granite-3\.0", "granite-3.0"),
    (r"granite-3\.3", "granite-3.3"),
    (r"granite-3", "granite3"),
    (r"granite-4\.0", "granite-4.0"),
    (r"openchat-3\.6", "openchat-3.6"),
    (r"openchat", "openchat"),
    (r"gpt-oss", "gpt-oss"),
    (r"kimi-k2-instruct", "kimi-k2"),
    (r"command-r7b", "command-r7b"),
    (r"command-r-plus|command-r-08-2024", "command-r-plus"),
    (r"command-r(-v01)?($|[-_.])", "command-r"),
    (r"solar", "solar"),
    (r"starcoder", "default"),
]
_COMPILED = [re.compile(p) for p, _ in NAME_RULES]

#: normalised ``model_type`` / architecture -> the templates models of that architecture use
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "llama": (
        "llama2", "llama3", "llama3.1", "llama3.2", "tinyllama", "hermes3", "hermes-2-pro", "vicuna", "wizardlm",
        "functionary-v3.1", "functionary-v3.2", "firefunction-v2",
        "deepseek", "deepseek-coder", "deepseek-r1", "deepseek-r1-distill", "yi", "smollm2", "falcon3", "solar",
        "openchat", "yi-1.5", "yi-coder", "codellama-70b", "openchat-3.6",
    ),
    "mistral": (
        "mistral", "mistral-v0.3", "zephyr", "openchat", "mistral-nemo", "codestral", "mistral-small-3",
        "mistral-large-2411",
    ),
    "mistral3": ("mistral-small-3.1", "mistral-small-3.2"),
    "mixtral": ("mixtral", "mistral-v0.3"),
    "qwen2": ("qwen", "qwen2.5", "qwq", "qwq-preview", "deepseek-r1", "deepseek-r1-distill"),
    "qwen3": ("qwen3", "qwen3-instruct-2507", "qwen3-thinking-2507"),
    "qwen3moe": ("qwen3", "qwen3-instruct-2507", "qwen3-thinking-2507", "qwen3-coder"),
    "gemma": ("gemma",),
    "gemma2": ("gemma2",),
    "gemma3": ("gemma3",),
    "gemma3text": ("gemma3",),
    "gemma4": ("gemma4", "gemma4-e4b"),
    "gemma4text": ("gemma4", "gemma4-e4b"),
    "gemma3n": ("gemma3",),
    "internlm": ("internlm-chat-7b", "internlm-chat-7b-8k", "internlm_chat"),
    "internlm2": ("internlm2", "internlm2.5"),
    "internlm3": ("internlm3",),
    "chatglm": ("chatglm2", "chatglm3", "glm4"),
    "glm4moe": ("glm-4.5",),
    "baichuan": ("baichuan_chat", "baichuan2_chat"),
    "deepseek": ("deepseek",),
    "deepseekv2": ("deepseek-v2", "deepseek-v2.5"),
    "deepseekv3": ("deepseek-v3", "deepseek-r1", "deepseek-v3.1"),
    # llama.cpp's one architecture for all of them
    "deepseek2": ("deepseek-v2", "deepseek-v2.5", "deepseek-v3", "deepseek-r1", "deepseek-v3.1"),
    "phi3": ("phi3", "phi4", "phi3.5", "phi3-medium", "phi4-mini", "phi4-reasoning"),
    "phimoe": ("phi3.5",),
    "phi3small": ("phi3-small",),
    "granite": ("granite3", "granite-3.0", "granite-3.3", "granite-4.0"),
    "granitemoe": ("granite3", "granite-3.0", "granite-3.3"),
    # Granite 4.0 H (Mamba-2 hybrid): transformers' model_type, and llama.cpp's architecture
    "granitemoehybrid": ("granite-4.0",),
    "granitehybrid": ("granite-4.0",),
    "smollm3": ("smollm3",),
    "gptoss": ("gpt-oss",),
    "kimik2": ("kimi-k2",),
    # transformers' model_type for Command-R and R+ (llama.cpp's architecture: command-r), and for R7B
    "cohere": ("command-r", "command-r-plus"),
    "commandr": ("command-r", "command-r-plus"),
    "cohere2": ("command-r7b",),
}
_ARCH_SUFFIXES = ("forcausallm", "forconditionalgeneration", "lmheadmodel", "model")
#: the GGUF metadata matching reads (the llamacpp backend passes them from the model it loaded)
GGUF_KEYS = ("tokenizer.chat_template", "general.name", "general.basename", "general.architecture")
#: the GGUF's names, most specific first: ``general.name`` often says "Instruct" or "Chat", the basename never
_GGUF_NAMES = ("general.name", "general.basename")


@attrs.frozen
class Match:
    """The matched template's registered name and the evidence that decided it."""

    name: str
    evidence: tuple[str, ...]


def _rule(component: str) -> tuple[str, str] | None:
    """``(pattern, template)`` of the first name rule matching ``component`` (any case)."""
    key = component.lower()
    for (pattern, template), compiled in zip(NAME_RULES, _COMPILED, strict=True):
        if compiled.search(key):
            return pattern, template
    return None


def match_template(path_or_id: str) -> str:
    """The registered template name for a model id (``org/name``) or a local model folder or file."""
    return explain_match(path_or_id).name


def explain_match(path_or_id: str) -> Match:
    """Like :func:`match_template`, with the evidence that decided."""
    if not os.path.exists(path_or_id):
        if path_or_id.startswith(("/", ".", "~")):  # meant as a path: a typo must not become "no rule matches"
            raise FileNotFoundError(2, "no such model folder or file", path_or_id)
        return _decide(path_or_id, _parts("id", path_or_id, "/"), None, [])  # a hub id: only its name is evidence
    path = os.path.normpath(os.path.abspath(path_or_id))
    if os.path.isdir(path):
        return _explain_folder(path_or_id, path)
    if is_gguf(path):
        try:
            metadata = read_gguf_metadata(path, GGUF_KEYS)
        except GGUFError as exc:
            raise TemplateConfigError(str(exc), source=path_or_id) from None
        return explain_gguf(path_or_id, metadata)
    return _decide(path_or_id, _parts("path", path, os.sep), None, [])


def explain_gguf(path: str, metadata: Mapping[str, object]) -> Match:
    """The match of the GGUF file at ``path`` whose metadata holds ``metadata`` (:data:`GGUF_KEYS`; a missing or
    None value is no evidence): its embedded template, then its architecture and names, then its file name."""
    components = [_gguf_name(key, value) for key in _GGUF_NAMES if isinstance(value := metadata.get(key), str)
                  and value.strip()]
    components += _parts("path", os.path.normpath(os.path.abspath(path)), os.sep)
    evidence: list[str] = []
    source = metadata.get("tokenizer.chat_template")
    candidates = None
    if isinstance(source, str) and source:
        where = "the GGUF's tokenizer.chat_template"
        candidates = _fingerprinted(where, source, evidence, "the llamacpp backend renders it as shipped")
    value = metadata.get("general.architecture")
    arch = _architecture({"model_type": value}, "general.architecture") if isinstance(value, str) else None
    candidates = _narrowed(candidates, arch, evidence, "GGUF")
    return _decide(path, components, candidates, evidence, arch)


def _gguf_name(key: str, value: str) -> tuple[str, str]:
    """``(where, component)`` of a GGUF name, spaced as the name rules read ids (converters write
    ``Qwen2.5 7B Instruct`` for ``Qwen2.5-7B-Instruct``)."""
    spaced = re.sub(r"\s+", "-", value.strip())
    return (f"GGUF {key}", spaced) if spaced == value else (f"GGUF {key} {value!r}, read as", spaced)


def _explain_folder(path_or_id: str, path: str) -> Match:
    components = _parts("path", path, os.sep)
    config_path = os.path.join(path, "config.json")
    config = read_json(config_path, TemplateConfigError) if os.path.isfile(config_path) else {}
    config = config if isinstance(config, dict) else {}
    origin = config.get("_name_or_path")
    if isinstance(origin, str) and origin:
        components[1:1] = _parts("config.json _name_or_path", origin, "/")
    evidence: list[str] = []
    candidates = None
    shipped = shipped_templates(Path(path))
    if shipped is not None and "default" in shipped[1]:
        file, templates = shipped
        hint = f"lmchat render --chat-template {path_or_id} renders it as shipped"
        candidates = _fingerprinted(file, templates["default"], evidence, hint)
    arch = _architecture(config)
    candidates = _narrowed(candidates, arch, evidence, "config.json")
    return _decide(path_or_id, components, candidates, evidence, arch)


def _fingerprinted(where: str, text: str, evidence: list[str], hint: str) -> list[str] | None:
    """The built-in templates whose official text ``text`` is (None: none), said in ``evidence``."""
    digest = fingerprint(text)
    official = templates_with_fingerprint(digest)
    if official:
        files = ", ".join(OFFICIAL_TEXTS[digest])
        evidence.append(f"fingerprint: {where} is the official template of {files} -> {', '.join(official)}")
        return official
    evidence.append(f"fingerprint: {where} is no built-in template's official text ({hint})")
    return None


def _narrowed(candidates: list[str] | None, arch: tuple[str, tuple[str, ...]] | None, evidence: list[str],
              source: str) -> list[str] | None:
    """Several fingerprint candidates narrowed to the architecture's family (when that leaves any)."""
    if not candidates or len(candidates) < 2 or arch is None:
        return candidates
    key, family = arch
    narrowed = [c for c in candidates if c in family]
    if not narrowed:
        return candidates
    evidence.append(f"{source}: {key} narrows {', '.join(candidates)} -> {', '.join(narrowed)}")
    return narrowed


def _parts(where: str, text: str, sep: str) -> list[tuple[str, str]]:
    """``(where, component)`` pairs of an id or path, innermost first."""
    return [(where, part) for part in text.split(sep) if part][::-1]


def _architecture(config: Mapping[str, object], label: str | None = None) -> tuple[str, tuple[str, ...]] | None:
    """``(what config.json says, the templates of that family)`` for a known architecture (``label``: how
    to name the ``model_type`` value when it came from elsewhere)."""
    keys = [("model_type", config.get("model_type"))]
    listed = config.get("architectures")
    keys += [("architectures", a) for a in (listed if isinstance(listed, list) else ()) if isinstance(a, str)]
    for field, value in keys:
        if not isinstance(value, str):
            continue
        key = value.lower().replace("_", "").replace("-", "")
        if field == "architectures":
            key = next((key[: -len(s)] for s in _ARCH_SUFFIXES if key.endswith(s)), key)
        if key in ARCHITECTURES:
            return f"{label or field} {value!r}", tuple(canonical_name(n) for n in ARCHITECTURES[key])
    return None


def _decide(model: str, components: list[tuple[str, str]], candidates: list[str] | None, evidence: list[str],
            arch: tuple[str, tuple[str, ...]] | None = None) -> Match:
    """One template from the stronger evidence so far plus the name rules, or a ModelMatchError."""
    if candidates and len(candidates) == 1:
        return Match(candidates[0], tuple(evidence))
    for where, component in components:
        rule = _rule(component)
        if rule is None:
            continue
        name = canonical_name(rule[1])
        if candidates is None or name in candidates:
            return Match(name, (*evidence, f"name: {where} {component!r} matches the name rule r'{rule[0]}' -> {name}"))
    if candidates:
        reason = "several templates fit with equal evidence; pass --template NAME (" + "; ".join(evidence) + ")"
        raise ModelMatchError(model, reason, candidates)
    reason = "no template matches this model; pass --template NAME or --chat-template FILE"
    if evidence:
        reason += " (" + "; ".join(evidence) + ")"
    if arch is not None:
        raise ModelMatchError(model, f"{reason}; its {arch[0]} fits", arch[1])
    close = _close_names(os.path.basename(os.path.normpath(model)))
    raise ModelMatchError(model, reason if close else f"{reason} (`lmchat templates` lists them)", close)


def _close_names(stem: str) -> list[str]:
    """Templates whose names look like a misspelling of the model's name or of one of its words.

    Only close ones (``Qwn2-7B`` -> qwen, ``lama3`` -> llama3...): a name that resembles none, such
    as ``bar``, gets no candidates rather than unrelated ones.
    """
    stem = stem.lower()
    names = template_names()
    found: set[str] = set()
    for piece in {stem, *re.split(r"[-_.\s]+", stem)}:
        if len(piece) >= 3 and not piece.isdigit():
            found.update(difflib.get_close_matches(piece, names, n=3, cutoff=0.75))
    return sorted(found)
