"""MeetKai's Functionary v3.1 and v3.2 (Llama 3 header blocks), rendered from code.

v3.1 (``meetkai__functionary-medium-v3.1``) lists each tool as ``Use the function 'NAME' to 'DESCRIPTION'``
and its JSON; the model calls ``<function=NAME>{...}</function>``, or runs code after ``<|python_tag|>``.
v3.2 (``meetkai__functionary-medium-v3.2``) declares the tools as a TypeScript-like namespace
(:mod:`.functionary_schema`) and the model writes ``>>>RECIPIENT\\n`` segments: ``all`` for text to the user,
a tool's name for its JSON arguments; its generation prompt ends with the first ``>>>``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..errors import InvalidMessages, TemplateConfigError
from ..jsontypes import JSON, JSONObject
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .functionary_schema import namespace
from .render_utils import jstr, tojson

BOT, EOT, EOM, PYTHON_TAG = "<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"
CALL_FORMAT = (
    "\nThink very carefully before calling functions.\nIf a you choose to call a function ONLY reply in the "
    "following format:\n<{start_tag}={function_name}>{parameters}{end_tag}\nwhere\n\nstart_tag => `<function`\n"
    "parameters => a JSON dict with the function argument name as key and function argument value as value.\n"
    "end_tag => `</function>`\n\nHere is an example,\n"
    '<function=example_function_name>{"example_name": "example_value"}</function>\n\n'
    "Reminder:\n- If looking for real time information use relevant functions before falling back to "
    "brave_search\n- Function calls MUST follow the specified format, start with <function= and end with "
    "</function>\n- Required parameters MUST be specified\n- Only call one function at a time\n"
    "- Put the entire function call reply on one line\n\n"
)
V32_SYSTEM = (
    "You are capable of executing available function(s) if required.\nOnly execute function(s) when absolutely "
    "necessary.\nAsk for the required input to:recipient==all\nUse JSON for function arguments.\nRespond in this "
    "format:\n>>>${recipient}\n${content}\nAvailable functions:\n"
)
V32_PYTHON = (
    "When you send a message containing Python code to python, it will be executed in a stateful Jupyter notebook "
    "environment. python will respond with the output of the execution or time out after 60.0 seconds. The drive "
    "at '/mnt/data' can be used to save and persist user files."
)


def block(role: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n"


def escape(text: str) -> str:
    """markupsafe's escape: v3.1 joins its tool lines to ``"..."|safe`` markup, and markup escapes what is added."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")
            .replace('"', "&#34;"))


def _string(value: JSON, where: str, index: int | None = None) -> str:
    """An operand of Jinja's ``+`` on text: only a string works."""
    if isinstance(value, str):
        return value
    what = "a missing value" if value is None else f"a {type(value).__name__}"
    if index is None:
        raise TemplateConfigError(f"expected a string, got {what}", field=where)
    raise InvalidMessages(f"expected a string, got {what}", index=index, field=where)


# Any here: tools, calls and messages as the template reads them: any value Jinja may read
def _tool_list(tools: JSON) -> list[Any]:
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise TemplateConfigError(f"tools must be a list, got {type(tools).__name__}", field="tools")
    return list(tools)


def _is_code_interpreter(tool: JSON) -> bool:
    return isinstance(tool, Mapping) and tool.get("type") == "code_interpreter"


def _function(call: JSON, i: int) -> Mapping[str, Any]:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        raise InvalidMessages("each tool call needs a function object", index=i, field="tool_calls")
    return fn


def _calls(message: Mapping[str, Any]) -> list[Any]:
    """``'tool_calls' in message and message['tool_calls']``: the calls, when there are any."""
    calls = message.get("tool_calls")
    if not calls:
        return []
    return list(calls) if isinstance(calls, (list, tuple, Mapping, str)) else [calls]


