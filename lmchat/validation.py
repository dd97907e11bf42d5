"""Checks on input before anything is stored: messages, tool schemas, injected special tokens.

Templates reject what their official counterpart rejects (alternation, system
roles); these checks add what a server must refuse whatever the template:
unknown roles, content of the wrong type or over a size limit, tool results
whose ``tool_call_id`` answers no call of the last assistant turn, malformed
tool schemas, and — under the ``'reject'`` injection policy — special-token
strings typed into content.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .errors import ConfigError, InvalidMessages, TextTooLong, ToolsUnsupported
from .jsontypes import JSON

if TYPE_CHECKING:  # templates validate through this module: no import at run time
    from .templates.base import BaseTemplate

#: roles some supported family renders (Granite 3.0: a call as ``assistant_tool_call``, its result as
#: ``tool_response``); anything else is a client error
KNOWN_ROLES = frozenset(
    {"system", "developer", "user", "assistant", "tool", "ipython", "function", "environment", "observation",
     "assistant_tool_call", "tool_response"}
)
DEFAULT_MAX_CHARS = 1_000_000
#: the most messages (or Responses input items) one request may carry
MAX_MESSAGES = 100_000
TOOL_CHOICES = ("none", "auto", "required")
INJECTION_POLICIES = ("split", "reject", "allow")
#: a message as normalised (messages.py): its role a string, its other fields JSON, checked here before use
Message = Mapping[str, JSON]


def handles_tools(template: object) -> bool:
    """True when the template renders tools into the prompt or knows the syntax its model calls them in."""
    return bool(getattr(template, "supports_tools", False)) or getattr(template, "tool_format", "plain") != "plain"


def check_tools_supported(template: object, tools: JSON, field: str = "tools") -> None:
    """Refuse tools a template would silently ignore (neither rendered nor parsed), before anything is stored."""
    if tools and not handles_tools(template):
        raise ToolsUnsupported(getattr(template, "name", None) or type(template).__name__, field=field)


def validate_tools(tools: JSON) -> None:
    """OpenAI function schemas: ``[{"type": "function", "function": {"name": ..., "parameters": {...}}}]``."""
    if tools is None:
        return
    if not isinstance(tools, list):
        raise InvalidMessages(f"expected a list of tool schemas, got {type(tools).__name__}", field="tools")
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise InvalidMessages("a tool schema must be an object", field=where)
        if tool.get("type", "function") != "function":
            raise InvalidMessages(f"unsupported tool type {tool.get('type')!r}", field=f"{where}.type")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise InvalidMessages("missing 'function' object", field=f"{where}.function")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidMessages("a function needs a non-empty string name", field=f"{where}.function.name")
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise InvalidMessages("parameters must be a JSON schema object", field=f"{where}.function.parameters")


def _check_content(message: Message, index: int, max_chars: int | None) -> None:
    content = message.get("content")
    if content is None:
        if message["role"] not in ("assistant", "tool"):
            raise InvalidMessages("missing content", index=index, field="content")
        return
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise InvalidMessages("content parts must be objects with a 'type'", index=index, field=f"content[{j}]")
        size = sum(len(p.get("text", "")) for p in content if isinstance(p.get("text"), str))
    elif isinstance(content, str):
        size = len(content)
    else:
        raise InvalidMessages(f"expected text, got {type(content).__name__}", index=index, field="content")
    if max_chars is not None and size > max_chars:
        raise TextTooLong(size, max_chars, index=index, field="content")


def check_text(text: str | None, field: str, max_chars: int | None = DEFAULT_MAX_CHARS) -> None:
    """A text that becomes a message (a system prompt, Responses ``instructions``) under the limit message
    content has: the same text is refused whichever field carries it."""
    if text is not None and max_chars is not None and len(text) > max_chars:
        raise TextTooLong(len(text), max_chars, field=field)


def check_tool_choice(choice: JSON, names: Sequence[str], chat: bool = True) -> None:
    """``tool_choice`` must name a tool the request gives: ``'required'`` or a named function without it
    would be an order the model cannot follow. ``chat``: the chat shape (``{"type": "function",
    "function": {"name"}}``), else Responses' (``{"type": "function", "name"}``, ``allowed_tools``)."""
    if choice is None or choice == "none" or choice == "auto":
        return
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise ConfigError(f"must be one of {', '.join(TOOL_CHOICES)} or a function, got {choice!r}",
                              field="tool_choice")
        if not names:
            raise ConfigError(f"{choice!r} needs tools to choose from: the request gives none", field="tool_choice")
        return
    if not isinstance(choice, dict):
        raise ConfigError("must be a string or an object", field="tool_choice")
    if choice.get("type") == "allowed_tools" and not chat:
        listed = choice.get("tools")
        if not isinstance(listed, list) or not listed:
            raise ConfigError("allowed_tools lists the tools the model may call", field="tool_choice.tools")
        for i, tool in enumerate(listed):
            name = tool.get("name") if isinstance(tool, dict) else None
            _named(name, names, f"tool_choice.tools[{i}].name")
        return
    if choice.get("type") != "function":
        raise ConfigError(f"only function tools can be chosen, got type {choice.get('type')!r}",
                          field="tool_choice.type")
    if chat:
        fn = choice.get("function")
        _named(fn.get("name") if isinstance(fn, dict) else None, names, "tool_choice.function.name")
    else:
        _named(choice.get("name"), names, "tool_choice.name")


def _named(name: JSON, names: Sequence[str], field: str) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigError("names no tool: give the name of one of the request's tools", field=field)
    if name not in names:
        known = ", ".join(repr(n) for n in names) or "none"
        raise ConfigError(f"no tool {name!r} in the request's tools (its tools: {known})", field=field)


