"""The Mistral family: ``<s>[INST] question[/INST] answer</s>``.

There is no generation prompt: the answer follows ``[/INST]`` directly. The
official templates put a space before each answer, which the model generates
as the ``▁`` of its first token (``lead``), and ``</s>`` after it, which
the model emits as its eos and the engine does not keep. So ``eoa`` is empty
and the next delta re-injects ``</s>`` (the ``separator``).

Raw answers keep that space in the context; the stored content drops it
(``lead``), so plain conversations never reset, except on v0.3, where the
system prompt and tools move to the last user turn.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from ..errors import InvalidMessages, TemplateRuleError
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import check_alternation, jstr, tojson, trimmed

ALTERNATION = "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."
ROLES = "Only user and assistant roles are supported, with the exception of an initial optional system message!"
CALL_ID = "Tool call IDs should be alphanumeric strings with length 9!"


@attrs.frozen(kw_only=True)
class _MistralBase(BaseTemplate):
    """What every Mistral template shares: the markers and the system-message offset."""

    hf_special_tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    hyperparameter_source = (
        "generation_config.json carries no sampling values: LMDeploy defaults; context 32K (model card)"
    )

    session_len: int = 32768
    bos: str = "<s>"
    eosys: str = "\n\n"  # between the system prompt and the user text it is glued to
    #: the space before an answer (the model generates it as its first token's ``▁``);
    #: ``assistant`` (the generation prompt) stays empty, as upstream has none
    lead: str = " "
    eoa: str = ""  # the model's ``</s>`` is its eos, which the engine drops...
    separator: str = "</s>"  # ...so the next delta brings it back
    stop_words: tuple[str, ...] | None = stops("</s>")

    @staticmethod
    def loop_start(chat: Chat) -> int:
        """Index of the first rendered message: an opening system message is folded into a user turn."""
        return 1 if chat.role(0) == "system" else 0


@template("mistral", "mistral-instruct", "Mistral-7B-Instruct", "mistral-v0.2", "mistral-v0.1")
class Mistral(_MistralBase):
    """Mistral-7B-Instruct v0.1/v0.2: `` [INST] {system}\\n\\n{q} [/INST] {a}</s>``.

    The system prompt is glued to the first user turn only; answers are not
    trimmed. Roles must alternate user/assistant after the optional system
    message; any other role raises.
    """

    official = "mistralai__Mistral-7B-Instruct-v0.2"
    prefix_stable = True
    #: the system prompt is glued to the last message when it is a user turn (Codestral), not to the first
    system_on_last: ClassVar[bool] = False

    user: str = " [INST] "
    eoh: str = " [/INST]"

    def piece(self, chat: Chat, i: int) -> str:
        first = self.loop_start(chat)
        if i < first:
            return ""  # rendered inside a user turn
        check_alternation(chat, i, first, ALTERNATION)
        role = chat.role(i)
        if role == "user":
            glued = i == len(chat.messages) - 1 if self.system_on_last else i == first
            system = chat.text(0) + self.eosys if first and glued else ""
            return f"{self.user}{system}{chat.text(i)}{self.eoh}"
        if role == "assistant":
            return f"{self.lead}{chat.text(i)}{self.separator}"
        raise TemplateRuleError("role-unsupported", ROLES, index=i, field="role")


@template("mixtral", "mixtral-instruct", "Mixtral-8x7B-Instruct", "mixtral-8x7b")
class Mixtral(Mistral):
    """Mixtral-8x7B-Instruct: the Mistral v0.1/v0.2 format."""

    official = "mistralai__Mixtral-8x7B-Instruct-v0.1"


# Any here: a message as the template reads it: any value Jinja may read
def _skipped(message: Mapping[str, Any]) -> bool:
    """Messages v0.3's alternation rule ignores: tool results and tool calls."""
    return message["role"] in ("tool", "tool_results") or "tool_calls" in message


def _call_id(value: JSON, i: int, field: str) -> str:
    if not (isinstance(value, str) and len(value) == 9):
        raise TemplateRuleError("tool-call-id", CALL_ID, index=i, field=field)
    return value


