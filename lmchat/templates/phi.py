"""Microsoft Phi-3 and Phi-4: role markers closed by an end marker the model emits.

Phi-3: ``<|{role}|>\\n{content}<|end|>\\n``; Phi-4: ChatML with ``<|im_sep|>``
after the role and nothing between messages. The model ends its turn with
``<|end|>`` / ``<|im_end|>`` (a stop word the engine keeps); Phi-3's ``\\n``
after it comes with the next delta. Roles other than system, user and
assistant are skipped, as the official templates skip them.
"""
from __future__ import annotations

from ..registry import template
from .affix import AffixTemplate
from .base import stops
from .chat import Chat


@template("phi3", "phi-3", "phi3_chat")
class Phi3(AffixTemplate):
    """Phi-3-mini-instruct. Without a generation prompt the rendering ends with the eos."""

    official = "microsoft__Phi-3-mini-4k-instruct"
    hyperparameter_source = "Phi-3-mini-4k-instruct: 4K context; sampling values not known, LMDeploy defaults"
    hf_special_tokens = {"bos_token": "<s>", "eos_token": "<|endoftext|>"}
    prefix_stable = True
    other_roles = "skip"

    session_len: int = 4096
    system: str = "<|system|>\n"
    eosys: str = "<|end|>\n"
    user: str = "<|user|>\n"
    eoh: str = "<|end|>\n"
    assistant: str = "<|assistant|>\n"
    eoa: str = "<|end|>"
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops("<|end|>", "<|endoftext|>")

    def tail(self, chat: Chat) -> str:
        return self.assistant if chat.add_generation_prompt else self.hf_special_tokens["eos_token"]


@template("phi4", "phi-4")
class Phi4(AffixTemplate):
    """phi-4 (14B): ``<|im_start|>{role}<|im_sep|>{content}<|im_end|>``.

    The official template references neither bos nor eos.
    """

    official = "microsoft__phi-4"
    hyperparameter_source = "phi-4 model card: 16K context; sampling values not known, LMDeploy defaults"
    prefix_stable = True
    reasoning = True  # Phi-4-reasoning writes phi-4's format
    other_roles = "skip"

    session_len: int = 16384
    system: str = "<|im_start|>system<|im_sep|>"
    eosys: str = "<|im_end|>"
    user: str = "<|im_start|>user<|im_sep|>"
    eoh: str = "<|im_end|>"
    assistant: str = "<|im_start|>assistant<|im_sep|>"
    eoa: str = "<|im_end|>"
    stop_words: tuple[str, ...] | None = stops("<|im_end|>", "<|endoftext|>")
