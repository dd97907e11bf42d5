"""DeepSeek: the LLM/V2 ``User:``/``Assistant:`` format and Coder's ``### Instruction:`` (V3, R1 and the
R1 distills, rendered from code: :mod:`.deepseek_v3_r1`).

The model ends an answer with its eos (``<｜end▁of▁sentence｜>``, Coder's
``<|EOT|>``), which the engine does not keep: ``eoa`` is empty and the next
turn's delta injects the rest of the canonical assistant segment (the eos, or
Coder's ``\\n<|EOT|>\\n``), as LMDeploy's deepseek delta prepends the eos.

Coder, V3 and R1 gather system messages into the header (Coder: its default
system prompt only when the conversation has none anywhere), so a system
message appended later rewrites the start of the prompt.
"""
from __future__ import annotations

from ..registry import template
from .affix import AffixTemplate
from .base import stops
from .chat import Chat
from .render_utils import jstr

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
TOKENS = {"bos_token": BOS, "eos_token": EOS}


def system_added(chat: Chat, n_old: int) -> bool:
    """A header built from every system message changes when one is appended."""
    return any(m["role"] == "system" for m in chat.messages[n_old:])


@template("deepseek", "deepseek-chat", "deepseek_moe", "deepseek-moe")
class DeepSeek(AffixTemplate):
    """deepseek-llm-chat: ``User: {q}\\n\\nAssistant: {a}<eos>``, a system prompt is ``{s}\\n\\n``.

    Other roles are skipped. The generation prompt is ``Assistant:`` and history
    renders ``Assistant: {a}``: the model writes the space itself (``lead``), so
    a raw answer `` Hello`` extends the held context and is stored as ``Hello``.
    """

    official = "deepseek-ai__deepseek-llm-7b-chat"
    hyperparameter_source = "deepseek-llm-7b-chat: 4K context; sampling values not known, LMDeploy defaults"
    hf_special_tokens = TOKENS
    other_roles = "skip"
    prefix_stable = True

    session_len: int = 4096
    bos: str = BOS
    eosys: str = "\n\n"
    user: str = "User: "
    eoh: str = "\n\n"
    assistant: str = "Assistant:"  # the generation prompt; history adds a space
    lead: str = " "
    separator: str = EOS
    stop_words: tuple[str, ...] | None = stops(EOS)

    def affixes(self, role: str) -> tuple[str, str]:
        if role == "assistant":
            return self.assistant + " ", self.eoa + self.separator
        return super().affixes(role)


@template("deepseek-v2", "deepseek_v2")
class DeepSeekV2(DeepSeek):
    """DeepSeek-V2(-Lite)-Chat and Coder-V2: the deepseek-llm-chat format."""

    official = "deepseek-ai__DeepSeek-V2-Chat"
    hyperparameter_source = (
        "DeepSeek-V2-Chat config.json max_position_embeddings 163840 (128K advertised); "
        "sampling values not known, LMDeploy defaults"
    )

    session_len: int = 163840


CODER_SYSTEM = (
    "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, "
    "and you only answer questions related to computer science. For politically sensitive questions, security "
    "and privacy issues, and other non-computer science questions, you will refuse to answer\n"
)


@template("deepseek-coder", "deepseek_coder", "deepseekcoder")
class DeepSeekCoder(AffixTemplate):
    """deepseek-coder-instruct: ``### Instruction:\\n{q}\\n### Response:\\n{a}\\n<|EOT|>\\n``.

    A system message prints its content bare, in place; without any system
    message the default prompt follows the bos. Every role other than system
    and user renders as a response. The model stops at ``<|EOT|>``, which the
    next delta supplies with the newlines around it.
    """

    official = "deepseek-ai__deepseek-coder-6.7b-instruct"
    hyperparameter_source = "deepseek-coder-instruct: 16K context; sampling values not known, LMDeploy defaults"
    hf_special_tokens = {"bos_token": BOS, "eos_token": "<|EOT|>"}
    prefix_stable = True
    roles = None

    session_len: int = 16384
    bos: str = BOS
    meta_instruction: str | None = CODER_SYSTEM
    user: str = "### Instruction:\n"
    eoh: str = "\n"
    assistant: str = "### Response:\n"
    separator: str = "\n<|EOT|>\n"
    stop_words: tuple[str, ...] | None = stops("<|EOT|>")

    def header(self, chat: Chat) -> str:
        if self.meta_instruction is not None and not any(m["role"] == "system" for m in chat.messages):
            return self.bos + self.meta_instruction
        return self.bos

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role == "system":  # `{{ content }}`: printed, not concatenated
            content = chat.messages[i].get("content")
            return "" if content is None else jstr(content)
        if role == "user":
            return f"{self.user}{chat.text(i)}{self.eoh}"
        return f"{self.assistant}{chat.text(i)}{self.eoa}{self.separator}"

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        return 0 if system_added(chat, n_old) else super().rerender_from(chat, n_old)
