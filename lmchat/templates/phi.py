"""Microsoft Phi-3 (mini, medium, small, 3.5) and phi-4: role markers closed by an end marker the model emits.

Phi-3: ``<|{role}|>\\n{content}<|end|>\\n``; Phi-4: ChatML with ``<|im_sep|>``
after the role and nothing between messages. The model ends its turn with
``<|end|>`` / ``<|im_end|>`` (a stop word the engine keeps); Phi-3's ``\\n``
after it comes with the next delta. Roles other than system, user and
assistant are skipped, as the official templates skip them (Phi-3-small renders
every role). Phi-4-mini and Phi-4-reasoning are in :mod:`.phi4`.
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


@template("phi3.5", "Phi-3.5-mini-instruct", "phi-3.5-mini-instruct", "phi-3.5", "Phi-3.5-MoE-instruct",
          "phi-3.5-moe-instruct")
class Phi35(Phi3):
    """Phi-3.5-mini-instruct (and Phi-3.5-MoE, which ships the same text): Phi-3-mini's format, 128K context.

    A system message whose content is empty (or missing) is left out, as the official template tests
    ``message['content']`` for truth.
    """

    official = "microsoft__Phi-3.5-mini-instruct"
    hyperparameter_source = (
        "Phi-3.5-mini-instruct model card: 128K context; its generation_config.json sets no sampling values "
        "(LMDeploy defaults)"
    )

    session_len: int = 131072

    def piece(self, chat: Chat, i: int) -> str:
        if chat.role(i) == "system" and not chat.messages[i].get("content"):
            return ""
        return super().piece(chat, i)


@template("phi3-medium", "Phi-3-medium-4k-instruct", "phi-3-medium-4k-instruct", "Phi-3-medium-128k-instruct",
          "phi-3-medium-128k-instruct", "phi-3-medium")
class Phi3Medium(AffixTemplate):
    """Phi-3-medium-instruct: ``<|user|>\\n{q}<|end|>\\n<|assistant|>\\n{a}<|end|>\\n``.

    Every user turn carries the generation prompt, whether or not one is asked for; nothing follows the last
    message. System messages and other roles are skipped, as the official template skips them. The 128K
    model ships the same text; the bundled context is the 4K model's.
    """

    official = "microsoft__Phi-3-medium-4k-instruct"
    hyperparameter_source = "Phi-3-medium-4k-instruct: 4K context; sampling values not known, LMDeploy defaults"
    hf_special_tokens = {"bos_token": "<s>", "eos_token": "<|endoftext|>"}
    prefix_stable = True
    roles = ("user", "assistant")
    other_roles = "skip"

    session_len: int = 4096
    user: str = "<|user|>\n"
    eoh: str = "<|end|>\n<|assistant|>\n"  # the generation prompt is part of the user turn
    eoa: str = "<|end|>"
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops("<|end|>", "<|endoftext|>")

    def tail(self, chat: Chat) -> str:
        return ""


@template("phi3-small", "Phi-3-small-8k-instruct", "phi-3-small-8k-instruct", "Phi-3-small-128k-instruct",
          "phi-3-small-128k-instruct", "phi-3-small")
class Phi3Small(Phi3):
    """Phi-3-small-instruct (tiktoken vocabulary): ``<|endoftext|>`` first, then Phi-3's format for every role.

    Any role renders as ``<|{role}|>\\n{content}<|end|>\\n``. The 128K model ships the same text; the bundled
    context is the 8K model's.
    """

    official = "microsoft__Phi-3-small-8k-instruct"
    hyperparameter_source = "Phi-3-small-8k-instruct: 8K context; sampling values not known, LMDeploy defaults"
    hf_special_tokens = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    roles = None

    session_len: int = 8192
    bos: str = "<|endoftext|>"

    def affixes(self, role: str) -> tuple[str, str]:
        if role in ("system", "user", "assistant"):
            return super().affixes(role)
        return f"<|{role}|>\n", "<|end|>\n"


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
