"""Nous Research's Hermes models: ChatML after Llama 3's bos."""
from __future__ import annotations

from ..registry import template
from .chatml import ChatML


@template("hermes3", "hermes-3", "hermes2-pro", "hermes")
class Hermes3(ChatML):
    """Hermes-3-Llama-3.1: ChatML after Llama 3's bos, with a default system prompt."""

    official = "NousResearch__Hermes-3-Llama-3.1-8B"
    tool_format = "hermes"
    hyperparameter_source = "Hermes-3 model card (Llama 3.1 context, 128K; sampling defaults otherwise)"

    session_len: int = 131072
    bos: str = "<|begin_of_text|>"
    meta_instruction: str | None = "You are a helpful assistant."
