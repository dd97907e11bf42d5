"""The ChatML family: ``<|im_start|>{role}\\n{content}<|im_end|>\\n``.

The model ends its turn with ``<|im_end|>`` (a stop word the engine keeps);
the ``\\n`` after it is injected by the next turn's delta, as LMDeploy's Qwen
delta starts with ``\\n<|im_start|>user``. Every member is prefix-stable: a
plain conversation never resets. InternLM2/2.5/3, ChatML with InternLM2's
agent format, live in :mod:`.internlm2`.
"""
from __future__ import annotations

from ..registry import template
from .affix import AffixTemplate
from .base import stops

IM_START, IM_END = "<|im_start|>", "<|im_end|>"


@template("chatml")
class ChatML(AffixTemplate):
    """Plain ChatML: any role name, no default system prompt."""

    roles = None
    prefix_stable = True

    system: str = f"{IM_START}system\n"
    eosys: str = f"{IM_END}\n"
    user: str = f"{IM_START}user\n"
    eoh: str = f"{IM_END}\n"
    assistant: str = f"{IM_START}assistant\n"
    eoa: str = IM_END
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(IM_END)

    def affixes(self, role: str) -> tuple[str, str]:
        if role in ("system", "user", "assistant"):
            return super().affixes(role)
        return f"{IM_START}{role}\n", f"{IM_END}\n"


@template("qwen", "qwen_chat", "qwen1.5", "qwen2", "qwen-chat", "qwen-7b", "qwen-14b")
class Qwen(ChatML):
    """Qwen1.5 / Qwen2: ChatML with a default system prompt."""

    official = "Qwen__Qwen1.5-7B-Chat"
    hyperparameter_source = (
        "Qwen1.5-7B-Chat generation_config.json: top_p 0.8, top_k 20, temperature 0.7, "
        "repetition_penalty 1.05; 32K context"
    )

    session_len: int = 32768
    top_p: float = 0.8
    top_k: int | None = 20
    temperature: float = 0.7
    repetition_penalty: float = 1.05
    meta_instruction: str | None = "You are a helpful assistant."
    stop_words: tuple[str, ...] | None = stops(IM_END, "<|endoftext|>")


@template("yi", "yi-chat", "yi-34b-chat", "yi-6b-chat")
class Yi(ChatML):
    """Yi-Chat: ChatML, no default system prompt, no bos."""

    official = "01-ai__Yi-34B-Chat"
    hyperparameter_source = "Yi-34B-Chat generation_config.json: top_p 0.8, temperature 0.7; 4K context"

    session_len: int = 4096
    temperature: float = 0.7
    stop_words: tuple[str, ...] | None = stops(IM_END, "<|endoftext|>")


@template("smollm2", "smollm", "smollm2-instruct")
class SmolLM2(ChatML):
    """SmolLM2-Instruct: ChatML with SmolLM's default system prompt."""

    official = "HuggingFaceTB__SmolLM2-135M-Instruct"
    hyperparameter_source = "SmolLM2-Instruct model card (temperature 0.2, top_p 0.9); 8K context"

    session_len: int = 8192
    top_p: float = 0.9
    temperature: float = 0.2
    meta_instruction: str | None = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    stop_words: tuple[str, ...] | None = stops(IM_END, "<|endoftext|>")