def tool_names(tools: Iterable[JSON] | None) -> list[str]:
    """The function names of OpenAI tool schemas (checked by :func:`validate_tools`)."""
    return [t["function"]["name"] for t in tools or () if isinstance(t, dict) and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str)]


def _check_tool_calls(message: Message, index: int) -> list[str]:
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise InvalidMessages("expected a list", index=index, field="tool_calls")
    ids = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidMessages("a call needs function.name", index=index, field=f"tool_calls[{j}].function.name")
        if not isinstance(fn.get("arguments", {}), (str, dict)):
            raise InvalidMessages("arguments must be a JSON string or object", index=index,
                                  field=f"tool_calls[{j}].function.arguments")
        if isinstance(call.get("id"), str):
            ids.append(call["id"])
    return ids


def open_call_ids(history: Sequence[Message], added: Sequence[Message] = ()) -> set[JSON] | None:
    """Ids of the calls the last assistant turn made (of ``history`` then ``added``), or None when no tool call
    is pending. Walks back to the last user or assistant message only: O(turn)."""
    for message in itertools.chain(reversed(added), reversed(history)):
        if message["role"] == "assistant":
            calls = message.get("tool_calls")  # a list (checked when the message came in)
            if not calls or not isinstance(calls, Iterable):
                return None
            return {c.get("id") for c in calls if isinstance(c, dict)}
        if message["role"] == "user":
            return None
    return None


def located(exc: InvalidMessages, start: int, new: Iterable[object]) -> InvalidMessages:
    """``exc`` marked with where a request's new messages begin (``start``) and how many there are, which a
    server needs to name the request's own field."""
    if exc.first is None:
        exc.first, exc.added = start, len(new) if isinstance(new, Sequence) else None
    return exc


def validate_messages(history: Sequence[Message], new: Iterable[Message], *, start: int,
                      max_chars: int | None = DEFAULT_MAX_CHARS) -> None:
    """Check normalised ``new`` messages appended after ``history`` (indices from ``start``)."""
    try:
        _validate_messages(history, new, start, max_chars)
    except InvalidMessages as exc:
        located(exc, start, new)
        raise


def _validate_messages(history: Sequence[Message], new: Iterable[Message], start: int,
                       max_chars: int | None) -> None:
    added: list[Message] = []  # history is not copied: a turn is O(turn)
    for k, message in enumerate(new):
        index = start + k
        if message["role"] not in KNOWN_ROLES:
            raise InvalidMessages(f"unknown role {message['role']!r} (known: {', '.join(sorted(KNOWN_ROLES))})",
                                  index=index, field="role")
        _check_content(message, index, max_chars)
        _check_tool_calls(message, index)
        call_id = message.get("tool_call_id") if message["role"] == "tool" else None
        if call_id is not None:  # a result that names its call must answer one of the last turn's calls
            pending = open_call_ids(history, added)
            if pending is None or (pending and call_id not in pending):
                raise InvalidMessages(f"tool_call_id {call_id!r} matches no call of the last assistant turn",
                                      index=index, field="tool_call_id")
        added.append(message)


def injected_specials(messages: Iterable[Message], specials: Iterable[str], start: int,
                      answer_markup: Iterable[str] = ()) -> None:
    """The ``'reject'`` policy: name the first special-token string typed into a message.

    An assistant message may hold ``answer_markup`` (its model's tool-call and
    think markers); every other marker is refused anywhere, in any string of
    the message (content, content parts, tool-call arguments, names).
    """
    specials = sorted(set(specials), key=len, reverse=True)
    allowed = set(answer_markup)
    try:
        _injected(messages, specials, start, allowed)
    except InvalidMessages as exc:
        located(exc, start, messages)
        raise


def _injected(messages: Iterable[Message], specials: list[str], start: int, allowed: set[str]) -> None:
    for k, message in enumerate(messages):
        exempt = allowed if message.get("role") == "assistant" else set()
        for field, value in _strings(message):
            text = value
            for marker in exempt:
                text = text.replace(marker, "")
            for token in specials:
                if token and token in text:
                    raise InvalidMessages(f"contains the special token {token!r} (injection policy 'reject')",
                                          index=start + k, field=field)


def _strings(value: JSON, path: str = "") -> Iterable[tuple[str, str]]:
    """Every string inside a message, with the path of the field that holds it (the role aside)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            if not (path == "" and key == "role"):
                yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


_MARKER = re.compile(r"<\|[^|<>\s]+\|>|<｜[^｜\s]+｜>|</?s>|<(?:start|end)_of_turn>|\[/?[A-Z_]{3,}\]")


def template_markers(template: BaseTemplate) -> set[str]:
    """Control strings of a template, for when no tokenizer tells: stop words, eoa, bos, and
    marker-shaped strings (``<|...|>``, ``[INST]``...) in a sample rendering."""
    turns = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]
    found: set[str] = set()
    for sample in ([{"role": "system", "content": "s"}, *turns], turns):
        try:
            found |= set(_MARKER.findall(template.messages2prompt(sample)))
        except ValueError:  # e.g. a template without a system role
            continue
    return found | {w for w in (*(template.stop_words or ()), template.eoa, template.bos) if w}


def one_of(value: str, allowed: tuple[str, ...], field: str) -> str:
    """``value``, when it is one of ``allowed``; else a ConfigError naming ``field``."""
    if value not in allowed:
        raise ConfigError(f"must be one of {', '.join(allowed)}, got {value!r}", field=field)
    return value
