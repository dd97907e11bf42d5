"""Which registered template fits a model: ``match_template(path_or_id)``.

Name rules are data: an ordered list of (pattern, template) tried against the
lower-cased model id, most specific first. For a local path every component is
tried from the innermost out, so ``.../Qwen2.5-7B-Instruct/checkpoint-500``
still matches through its parent folder.
"""
from __future__ import annotations

import difflib
import os
import re

from .errors import ModelMatchError
from .registry import canonical_name, template_names

# Base models whose chat tokens were never trained map to XTuner's `default`.
NAME_RULES: list[tuple[str, str]] = [
    (r"baichuan2-.*-chat", "baichuan2_chat"),
    (r"baichuan-.*-chat", "baichuan_chat"),
    (r"baichuan", "default"),
    (r"chatglm2", "chatglm2"),
    (r"chatglm3", "chatglm3"),
    (r"glm-4-.*chat|glm4", "glm4"),
    (r"deepseek-coder", "deepseek-coder"),
    (r"deepseek-moe|deepseek-llm-.*-chat", "deepseek"),
    (r"deepseek-r1", "deepseek-r1"),
    (r"deepseek-v3", "deepseek-v3"),
    (r"deepseek-v2", "deepseek-v2"),
    (r"internlm3-.*(instruct|chat)", "internlm3"),
    (r"internlm2[_.-]?5-.*chat", "internlm2.5"),
    (r"internlm2-chat", "internlm2"),
    (r"internlm-chat", "internlm_chat"),
    (r"internlm", "default"),
    (r"llama-2", "llama2"),
    (r"llama-3\.[13]", "llama3.1"),
    (r"llama-3\.2", "llama3.2"),
    (r"llama-3", "llama3"),
    (r"tinyllama", "tinyllama"),
    (r"hermes-3", "hermes3"),
    (r"vicuna", "vicuna"),
    (r"wizardlm", "wizardlm"),
    (r"llama", "default"),
    (r"mixtral-8x22b|mistral-7b-instruct-v0\.3", "mistral-v0.3"),
    (r"mixtral", "mixtral"),
    (r"mistral", "mistral"),
    (r"qwq", "qwq"),
    (r"qwen3", "qwen3"),
    (r"qwen2\.5", "qwen2.5"),
    (r"qwen.*-(chat|instruct)", "qwen"),
    (r"qwen", "default"),
    (r"gemma-3", "gemma3"),
    (r"gemma-2-.*-it", "gemma2"),
    (r"gemma-(1\.1-)?\d+b-it", "gemma"),
    (r"gemma", "default"),
    (r"yi-.*chat", "yi"),
    (r"(^|/)yi-", "default"),
    (r"zephyr", "zephyr"),
    (r"phi-3", "phi3"),
    (r"phi-4", "phi4"),
    (r"smollm2", "smollm2"),
    (r"falcon3", "falcon3"),
    (r"granite-3", "granite3"),
    (r"openchat", "openchat"),
    (r"solar", "solar"),
    (r"starcoder", "default"),
]
_COMPILED = [(re.compile(p), t) for p, t in NAME_RULES]


def match_by_name(model_id: str) -> str | None:
    """The template of the first name rule that matches ``model_id`` (any case), or None."""
    key = model_id.lower()
    for pattern, template in _COMPILED:
        if pattern.search(key):
            return template
    return None


def match_template(path_or_id: str) -> str:
    """The registered template name for a model id (``org/name``) or a local checkpoint path."""
    candidates = [path_or_id]
    if os.path.sep in path_or_id or os.path.exists(path_or_id):
        parts = [p for p in os.path.normpath(os.path.abspath(path_or_id)).split(os.path.sep) if p]
        candidates = parts[::-1]
    for candidate in candidates:
        name = match_by_name(candidate)
        if name is not None:
            return canonical_name(name)
    stem = os.path.basename(os.path.normpath(path_or_id)).lower()
    close = difflib.get_close_matches(stem, template_names(), n=5, cutoff=0.3)
    raise ModelMatchError(path_or_id, "no template matches this model; pass --template NAME", close)
