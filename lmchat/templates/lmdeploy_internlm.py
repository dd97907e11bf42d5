"""LMDeploy's first InternLM templates, as the seed document defines them byte by byte.

``internlm-chat-7b`` renders ``<|System|>:`` + meta instruction + ``\\n``, then
``<|User|>:{prompt}\\n<|Bot|>:``; later turns start with ``\\n<|User|>:``. The
model ends its answer with ``<eoa>`` (its stop word, kept by the engine); the
``\\n`` after it comes with the next delta.

Two deliberate differences from the seed's ``messages2prompt``: a system
message replaces the meta instruction instead of following it, and answers are
followed by the same ``\\n`` separator that ``decorate_prompt`` puts before the
next turn, so a whole-history rendering equals the concatenated deltas.
"""
from __future__ import annotations

from ..registry import template
from .affix import AffixTemplate
from .base import BaseTemplate, stops

INTERNLM_META = (
    "You are an AI assistant whose name is InternLM (书生·浦语).\n"
    "- InternLM (书生·浦语) is a conversational language model that is developed by Shanghai AI Laboratory "
    "(上海人工智能实验室). It is designed to be helpful, honest, and harmless.\n"
    "- InternLM (书生·浦语) can understand and communicate fluently in the language chosen by the user "
    "such as English and 中文.\n"
)


@template("internlm-7b")
class InternLM7B(BaseTemplate):
    """InternLM-7B base model: completion only, the base sampling settings."""

    hyperparameter_source = "LMDeploy's BaseModel defaults (seed document)"
    prefix_stable = True

    capability: str = "completion"


@template("internlm-20b")
class InternLM20B(InternLM7B):
    """InternLM-20B base model: completion only, 4K context."""

    hyperparameter_source = "LMDeploy's InternLM20B (seed document): session_len 4096"

    session_len: int = 4096


@template("internlm-chat-7b")
class InternLMChat7B(AffixTemplate):
    """InternLM-Chat-7B as LMDeploy's seed template renders it."""

    hyperparameter_source = "LMDeploy's InternLMChat7B (seed document): base defaults, stop word <eoa>"
    prefix_stable = True

    system: str = "<|System|>:"
    meta_instruction: str | None = INTERNLM_META
    eosys: str = "\n"
    user: str = "<|User|>:"
    eoh: str = "\n"
    assistant: str = "<|Bot|>:"
    eoa: str = "<eoa>"
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops("<eoa>")


@template("internlm-chat-7b-8k", "internlm-chat-20b")
class InternLMChat7B8K(InternLMChat7B):
    """InternLM-Chat-7B-8K and InternLM-Chat-20B: the 7B template with an 8K context."""

    hyperparameter_source = "LMDeploy's InternLMChat7B8K (seed document): session_len 8192"

    session_len: int = 8192
