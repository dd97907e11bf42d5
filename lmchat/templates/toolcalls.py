"""OpenAI tool schemas and tool calls, read the way the agent formats of InternLM2 and ChatGLM3 need them.

Both models were trained on their own tool formats, not on OpenAI's: the
function list without the ``{"type": "function", "function": ...}`` wrapper,
calls as bare name + arguments, and a code interpreter that is not a function
at all. These helpers turn OpenAI-style input into those pieces and reject
what cannot be rendered, naming the message.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import InvalidMessages
from ..jsontypes import JSON, JSONObject
from ..messages import call_arguments
from .chat import Chat

#: call names that address the code interpreter (InternLM2's ``<|interpreter|>``, ChatGLM3's ``interpreter``)
INTERPRETER_NAMES = ("python", "interpreter")


def functions(tools: Sequence[JSON]) -> list[JSON]:
    """The function schemas of an OpenAI ``tools`` list; entries without the wrapper pass unchanged."""
    return [t["function"] if isinstance(t, dict) and t.get("type") == "function" and "function" in t else t
            for t in tools]


def call_function(call: JSON, index: int) -> tuple[str, JSONObject]:
    """The name and ``function`` object of an OpenAI tool call (a bare ``{"name", "arguments"}`` is accepted too)."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidMessages("a tool call needs a function name", index=index, field="tool_calls")
    return fn["name"], fn


def arguments_of(fn: Mapping[str, JSON], index: int) -> JSONObject:
    """A call's arguments as the object these formats rebuild the call from (OpenAI sends a JSON string, LMDeploy
    also accepts ``parameters``), read as everywhere else (:func:`lmchat.messages.call_arguments`); what is not
    an object is refused: these formats could only render it wrong."""
    args = call_arguments(fn.get("arguments", fn.get("parameters")))
    if not isinstance(args, dict):
        raise InvalidMessages("tool call arguments must be a JSON object, or a string holding one", index=index,
                              field="tool_calls")
    return args


def declared(chat: Chat, name: str) -> bool:
    """True when ``name`` is one of the functions passed as ``tools``."""
    return any(isinstance(f, dict) and f.get("name") == name for f in functions(chat.tools or []))


def is_interpreter_call(chat: Chat, name: str) -> bool:
    """A call to ``python``/``interpreter`` runs code, unless the caller declared a function of that name."""
    return name in INTERPRETER_NAMES and not declared(chat, name)


def interpreter_code(fn: Mapping[str, JSON], index: int) -> str:
    """The code of an interpreter call: its ``code`` argument."""
    code = arguments_of(fn, index).get("code")
    if not isinstance(code, str):
        raise InvalidMessages("an interpreter call needs a string 'code' argument", index=index, field="tool_calls")
    return code


def answered_call(chat: Chat, i: int) -> str | None:
    """The function name a ``tool`` message answers: its ``name``, else its ``tool_call_id`` looked up
    in the nearest assistant message before it."""
    m = chat.messages[i]
    name = m.get("name")
    if isinstance(name, str):
        return name
    if m.get("tool_call_id") is None:
        return None
    for j in range(i - 1, -1, -1):
        prev = chat.messages[j]
        if prev["role"] == "assistant":
            for call in prev.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id") == m.get("tool_call_id"):
                    fn = call.get("function", call)
                    return fn.get("name") if isinstance(fn, dict) else None
            return None
    return None
