"""Nous Research's Hermes models: ChatML after Llama 3's bos, and their ``tool_use`` template.

Hermes 2 Pro and Hermes 3 ship two templates each: a default one (plain ChatML; Hermes 3's adds a default
system prompt) and a ``tool_use`` one, the same text for both, which transformers renders whenever ``tools`` are
given (``tools=[]`` too). These templates switch alike: with tools the rendering is :mod:`.hermes_tools`'s.
"""
from __future__ import annotations

import attrs

from ..registry import template
from .base import stops
from .chat import Chat
from .chatml import IM_END, ChatML
from .hermes_tools import tool_use_piece, tools_system

BOT = "<|begin_of_text|>"


@attrs.frozen(kw_only=True)
class _Hermes(ChatML):
    """ChatML after ``<|begin_of_text|>``; with tools, the ``tool_use`` template's system block, calls and results.

    In a session with tools a tool result that ends the conversation closes its block with ``<|im_end|>`` and
    no newline (the generation prompt follows at once); once more messages follow, the official template puts
    ``\\n`` before that ``<|im_end|>``, which rewrites the history: the turn after a result is a reset.
    """

    hf_special_tokens = {"bos_token": BOT, "eos_token": IM_END}
    supports_tools = True
    tool_format = "hermes"

    bos: str = BOT
    stop_words: tuple[str, ...] | None = stops(IM_END)

    def header(self, chat: Chat) -> str:
        if chat.tools is None:
            return super().header(chat)
        return self.bos + tools_system(chat.tools)

    def piece(self, chat: Chat, i: int) -> str:
        if chat.tools is None:
            return super().piece(chat, i)
        return tool_use_piece(chat, i)


@template("hermes-2-pro", "Hermes-2-Pro-Llama-3-8B", "hermes2-pro", "hermes-2-pro-llama-3")
class Hermes2Pro(_Hermes):
    """Hermes-2-Pro-Llama-3: plain ChatML after Llama 3's bos, no default system prompt."""

    official = "NousResearch__Hermes-2-Pro-Llama-3-8B"
    official_tool_use = "NousResearch__Hermes-2-Pro-Llama-3-8B-tool_use"
    hyperparameter_source = "Hermes-2-Pro-Llama-3-8B model card: 8K context (Llama 3); sampling: LMDeploy defaults"

    session_len: int = 8192


@template("hermes3", "hermes-3", "hermes")
class Hermes3(_Hermes):
    """Hermes-3-Llama-3.1: ChatML after Llama 3's bos, with a default system prompt."""

    official = "NousResearch__Hermes-3-Llama-3.1-8B"
    official_tool_use = "NousResearch__Hermes-3-Llama-3.1-8B-tool_use"
    hyperparameter_source = "Hermes-3 model card (Llama 3.1 context, 128K; sampling defaults otherwise)"

    session_len: int = 131072
    meta_instruction: str | None = "You are a helpful assistant."
