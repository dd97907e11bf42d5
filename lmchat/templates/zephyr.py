"""The Zephyr format: ``<|{role}|>\\n{content}</s>\\n``, shared by TinyLlama-Chat.

The model ends its answer with ``</s>`` (a stop word the engine keeps); the
``\\n`` after it is injected by the next turn's delta. The generation prompt is
``<|assistant|>\\n``. Content is kept verbatim, so plain conversations never
reset.
"""
from __future__ import annotations

from ..registry import template
from .affix import AffixTemplate
from .base import stops
from .chat import Chat
from .chatml import IM_END, ChatML

EOS = "</s>"


@template("zephyr")
class Zephyr(AffixTemplate):
    """Zephyr-7B-beta: system/user/assistant blocks closed by ``</s>\\n``; other roles render nothing."""

    official = "HuggingFaceH4__zephyr-7b-beta"
    hyperparameter_source = (
        "zephyr-7b-beta model card example (temperature 0.7, top_k 50, top_p 0.95); "
        "8K context (Mistral-7B-v0.1's training length)"
    )
    hf_special_tokens = {"bos_token": "<s>", "eos_token": EOS}
    roles = None
    prefix_stable = True

    session_len: int = 8192
    top_p: float = 0.95
    top_k: int | None = 50
    temperature: float = 0.7
    stop_words: tuple[str, ...] | None = stops(EOS)

    system: str = "<|system|>\n"
    eosys: str = f"{EOS}\n"
    user: str = "<|user|>\n"
    eoh: str = f"{EOS}\n"
    assistant: str = "<|assistant|>\n"
    eoa: str = EOS
    separator: str = "\n"

    def piece(self, chat: Chat, i: int) -> str:
        # the official template skips unknown roles without reading their content
        if chat.role(i) not in ("system", "user", "assistant"):
            return ""
        return super().piece(chat, i)


@template("tinyllama", "tinyllama-chat")
class TinyLlama(Zephyr):
    """TinyLlama-1.1B-Chat-v1.0: the Zephyr format."""

    official = "TinyLlama__TinyLlama-1.1B-Chat-v1.0"
    hyperparameter_source = (
        "TinyLlama-1.1B-Chat-v1.0 model card example (temperature 0.7, top_k 50, top_p 0.95); 2K context"
    )

    session_len: int = 2048


@template("zephyr-gemma", "zephyr-7b-gemma", "zephyr-7b-gemma-v0.1")
class ZephyrGemma(ChatML):
    """Zephyr-7B-Gemma-v0.1: ChatML on Gemma's tokenizer, ``<bos>`` first when the conversation opens with a user
    or system message; a rendering without the generation prompt that ends with an answer closes with ``<eos>``."""

    official = "HuggingFaceH4__zephyr-7b-gemma-v0.1"
    hyperparameter_source = (
        "zephyr-7b-gemma-v0.1 model card example as remembered, not checked here (temperature 0.7, top_k 50, "
        "top_p 0.95, stop at <|im_end|>); 8K context (Gemma-7B's)"
    )
    hf_special_tokens = {"bos_token": "<bos>", "eos_token": "<eos>"}

    session_len: int = 8192
    top_p: float = 0.95
    top_k: int | None = 50
    temperature: float = 0.7
    bos: str = "<bos>"
    stop_words: tuple[str, ...] | None = stops(IM_END, "<eos>")

    def header(self, chat: Chat) -> str:
        return self.bos if chat.role(0) in ("user", "system") else ""

    def tail(self, chat: Chat) -> str:
        if chat.add_generation_prompt:
            return self.assistant
        return "<eos>" if chat.role(len(chat.messages) - 1) == "assistant" else ""
