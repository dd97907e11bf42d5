"""OpenAI's Responses items and lmchat's chat messages, both ways; the ids of responses, items, conversations.

Input items become the messages a session extends with: a ``message`` item
(``input_text``/``output_text`` parts or a string; ``developer`` is a system
message), ``function_call`` items (merged into the assistant message before
them, as its ``tool_calls``), ``function_call_output`` (a ``tool`` message),
``reasoning`` (the next assistant message's ``reasoning_content``). Messages
become items again when a response, its input or a conversation is read:
an assistant message gives a ``reasoning`` item, a ``message`` item and one
``function_call`` item per call.

Ids name where things are, so nothing maps them: a session that the
Responses or Conversations API created has a 32-hex id; its conversation is
``conv_<sid>``, its ``k``-th response ``resp_<sid>_<k>``, and an item is named
by its *serial*, its place among the conversation's items counting deleted
ones (:class:`Serials`): ``msg_<sid>_<serial>``, ``rs_``, ``fco_``, and
``fc_<sid>_<serial>_<j>`` for the ``j``-th call of an answer.
"""
from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Iterator

from ..jsontypes import JSON
from ..messages import Message, call_arguments, flatten_text
from ..templates.base import BaseTemplate
from ..tools import parse_response
from .errors import ApiError
from .wire import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    InputMessage,
    Item,
    ItemPage,
    OutputMessage,
    ReasoningItem,
    Tools,
)

SID = re.compile(r"[0-9a-f]{32}")
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = ("input_text", "output_text", "text")


def bad(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param, code=code)


# ---------------------------------------------------------------------------------------------- ids
def response_id(sid: str, k: int) -> str:
    return f"resp_{sid}_{k}"


def parse_response_id(value: JSON) -> tuple[str, int] | None:
    """(session id, note index) of a response id, or None when it names no response of ours."""
    if not isinstance(value, str) or not value.startswith("resp_"):
        return None
    sid, _, k = value[5:].rpartition("_")
    return (sid, int(k)) if SID.fullmatch(sid) and k.isdigit() and len(k) < 10 else None


def conversation_id(sid: str) -> str:
    return f"conv_{sid}"


def parse_conversation_id(value: JSON) -> str | None:
    sid = value[5:] if isinstance(value, str) and value.startswith("conv_") else ""
    return sid if SID.fullmatch(sid) else None


def parse_item_id(value: str) -> tuple[str, int] | None:
    """(session id, serial) of an item id (a call's index within its answer does not matter here)."""
    kind, _, rest = value.partition("_")
    parts = rest.split("_")
    if kind not in ("msg", "rs", "fc", "fco") or len(parts) != (3 if kind == "fc" else 2):
        return None
    if not SID.fullmatch(parts[0]) or not all(p.isdigit() and len(p) < 10 for p in parts[1:]):
        return None
    return parts[0], int(parts[1])


class Serials:
    """Item serials: a conversation's items numbered in order, deleted ones (``removed``) keeping theirs."""

    def __init__(self, removed: Iterable[int] | None = None) -> None:
        self.removed = sorted(removed or ())

    def serial(self, index: int) -> int:
        """The serial of the item at ``index`` among the items there are now."""
        serial = index
        for r in self.removed:
            if r > serial:
                break
            serial += 1
        return serial

    def index(self, serial: int) -> int | None:
        """Where the item with ``serial`` is now (None: deleted)."""
        at = bisect.bisect_left(self.removed, serial)
        if at < len(self.removed) and self.removed[at] == serial:
            return None
        return serial - at


