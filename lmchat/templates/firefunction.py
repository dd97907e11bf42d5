"""Fireworks' FireFunction v2 (Llama 3 70B): Llama 3 header blocks, calls as `` functools[{...}, ...]``.

Rendered from code, byte-exact with ``fireworks-ai__llama-3-firefunction-v2``. The template does not read
``tools``: its system block prints two template variables, ``functions`` (the tools as the JSON spec the model
reads) and ``datetime`` (today, as text), and the official template fails without them. A caller may give them
(``template_kwargs``); otherwise they are derived from the request as the model card's example derives them,
``json.dumps(tools)`` and the session's date (:meth:`FirefunctionV2.official_variables`), and the conformance
tests give the official template the same.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidMessages, TemplateConfigError, TemplateRuleError
from ..jsontypes import JSON, JSONObject
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import jstr

BOT, EOT = "<|begin_of_text|>", "<|eot_id|>"
ROLES = ("system", "user", "assistant", "tool")
DEFAULT_SYSTEM = "You are a helpful assistant with access to functions."
INSTRUCTIONS = """In addition to plain text responses, you can chose to call one or more of the provided functions.

Use the following rule to decide when to call a function:
  * if the response can be generated from your internal knowledge (e.g., as in the case of queries like "What is \
the capital of Poland?"), do so
  * if you need external information that can be obtained by calling one or more of the provided functions, \
generate a function calls

If you decide to call functions:
  * prefix function calls with functools marker (no closing marker required)
  * all function calls should be generated in a single JSON list formatted as functools[{"name": [function name], \
"arguments": [function arguments as JSON]}, ...]
  * follow the provided JSON schema. Do not hallucinate arguments or values. Do to blindly copy values from the \
provided samples
  * respect the argument type formatting. E.g., if the type if number and format is float, write value 7 as 7.0
  * make sure you pick the right functions that match the user intent

Available functions as JSON spec:"""


def block(role: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n"


def _variable(chat: Chat, name: str) -> str:
    value = chat.kwargs[name] if name in chat.kwargs else FirefunctionV2.official_variables(chat.tools, chat.date)[name]
    if not isinstance(value, str):
        raise TemplateConfigError(f"expected a string, got {type(value).__name__}", field=name)
    return value


# Any here: a message and the template variables as the template reads them: any value Jinja may read
def _trimmed(message: Mapping[str, Any]) -> str:
    """``message['content'] | default('', true) | trim``: a falsy content is ''."""
    content = message.get("content")
    return jstr(content).strip() if content else ""


def _call(call: JSON, i: int) -> str:
    fn = call.get("function") if isinstance(call, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    arguments = fn.get("arguments") if isinstance(fn, Mapping) else None
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise InvalidMessages("each tool call needs a function with a name and arguments as a JSON string",
                              index=i, field="tool_calls")
    return '{"name": "' + name + '", "arguments": ' + arguments + "}"


_DECODER = json.JSONDecoder()
_HEAD = re.compile(r'\{"name": "([^"\\]+)", "arguments": ')


def split_answer(answer: str) -> dict[str, JSON]:
    """An answer as the message the history renders: the text before `` functools[`` as content, the list as
    calls with their arguments as written. An answer the template would not render back as written (text
    around it with edge whitespace, a list in another layout) stays content as it is."""
    start = answer.find(" functools[")
    content = answer[:max(start, 0)]
    if start < 0 or content != content.strip():
        return {"content": answer}
    calls: list[JSONObject] = []
    pos = start + len(" functools[")
    while True:
        head = _HEAD.match(answer, pos)
        if head is None:
            return {"content": answer}
        try:
            _, end = _DECODER.raw_decode(answer, head.end())
        except ValueError:
            return {"content": answer}
        calls.append({"id": f"call_{len(calls)}", "type": "function",
                      "function": {"name": head.group(1), "arguments": answer[head.end():end]}})
        if answer.startswith("}, ", end):
            pos = end + 3
        elif answer[end:] == "}]":
            return {"content": content, "tool_calls": calls}
        else:
            return {"content": answer}


@template("firefunction-v2", "llama-3-firefunction-v2", "firefunction_v2")
class FirefunctionV2(BaseTemplate):
    """FireFunction v2: a system block (the first system message, trimmed, else a default prompt) followed by the
    function-calling instructions, ``functions`` and ``Today is {datetime}.``; every other message trimmed in a
    Llama 3 block, an answer's calls after its text as `` functools[{"name": ..., "arguments": ...}, ...]``.

    Roles other than system, user, assistant and tool (in any case; the header prints them lowercased) are
    refused. The assistant block that opens the answer is always rendered, even without a generation prompt.
    Content is trimmed, so a committed answer is split into its text and calls (:func:`split_answer`): the
    history then renders `` functools[...]`` back as the model wrote it.
    """
    call_arguments = "text"  # its template prints function.arguments as they are

    official = "fireworks-ai__llama-3-firefunction-v2"
    hyperparameter_source = "LMDeploy defaults (no model-specific values known); 8K context (Llama 3)"
    hf_special_tokens = {"bos_token": BOT}
    prefix_stable = True
    supports_tools = True
    tool_format = "firefunction_v2"

    session_len: int = 8192
    bos: str = BOT
    eoa: str = EOT
    stop_words: tuple[str, ...] | None = stops(EOT)

    @classmethod
    def official_variables(cls, tools: JSON, date: _dt.date | None) -> dict[str, Any]:
        """``functions``: the request's tools as JSON (``[]`` without tools); ``datetime``: the day, as the model
        card's example passes ``json.dumps(functions)`` and the date to ``apply_chat_template``."""
        try:
            functions = json.dumps([] if tools is None else tools, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise TemplateConfigError(f"tools must be JSON: {exc}", field="tools") from None
        return {"functions": functions, "datetime": (date or _dt.date.today()).isoformat()}

    def answer_fields(self, answer: str) -> dict[str, JSON]:
        return split_answer(answer)

    def check(self, chat: Chat) -> None:
        super().check(chat)
        for i, message in enumerate(chat.messages):
            if message["role"].lower() not in ROLES:
                raise TemplateRuleError(
                    "roles", f"Invalid role {message['role']}. Only {', '.join(ROLES)} are supported.",
                    index=i, field="role")

    def header(self, chat: Chat) -> str:
        suffix = INSTRUCTIONS + "\n" + _variable(chat, "functions") + "\nToday is " + _variable(chat, "datetime") + "."
        first = chat.messages[0] if chat.messages else {"role": "user"}
        if first["role"].lower() == "system":
            content = first.get("content")
            system = (jstr(content).strip() if "content" in first else "") + "\n"
        else:
            system = DEFAULT_SYSTEM + "\n"
        return self.bos + block("system") + system + suffix + EOT

    def piece(self, chat: Chat, i: int) -> str:
        message = chat.messages[i]
        role = message["role"].lower()
        if role not in ROLES:
            raise TemplateRuleError("roles", f"Invalid role {message['role']}.", index=i, field="role")
        if i == 0 and role == "system":
            return ""  # in the header's system block
        out = block(role) + _trimmed(message)
        calls = message.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise InvalidMessages("tool_calls must be a list of calls", index=i, field="tool_calls")
            out += " functools[" + ", ".join(_call(c, i) for c in calls) + "]"
        return out + EOT

    def tail(self, chat: Chat) -> str:
        return block("assistant")