class _ToolsOnLastUser:
    """The tool list before every user message equal to the last one, and the alternation that skips tool
    messages: v0.3, Nemo and Small 3.2 (a mixin of methods, no fields)."""

    #: which messages the alternation rule ignores
    skipped = staticmethod(_skipped)

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        """The system prompt moves off message ``n_old - 1``; tools move off earlier user turns.

        The tool list sits before every user message equal to the last one, so
        a new last user message changes the previous last one and any earlier
        copy of either. Finding copies compares messages (no rendering) and
        only runs when tools are set and the last user message changed.
        """
        default = max(0, n_old - 1)
        if chat.tools is None:
            return default
        new = self._last_user(chat, len(chat.messages))
        old = self._last_user(chat, n_old)
        if new is None or old is None or new < n_old or chat.messages[old] == chat.messages[new]:
            return default
        changed = (chat.messages[old], chat.messages[new])
        return min(default, next(j for j in range(old + 1) if chat.messages[j] in changed))

    @staticmethod
    def _last_user(chat: Chat, end: int) -> int | None:
        return next((j for j in range(end - 1, -1, -1) if chat.role(j) == "user"), None)

    def _lists_tools(self, chat: Chat, i: int) -> bool:
        """Whether the tool list goes before user message ``i`` (it equals the last user message)."""
        last = self._last_user(chat, len(chat.messages))
        return chat.tools is not None and last is not None and chat.messages[i] == chat.messages[last]

    def _check_alternation(self, chat: Chat, i: int, first: int) -> None:
        """User turns and other turns alternate, tool messages aside.

        The official check counts the non-tool messages before ``i``; since the
        earlier pieces passed it, comparing with the previous such message is
        equivalent and stays local.
        """
        if self.skipped(chat.messages[i]):
            return
        prev = next((j for j in range(i - 1, first - 1, -1) if not self.skipped(chat.messages[j])), None)
        must_be_user = prev is None or chat.role(prev) != "user"
        if (chat.role(i) == "user") != must_be_user:
            raise TemplateRuleError("alternation", ALTERNATION, index=i, field="role")


