"""Small helpers that reproduce what official templates do: how Jinja prints values, ``| trim``, alternation."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import TemplateRuleError
from ..jsontypes import JSON
from .chat import Chat

ALTERNATION = "Conversation roles must alternate user/assistant/user/assistant/..."


def tojson(value: JSON, indent: int | None = None) -> str:
    """transformers' ``tojson`` filter: ``json.dumps`` without ASCII or HTML escaping."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


def jstr(value: JSON) -> str:
    """What ``{{ value }}`` prints: ``str()`` of it, nothing for a missing value."""
    if value is None:
        return "None"
    return value if isinstance(value, str) else str(value)


# Any here: a message as a template reads it: any value Jinja may read
def trimmed(item: Mapping[str, Any], key: str = "content") -> str:
    """What ``item[key] | trim`` prints: Jinja's trim stringifies any value, a missing one is ''."""
    return jstr(item[key]).strip() if key in item else ""


def check_alternation(chat: Chat, i: int, first: int = 0, message: str = ALTERNATION) -> None:
    """The rule of Llama-2/Mistral/Gemma templates: user at even positions (from ``first``), else assistant.

    Official templates test ``(role == 'user') != (loop.index0 % 2 == 0)``; only
    the position matters, so the check is local to the message.
    """
    if (chat.role(i) == "user") != ((i - first) % 2 == 0):
        raise TemplateRuleError("alternation", message, index=i, field="role")
