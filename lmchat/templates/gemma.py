"""The Gemma family: ``<bos><start_of_turn>user\\n{q}<end_of_turn>\\n<start_of_turn>model\\n``.

The model ends its turn with ``<end_of_turn>`` (a stop word the engine
keeps); the ``\\n`` after it is injected by the next turn's delta. Content is
trimmed, so an answer with edge whitespace resets the next delta; plain
conversations never do. User turns sit at even positions and any other role at
odd ones (its name is printed as is; ``assistant`` becomes ``model``).

* ``gemma`` / ``gemma2``: a system message first raises.
* ``gemma3``: an opening system message is prepended, untrimmed and followed
  by a blank line, to the first user turn; content may be a list of typed
  parts (text parts are trimmed, images become ``<start_of_image>``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidMessages, TemplateRuleError
from ..registry import template
from .affix import AffixTemplate
from .base import stops
from .chat import Chat
from .render_utils import check_alternation, trimmed

START, END = "<start_of_turn>", "<end_of_turn>"


@template("gemma", "gemma-it", "gemma-1.1")
class Gemma(AffixTemplate):
    """Gemma-it (1, 1.1): no system role, strict alternation, trimmed content."""

    official = "google__gemma-7b-it"
    hf_special_tokens = {"bos_token": "<bos>", "eos_token": "<eos>"}
    hyperparameter_source = (
        "gemma-7b-it generation_config.json carries no sampling values: LMDeploy defaults; "
        "context 8192 (config.json max_position_embeddings)"
    )
    prefix_stable = True

    session_len: int = 8192
    bos: str = "<bos>"
    user: str = f"{START}user\n"
    eoh: str = f"{END}\n"
    assistant: str = f"{START}model\n"
    eoa: str = END
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(END)

    def affixes(self, role: str) -> tuple[str, str]:
        if role in ("user", "assistant"):
            return super().affixes(role)
        return f"{START}{role}\n", self.eoh

    def piece(self, chat: Chat, i: int) -> str:
        if i == 0 and chat.role(0) == "system":
            raise TemplateRuleError("system-unsupported", "System role not supported", index=0, field="role")
        check_alternation(chat, i)
        prefix, suffix = self.affixes(chat.messages[i]["role"])
        return f"{prefix}{trimmed(chat.messages[i], 'content')}{suffix}"


@template("gemma2")
class Gemma2(Gemma):
    """Gemma-2-it: the Gemma format."""

    official = "google__gemma-2-2b-it"
    hyperparameter_source = (
        "gemma-2-2b-it generation_config.json carries no sampling values: LMDeploy defaults; "
        "context 8192 (model card)"
    )


@template("gemma3")
class Gemma3(Gemma):
    """Gemma-3-it: the system prompt joins the first user turn; list content is rendered part by part."""

    official = "google__gemma-3-1b-it"
    hf_special_tokens = {"bos_token": "<bos>", "eos_token": "<end_of_turn>"}
    hyperparameter_source = (
        "gemma-3-1b-it generation_config.json (top_k 64, top_p 0.95) with the Gemma team's "
        "temperature 1.0; context 32K for the 1B model (128K for 4B and larger)"
    )

    session_len: int = 32768
    top_p: float = 0.95
    top_k: int | None = 64
    temperature: float = 1.0
    stop_words: tuple[str, ...] | None = stops(END, "<eos>")

    def piece(self, chat: Chat, i: int) -> str:
        first = 1 if chat.role(0) == "system" else 0
        if i < first:
            self._system_prefix(chat)  # upstream evaluates it even when no turn follows
            return ""
        check_alternation(chat, i, first)
        prefix, suffix = self.affixes(chat.messages[i]["role"])
        lead = self._system_prefix(chat) if first and i == first else ""
        return f"{prefix}{lead}{self._content(chat.messages[i], i)}{suffix}"

    @staticmethod
    def _system_prefix(chat: Chat) -> str:
        """The system text (or its first part's text), untrimmed, plus a blank line."""
        content = chat.messages[0].get("content")
        if not isinstance(content, str):
            part = content[0] if isinstance(content, list) and content else None
            content = part.get("text") if isinstance(part, Mapping) else None
            if not isinstance(content, str):
                raise InvalidMessages(
                    "expected a string or a list whose first part has a text", index=0, field="content"
                )
        return content + "\n\n"

    # Any here: a message as the template reads it: any value Jinja may read
    @staticmethod
    def _content(message: Mapping[str, Any], i: int) -> str:
        if "content" not in message:
            return ""  # an undefined value iterates as empty upstream
        content = message["content"]
        if isinstance(content, str):
            return content.strip()
        if not isinstance(content, (list, Mapping)):
            raise TemplateRuleError("content-type", "Invalid content type", index=i, field="content")
        # parts that are not typed objects render nothing (a mapping iterates over its keys)
        parts = content if isinstance(content, list) else []
        out = []
        for part in parts:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "image":
                out.append("<start_of_image>")
            elif kind == "text":
                out.append(trimmed(part, "text"))
        return "".join(out)