# ---------------------------------------------------------------------------------------------- tools
def session_tools(tools: list[JSON] | None, param: str = "tools") -> Tools | None:
    """Responses' flat function tools as the session's OpenAI tool schemas."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        where = f"{param}[{i}]"
        if not isinstance(tool, dict):
            raise bad(where, "a tool is an object")
        if tool.get("type") != "function":
            raise bad(f"{where}.type", f"{tool.get('type')!r} tools are not supported: only function tools",
                      "unsupported_value")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise bad(f"{where}.name", "a function tool needs a non-empty string name")
        params = tool.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad(f"{where}.parameters", "parameters is a JSON schema object")
        description = tool.get("description")
        if description is not None and not isinstance(description, str):
            raise bad(f"{where}.description", "a description is a string")
        function = {"name": name, **({"description": description} if description else {}),
                    "parameters": params if params is not None else {"type": "object", "properties": {}}}
        out.append({"type": "function", "function": function})
    return out


def response_tools(tools: Tools | None) -> list[FunctionTool]:
    """The session's tool schemas as Responses' function tools."""
    out: list[FunctionTool] = []
    for tool in tools or ():
        fn = tool.get("function") or {}
        out.append({"type": "function", "name": fn.get("name"), "description": fn.get("description"),
                    "parameters": fn.get("parameters"), "strict": False})
    return out


# ---------------------------------------------------------------------------------------------- input
def _text(content: JSON, param: str, role: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(param, "content is a string or a list of content parts")
    texts = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS or (kind == "refusal" and role == "assistant"):
            text = part.get("refusal" if kind == "refusal" else "text")
            if not isinstance(text, str):
                raise bad(f"{where}.text", "a text part needs a string text")
            texts.append(text)
        elif isinstance(kind, str):
            raise bad(f"{where}.type", f"{kind!r} content is not supported: lmchat serves text models",
                      "unsupported_value")
        else:
            raise bad(where, "a content part is an object with a type")
    return "".join(texts)


def _string(item: dict[str, JSON], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise bad(f"{where}.{key}", f"{key} is a non-empty string")
    return value


def arguments_text(value: JSON) -> str:
    """A session's call arguments as Responses' JSON text (the same text whichever way they were held)."""
    if isinstance(value, str):
        value = call_arguments(value)
        if isinstance(value, str):
            return value
    return json.dumps(value, ensure_ascii=False)


def input_messages(value: JSON, param: str = "input") -> list[Message]:
    """The messages a turn appends for Responses ``input`` (a string, or a list of items)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise bad(param, "input is a string or a list of items")
    messages: list[Message] = []
    reasoning: str | None = None
    merge = False  # the last message is an assistant's that a function_call item may join
    for i, item in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(item, dict):
            raise bad(where, "an input item is an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            given = item.get("role")
            role = ROLES.get(given) if isinstance(given, str) else None  # a list or an object is no role
            if role is None:
                raise bad(f"{where}.role", f"role {item.get('role')!r} is not one of {', '.join(ROLES)}")
            message = {"role": role, "content": _text(item.get("content"), f"{where}.content", role)}
            if role == "assistant" and reasoning is not None:
                message["reasoning_content"], reasoning = reasoning, None
            messages.append(message)
            merge = role == "assistant"
        elif kind == "function_call":
            call = {"id": _string(item, "call_id", where), "type": "function",
                    "function": {"name": _string(item, "name", where),
                                 "arguments": _string(item, "arguments", where)}}  # the session's form
            if not merge:
                messages.append({"role": "assistant", "content": ""})
                if reasoning is not None:
                    messages[-1]["reasoning_content"], reasoning = reasoning, None
            messages[-1].setdefault("tool_calls", []).append(call)
            merge = True
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{where}.output", "tool")
            messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": text})
            merge = False
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            if not isinstance(parts, list):
                raise bad(f"{where}.content", "reasoning content is a list of parts")
            reasoning = "".join(p.get("text", "") for p in parts if isinstance(p, dict) and
                                isinstance(p.get("text"), str))
        elif isinstance(kind, str):
            raise bad(f"{where}.type", f"{kind!r} items are not supported", "unsupported_value")
        else:
            raise bad(where, "an input item has a type (or a role)")
    return messages


# ---------------------------------------------------------------------------------------------- output
def answer_parts(message: Message, template: str | BaseTemplate,
                 tools: Tools | None) -> tuple[str, str | None, list[Message]]:
    """(content, reasoning, calls) of an assistant message: a plain answer is held as the model wrote it."""
    if message.get("tool_calls"):
        return flatten_text(message.get("content")), message.get("reasoning_content"), message["tool_calls"]
    parsed = parse_response(template, flatten_text(message.get("content")), tools=tools)
    return parsed.content, message.get("reasoning_content") or parsed.reasoning_content, []


def answer_items(sid: str, serial: int, content: str, reasoning: str | None, calls: list[Message],
                 status: str = "completed") -> list[Item]:
    """An answer's output items: reasoning, the message (also when empty, if nothing else), the calls."""
    items: list[Item] = []
    if reasoning:
        items.append(reasoning_item(sid, serial, reasoning, status))
    if content or not calls:
        items.append(message_item(sid, serial, content, status))
    items += [call_item(sid, serial, j, call, status) for j, call in enumerate(calls)]
    return items


def reasoning_item(sid: str, serial: int, text: str, status: str = "completed") -> ReasoningItem:
    return {"type": "reasoning", "id": f"rs_{sid}_{serial}", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}], "status": status}


def message_item(sid: str, serial: int, text: str, status: str = "completed") -> OutputMessage:
    return {"type": "message", "id": f"msg_{sid}_{serial}", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def call_item(sid: str, serial: int, j: int, call: Message, status: str = "completed") -> FunctionCall:
    fn = call.get("function") or {}
    return {"type": "function_call", "id": f"fc_{sid}_{serial}_{j}", "call_id": call.get("id") or "",
            "name": fn.get("name") or "", "arguments": arguments_text(fn.get("arguments", {})), "status": status}


def message_items(sid: str, serial: int, message: Message, template: str | BaseTemplate,
                  tools: Tools | None) -> list[Item]:
    """The items of one session message (input or output)."""
    role = message.get("role")
    if role == "assistant":
        return answer_items(sid, serial, *answer_parts(message, template, tools))
    if role == "tool":
        output: FunctionCallOutput = {"type": "function_call_output", "id": f"fco_{sid}_{serial}",
                                      "call_id": message.get("tool_call_id") or "",
                                      "output": flatten_text(message.get("content")), "status": "completed"}
        return [output]
    said: InputMessage = {"type": "message", "id": f"msg_{sid}_{serial}", "role": str(role), "status": "completed",
                          "content": [{"type": "input_text", "text": flatten_text(message.get("content"))}]}
    return [said]


def page(items: Iterator[Item], limit: int, after: str | None) -> ItemPage:
    """A list object of up to ``limit`` items, those after ``after`` (an item id) in the iterator's order."""
    data: list[Item] = []
    skipping, more = after is not None, False
    for item in items:
        if skipping:
            skipping = item["id"] != after
            continue
        if len(data) == limit:
            more = True
            break
        data.append(item)
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": more}
