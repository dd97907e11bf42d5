"""CodeLlama-70b-Instruct: ``Source: {role}\\n\\n {content} <step> `` per message, a generation prompt that names
its destination.

Rendered from code, byte-exact with ``codellama__CodeLlama-70b-Instruct-hf``. The other CodeLlama instruct
models use Llama 2's ``[INST]`` format (``llama2``).
"""
from __future__ import annotations

from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import check_alternation, trimmed

STEP = "<step>"
PROMPT = "Source: assistant\nDestination: user\n\n "


@template("codellama-70b", "CodeLlama-70b-Instruct-hf", "codellama-70b-instruct", "CodeLlama-70b-Instruct")
class CodeLlama70b(BaseTemplate):
    """CodeLlama-70b-Instruct: ``<s>Source: system\\n\\n {s} <step> Source: user\\n\\n {q} <step> ...``.

    Each message is ``Source: {role}\\n\\n {content | trim} <step> `` (any role: the official template
    prints the role's name), after ``<s>`` for the first. Roles alternate from the first message that is not
    a leading system message: user, then anything else. ``Source: assistant\\nDestination: user\\n\\n `` always
    ends the text, whatever ``add_generation_prompt`` says, and even after a final answer.

    The generation prompt names the destination; an answer in the history does not
    (``Source: assistant\\n\\n {a} <step> ``), so each turn after an answer rewrites the prompt the model
    answered: the session resets, with the reason. The continuation (``sequence_start=False``) is for an engine
    that keeps the answer as the model wrote it after that prompt (:meth:`BaseTemplate._continuation`). The model
    ends its turn with `` <step>``.
    """

    official = "codellama__CodeLlama-70b-Instruct-hf"
    hyperparameter_source = (
        "Code Llama model card (models trained on 16K-token sequences); sampling: LMDeploy defaults (none published)"
    )

    session_len: int = 16384
    bos: str = "<s>"
    assistant: str = PROMPT
    eoa: str = " " + STEP
    separator: str = " "
    stop_words: tuple[str, ...] | None = stops(STEP, "</s>")

    def header(self, chat: Chat) -> str:
        return ""  # the official template prints <s> with the first message, not before an empty conversation

    def piece(self, chat: Chat, i: int) -> str:
        first = -1 if chat.role(0) == "system" else 0  # the official user_index: a leading system message
        check_alternation(chat, i, first=first)
        message = chat.messages[i]
        return f"{self.bos if i == 0 else ''}Source: {message['role']}\n\n {trimmed(message)} {STEP} "

    def tail(self, chat: Chat) -> str:
        return PROMPT
