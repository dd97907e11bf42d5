"""Yi-1.5-Chat and Yi-Coder-Chat: ChatML turns whose generation prompt comes with every user message.

Both official templates print ``<|im_start|>assistant\\n`` right after each user
message, whatever ``add_generation_prompt`` says, and print an answer as
``{content}<|im_end|>\\n``; only a leading system message is printed (Yi-1.5
bare, Yi-Coder in a ChatML system box), and other roles render nothing. The
original Yi-Chat (plain ChatML) is ``yi`` in :mod:`.chatml`.
"""
from __future__ import annotations

from typing import ClassVar

import attrs

from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .chatml import IM_END, IM_START
from .render_utils import jstr


@attrs.frozen(kw_only=True)
class _YiTurns(BaseTemplate):
    """The turns Yi-1.5 and Yi-Coder share; a subclass says how the leading system message is boxed."""

    prefix_stable = True
    #: the system message is concatenated into a box (a string is needed) rather than printed as it is
    boxes_system: ClassVar[bool] = False

    user: str = f"{IM_START}user\n"
    eoh: str = f"{IM_END}\n"
    assistant: str = f"{IM_START}assistant\n"
    eoa: str = IM_END
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(IM_END, "<|endoftext|>")

    def system_box(self, content: str) -> str:
        raise NotImplementedError

    def header(self, chat: Chat) -> str:
        first = chat.messages[0]
        # a missing content leaves the official `system_message` undefined: nothing is printed
        if first["role"] != "system" or "content" not in first:
            return ""
        return self.system_box(chat.text(0) if self.boxes_system else jstr(first["content"]))

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role == "user":
            return f"{self.user}{chat.text(i)}{self.eoh}{self.assistant}"
        if role == "assistant":
            return f"{chat.text(i)}{self.eoa}{self.separator}"
        return ""  # the leading system message is in the header; later ones and other roles are skipped

    def tail(self, chat: Chat) -> str:
        return ""  # the generation prompt came with the last user message


@template("yi-1.5", "Yi-1.5-9B-Chat", "yi-1.5-34b-chat", "yi-1.5-6b-chat", "yi-1.5-chat")
class Yi15(_YiTurns):
    """Yi-1.5-Chat: a leading system message is printed bare, without a box or a line break."""

    official = "01-ai__Yi-1.5-9B-Chat"
    hyperparameter_source = "Yi-1.5-9B-Chat config.json (4K context); sampling: LMDeploy defaults (none published)"

    session_len: int = 4096

    def system_box(self, content: str) -> str:
        return content


@template("yi-coder", "Yi-Coder-9B-Chat", "yi-coder-1.5b-chat", "yi-coder-chat")
class YiCoder(_YiTurns):
    """Yi-Coder-Chat: a leading system message in a ChatML system box."""

    official = "01-ai__Yi-Coder-9B-Chat"
    hyperparameter_source = "Yi-Coder-9B-Chat model card (128K context); sampling: LMDeploy defaults (none published)"
    boxes_system = True

    session_len: int = 131072

    def system_box(self, content: str) -> str:
        return f"{IM_START}system\n{content}{IM_END}\n"