@attrs.frozen(kw_only=True)
class _Functionary(BaseTemplate):
    """Llama 3 header blocks; every message's content as given (no trim)."""
    call_arguments = "text"  # its templates print function.arguments as they are

    hf_special_tokens = {"bos_token": BOT}
    prefix_stable = True
    supports_tools = True

    bos: str = BOT
    eoa: str = EOT

    def tail(self, chat: Chat) -> str:
        return block("assistant") if chat.add_generation_prompt else ""

    def text_piece(self, chat: Chat, i: int, role: str) -> str:
        return block(role) + _string(chat.messages[i].get("content"), "content", i) + EOT


@template("functionary-v3.1", "functionary-medium-v3.1", "functionary-small-v3.1", "functionary_v3_1")
class FunctionaryV31(_Functionary):
    """Functionary v3.1 (Llama 3.1): ``<function=NAME>{...}</function>`` calls, ``<|python_tag|>`` code.

    The system block holds the knowledge date, with tools their list and the call format (``Environment:
    ipython`` instead of a blank line when a ``code_interpreter`` tool is given). Each listed tool's name,
    description and JSON are HTML-escaped, as the official template's ``|safe`` markup escapes them. An answer
    with calls ends with ``<|eom_id|>``: a committed answer is split into its content and calls
    (:func:`split_v31`), so that the history renders it back as written when the model stopped there (an answer
    with calls that ended with ``<|eot_id|>`` resets the session). Results are ``ipython`` blocks.
    """

    official = "meetkai__functionary-medium-v3.1"
    hyperparameter_source = "LMDeploy defaults (no model-specific values known); 128K context (Llama 3.1)"
    tool_format = "functionary_v3_1"

    session_len: int = 131072
    stop_words: tuple[str, ...] | None = stops(EOT, EOM, "<|end_of_text|>")

    def answer_fields(self, answer: str) -> dict[str, JSON]:
        return split_v31(answer)

    def header(self, chat: Chat) -> str:
        tools = _tool_list(chat.tools)
        interpreter = any(_is_code_interpreter(t) for t in tools)
        if interpreter:
            tools = [t for t in tools if not _is_code_interpreter(t)]
        out = [self.bos, block("system"), "Environment: ipython\n\n" if interpreter else "\n",
               "Cutting Knowledge Date: December 2023\n\n"]
        if tools:
            out.append("\nYou have access to the following functions:\n\n")
            out.extend(self.tool_line(t) + "\n\n" for t in tools)
            out.append(CALL_FORMAT)
        return "".join(out) + EOT

    @staticmethod
    def tool_line(tool: JSON) -> str:
        if not isinstance(tool, Mapping):
            raise TemplateConfigError(f"each tool must be an object, got {type(tool).__name__}", field="tools")
        fn = tool.get("function") if "type" in tool else tool
        if not isinstance(fn, Mapping):
            raise TemplateConfigError("a tool with a type needs a function object", field="tools")
        name, description = _string(fn.get("name"), "tools"), _string(fn.get("description"), "tools")
        try:
            spec = tojson(fn)
        except (TypeError, ValueError) as exc:
            raise TemplateConfigError(f"tools must be JSON: {exc}", field="tools") from None
        return f"Use the function '{escape(name)}' to '{escape(description)}'\n{escape(spec)}"

    def piece(self, chat: Chat, i: int) -> str:
        message = chat.messages[i]
        role = message["role"]
        if role in ("user", "system"):
            return self.text_piece(chat, i, role)
        if role == "tool":
            return self.text_piece(chat, i, "ipython")
        content = message.get("content")
        out = block(role) + (jstr(content) if content else "")
        calls = _calls(message)
        for call in calls:
            fn = _function(call, i)
            name, arguments = fn.get("name"), _string(fn.get("arguments"), "tool_calls", i)
            if name == "python":
                out += PYTHON_TAG + arguments
            else:
                out += "<function=" + _string(name, "tool_calls", i) + ">" + arguments + "</function>"
        return out + (EOM if calls else EOT)


#: a tool's name as the parser reads it (:data:`lmchat.tools.base.NAME`); its line must be followed by ``{``
_RECIPIENT = re.compile(r"[\w.\-:/]+")
_V31_CALL = re.compile(r"<function=([^>\s]+)>(.*?)</function>", re.S)


