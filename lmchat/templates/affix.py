"""Templates whose every message is ``prefix + content + suffix`` by role: LMDeploy's ``BaseChatTemplate``."""
from __future__ import annotations

from typing import ClassVar

import attrs

from ..errors import InvalidMessages
from .base import BaseTemplate
from .chat import Chat


@attrs.frozen(kw_only=True)
class AffixTemplate(BaseTemplate):
    """Templates whose every message is ``prefix + content + suffix`` by role.

    The header is ``bos`` plus, when the conversation does not open with a
    system message and ``meta_instruction`` is set, the default system prompt.
    An assistant message ends with ``eoa + separator``.
    """

    #: roles this template renders (None: any role, see ``affixes``)
    roles: ClassVar[tuple[str, ...] | None] = ("system", "user", "assistant")
    #: what happens to other roles: 'raise' an error, or 'skip' them silently as some official templates do
    other_roles: ClassVar[str] = "raise"
    #: strip whitespace around content, as templates with ``| trim`` do
    strip_content: ClassVar[bool] = False

    def header(self, chat: Chat) -> str:
        if self.meta_instruction is not None and chat.role(0) != "system":
            return f"{self.bos}{self.system}{self.meta_instruction}{self.eosys}"
        return self.bos

    def affixes(self, role: str) -> tuple[str, str]:
        if role == "system":
            return self.system, self.eosys
        if role == "user":
            return self.user, self.eoh
        if role == "assistant":
            return self.assistant, self.eoa + self.separator
        raise KeyError(role)

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.messages[i]["role"]
        if self.roles is not None and role not in self.roles:
            if self.other_roles == "skip":
                return ""
            raise InvalidMessages(
                f"role {role!r} is not supported by template {self.name!r} (supported: {', '.join(self.roles)})",
                index=i,
                field="role",
            )
        prefix, suffix = self.affixes(role)
        content = chat.text(i)
        if self.strip_content:
            content = content.strip()
        return f"{prefix}{content}{suffix}"