@template("mistral-v0.3", "mistral_v0.3", "mixtral-8x22b")
class MistralV3(_ToolsOnLastUser, _MistralBase):
    """Mistral-7B-Instruct-v0.3 / Mixtral-8x22B: ``[INST] {q}[/INST] {a}</s>`` with tools.

    The system prompt goes into the last message when it is a user turn (and
    disappears otherwise); ``[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]`` goes
    before every user message equal to the last one. Calls render as
    ``[TOOL_CALLS] [{"name", "arguments", "id"}]</s>`` and results as
    ``[TOOL_RESULTS] {"content": ..., "call_id": ...}[/TOOL_RESULTS]``; ids must
    be 9 characters. Answers are trimmed. Alternation skips tool messages.
    """

    official = "mistralai__Mistral-7B-Instruct-v0.3"
    supports_tools = True
    tool_format = "mistral"
    #: what follows ``[AVAILABLE_TOOLS]``, ``[TOOL_CALLS]`` and ``[TOOL_RESULTS]`` (Nemo: nothing)
    gap: ClassVar[str] = " "

    user: str = "[INST] "
    eoh: str = "[/INST]"

    def piece(self, chat: Chat, i: int) -> str:
        first = self.loop_start(chat)
        if i < first:
            return ""  # rendered inside the last user turn
        message = chat.messages[i]
        self._check_alternation(chat, i, first)
        role = message["role"]
        if role == "user":
            tools = self._tools(chat) if self._lists_tools(chat, i) else ""
            system = chat.text(0) + self.eosys if first and i == len(chat.messages) - 1 else ""
            return f"{tools}{self.user}{system}{chat.text(i)}{self.eoh}"
        if "tool_calls" in message:  # any role but user
            return self._tool_calls(message, i)
        if role == "assistant":
            return self._answer(chat, i)
        if role in ("tool", "tool_results"):
            content = message.get("content", "")  # a missing content prints as nothing
            if isinstance(content, Mapping) and "content" in content:
                content = content["content"]
            call_id = _call_id(message.get("tool_call_id"), i, "tool_call_id")
            return f'[TOOL_RESULTS]{self.gap}{{"content": {jstr(content)}, "call_id": "{call_id}"}}[/TOOL_RESULTS]'
        raise TemplateRuleError("role-unsupported", ROLES, index=i, field="role")

    def _answer(self, chat: Chat, i: int) -> str:
        """v0.3 trims the answer and puts a space before it."""
        return f"{self.lead}{trimmed(chat.messages[i])}{self.separator}"

    def _tools(self, chat: Chat) -> str:
        """``[AVAILABLE_TOOLS]``: each function's fields but ``return``, strings unescaped as upstream."""
        entries = []
        for tool in chat.tools or ():  # called when there are tools
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if not isinstance(function, Mapping):
                raise InvalidMessages("every tool needs a 'function' object", field="tools")
            fields = ", ".join(
                f'"{key}": "{val}"' if isinstance(val, str) else f'"{key}": {tojson(val)}'
                for key, val in function.items()
                if key != "return"
            )
            entries.append(f'{{"type": "function", "function": {{{fields}}}}}')
        closing = "]" if entries else ""  # upstream closes the list after its last tool only
        return f"[AVAILABLE_TOOLS]{self.gap}[{', '.join(entries)}{closing}[/AVAILABLE_TOOLS]"

    def _tool_calls(self, message: Mapping[str, Any], i: int) -> str:
        calls = message["tool_calls"]
        if not calls:
            return f"[TOOL_CALLS]{self.gap}["  # upstream leaves the list open when there is no call
        if not isinstance(calls, list):
            raise InvalidMessages("expected a list of tool calls", index=i, field="tool_calls")
        rendered = []
        for call in calls:
            if not isinstance(call, Mapping) or "function" not in call:
                raise InvalidMessages("every tool call needs a 'function'", index=i, field="tool_calls")
            # the function object's JSON without its closing brace, then the id
            rendered.append(f'{tojson(call["function"])[:-1]}, "id": "{_call_id(call.get("id"), i, "tool_calls")}"}}')
        return f"[TOOL_CALLS]{self.gap}[{', '.join(rendered)}]{self.separator}"


@template("mistral-nemo", "Mistral-Nemo-Instruct-2407", "mistral-nemo-2407", "mistral-nemo-instruct")
class MistralNemo(MistralV3):
    """Mistral-Nemo-Instruct-2407: v0.3 without its spaces, ``[INST]{q}[/INST]{a}</s>``, answers untrimmed."""

    official = "mistralai__Mistral-Nemo-Instruct-2407"
    hyperparameter_source = (
        "model card: 'Mistral Nemo requires smaller temperatures. We recommend to use a temperature of 0.3'; "
        "context 128K (model card); top_p/top_k: LMDeploy defaults"
    )
    gap = ""

    session_len: int = 131072
    temperature: float = 0.3
    user: str = "[INST]"
    lead: str = ""  # the answer follows [/INST] directly

    def _answer(self, chat: Chat, i: int) -> str:
        return f"{chat.text(i)}{self.separator}"


@template("codestral", "Codestral-22B-v0.1", "codestral-22b")
class Codestral(Mistral):
    """Codestral-22B-v0.1: ``[INST] {q}[/INST] {a}</s>``, the system prompt glued to the last message when it is
    a user turn (and dropped otherwise); no tools; roles alternate strictly; answers untrimmed."""

    official = "mistralai__Codestral-22B-v0.1"
    hyperparameter_source = "no sampling values published (model card, generation_config.json): LMDeploy " \
                            "defaults; context 32K (model card)"
    prefix_stable = False  # the system prompt moves to each new last user turn
    system_on_last = True

    user: str = "[INST] "
    eoh: str = "[/INST]"