def split_v31(answer: str) -> dict[str, JSON]:
    """A v3.1 answer as the message the history renders: the text before the first call as content, then the
    calls written back to back (the interpreter's code to the end); anything else stays content as written."""
    starts = [k for k in (answer.find("<function="), answer.find(PYTHON_TAG)) if k >= 0]
    if not starts:
        return {"content": answer}
    start = min(starts)
    calls: list[JSONObject] = []
    pos = start
    while pos < len(answer):
        match = _V31_CALL.match(answer, pos)
        if match:
            name, arguments, pos = match.group(1), match.group(2), match.end()
        elif answer.startswith(PYTHON_TAG, pos):
            name, arguments, pos = "python", answer[pos + len(PYTHON_TAG):], len(answer)
        else:
            return {"content": answer}
        calls.append({"id": f"call_{len(calls)}", "type": "function",
                      "function": {"name": name, "arguments": arguments}})
    return {"content": answer[:start], "tool_calls": calls}


def split_answer(answer: str) -> dict[str, JSON]:
    """A v3.2 answer (after the prompt's ``>>>``) as the message the history renders: the ``all`` segments'
    text as content, a ``python`` segment or a name followed by JSON a call with its body as the arguments, as
    written; anything else is content as written."""
    content = ""
    calls: list[JSONObject] = []
    for k, segment in enumerate(answer.split(">>>")):
        recipient, newline, body = segment.partition("\n")
        if recipient == "all" and newline:
            content += body
        elif newline and (recipient == "python" or _RECIPIENT.fullmatch(recipient) and body.startswith("{")):
            calls.append({"id": f"call_{len(calls)}", "type": "function",
                          "function": {"name": recipient, "arguments": body}})
        else:
            content += segment if k == 0 else ">>>" + segment  # not a segment: text as written
    return {"content": content, "tool_calls": calls} if calls else {"content": content}


@template("functionary-v3.2", "functionary-medium-v3.2", "functionary-small-v3.2", "functionary_v3_2")
class FunctionaryV32(_Functionary):
    """Functionary v3.2: ``>>>RECIPIENT\\n`` segments, tools as a TypeScript-like namespace.

    The system block always declares ``namespace functions`` (empty without tools); a ``code_interpreter`` tool
    adds a second system block about Python. An answer renders as ``>>>all\\n{content}`` (when there is content)
    and ``>>>NAME\\n{arguments}`` per call, then ``<|eot_id|>``. The generation prompt ends with ``>>>``, so the
    model's text answer starts with ``all\\n`` (its ``lead``); a committed answer is split back into content and
    calls (:func:`split_answer`) so that the history renders what the model wrote.
    """

    official = "meetkai__functionary-medium-v3.2"
    hyperparameter_source = (
        "LMDeploy defaults (no model-specific values known); 8K context (Llama 3, the template's version=v3.llama3)"
    )
    tool_format = "functionary_v3_2"

    session_len: int = 8192
    stop_words: tuple[str, ...] | None = stops(EOT)
    lead: str = "all\n"

    def tail(self, chat: Chat) -> str:
        return block("assistant") + ">>>" if chat.add_generation_prompt else ""

    def answer_fields(self, answer: str) -> dict[str, JSON]:
        return split_answer(answer)

    def header(self, chat: Chat) -> str:
        tools = _tool_list(chat.tools)
        out = self.bos + block("system") + V32_SYSTEM + namespace(tools) + EOT
        if any(_is_code_interpreter(t) for t in tools):
            out += block("system") + V32_PYTHON + EOT
        return out

    def piece(self, chat: Chat, i: int) -> str:
        message = chat.messages[i]
        role = message["role"]
        if role in ("user", "system", "tool"):
            return self.text_piece(chat, i, role)
        content = message.get("content")
        out = block(role)
        if content:
            out += ">>>all\n" + _string(content, "content", i)
        for call in _calls(message):
            fn = _function(call, i)
            out += ">>>" + _string(fn.get("name"), "tool_calls", i) + "\n"
            out += _string(fn.get("arguments"), "tool_calls", i)
        return out + EOT
