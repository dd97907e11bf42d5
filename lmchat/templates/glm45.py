"""GLM-4.5 and GLM-4.5-Air (zai-org): GLM's role markers with ``<think>`` reasoning and XML-like tool calls.

Rendered from code, byte-exact with ``zai-org__GLM-4.5-Air`` (GLM-4.5 ships the same text). As in GLM-4
(:mod:`.glm`), no marker ends a turn: the model stops by writing the next role marker, ``<|user|>`` or
``<|observation|>`` (stop words the engine does not keep).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import jstr, tojson

TOOLS_INTRO = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_OUTRO = (
    "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
    "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>"
)
NO_THINK = "/nothink"
EMPTY_THINK = "\n<think></think>"


# Any here: a message and its calls as the template reads them: any value Jinja may read
def visible_text(message: Mapping[str, Any]) -> str:
    """The official ``visible_text`` macro on a message's content: a string as it is, the text parts (and
    bare strings) of a list, anything else printed; a missing content is ''."""
    if "content" not in message:
        return ""  # Jinja's undefined iterates as empty
    content = message["content"]
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        out = []
        for item in content:
            if isinstance(item, Mapping) and item.get("type") == "text":
                out.append(jstr(item["text"]) if "text" in item else "")
            elif isinstance(item, str):
                out.append(item)
        return "".join(out)
    return jstr(content)


def thinking_off(chat: Chat) -> bool:
    """The official ``enable_thinking is defined and not enable_thinking``: given, and false (None too)."""
    return "enable_thinking" in chat.kwargs and not chat.kwargs["enable_thinking"]


def last_user(chat: Chat, n: int) -> int:
    """The official ``ns.last_user_index`` over the first ``n`` messages (-1 without a user message)."""
    return next((i for i in range(n - 1, -1, -1) if chat.role(i) == "user"), -1)


def split_reasoning(message: Mapping[str, Any]) -> tuple[str, str]:
    """(reasoning, content) of an answer as the official template reads them: ``reasoning_content`` when it is a
    string, else the text around a ``</think>`` in the content."""
    content = visible_text(message)
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        return reasoning, content
    if "</think>" not in content:
        return "", content
    reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
    return reasoning, content.split("</think>")[-1].lstrip("\n")


def call_text(call: JSON, i: int) -> str:
    """One call: ``\\n<tool_call>NAME\\n`` then ``<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n`` per
    argument (strings as they are, other values as JSON), then ``</tool_call>``."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    fn = fn if fn else call  # the official `if tc.function`: a call may also be the bare function
    name = fn.get("name") if isinstance(fn, Mapping) else None
    args = fn.get("arguments") if isinstance(fn, Mapping) else None
    if not isinstance(name, str) or not isinstance(args, Mapping):
        raise InvalidMessages("each tool call needs a string function.name and function.arguments as an object",
                              index=i, field="tool_calls")
    pairs = "".join(f"<arg_key>{jstr(k)}</arg_key>\n<arg_value>{v if isinstance(v, str) else tojson(v)}"
                    "</arg_value>\n" for k, v in args.items())
    return f"\n<tool_call>{name}\n{pairs}</tool_call>"


def tool_result(chat: Chat, i: int) -> str:
    """A tool message: a string joins the ``<|observation|>`` block of the results before it; anything else
    opens a block of its own, one ``<tool_response>`` per item (an item's ``output`` if it has one)."""
    m = chat.messages[i]
    content = m.get("content")
    if isinstance(content, str):
        opening = "<|observation|>" if chat.role(i - 1) != "tool" else ""
        return f"{opening}\n<tool_response>\n{content}\n</tool_response>"
    if content is None:
        items: list[Any] = []
    elif isinstance(content, (list, tuple, Mapping)):
        items = list(content)
    else:
        raise InvalidMessages("a tool result must be a string or a list of results", index=i, field="content")
    responses = (jstr(tr["output"]) if isinstance(tr, Mapping) and "output" in tr else jstr(tr) for tr in items)
    return "<|observation|>" + "".join(f"\n<tool_response>\n{r}\n</tool_response>" for r in responses)


@template("glm-4.5", "GLM-4.5-Air", "GLM-4.5", "glm4.5", "glm-4.5-air", "glm4.5-air", "glm45")
class Glm45(BaseTemplate):
    """GLM-4.5 / GLM-4.5-Air: ``[gMASK]<sop>`` then ``<|role|>\\n{content}`` per message, answers with reasoning.

    An answer renders as ``<|assistant|>\\n<think>{reasoning}</think>\\n{content}`` (content stripped, its line
    left out when empty), the reasoning taken from ``reasoning_content`` or from a ``</think>`` in the content;
    only answers after the last user message keep it, earlier ones render ``\\n<think></think>``, so the turn
    after an answer that reasoned is a reset (with the reason). The generation prompt is ``<|assistant|>``: the
    model writes ``\\n<think>...</think>\\n`` itself (``lead``: that block left empty, as an answer without
    reasoning has it). The ``enable_thinking`` template keyword, when given and false, appends ``/nothink`` to
    every user message (unless it ends so) and closes the block in the
    generation prompt (``<|assistant|>\\n<think></think>``).

    Tools are listed in a system block first (one JSON line each); calls follow the content as
    ``<tool_call>NAME\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n...</tool_call>`` (the ``glm45``
    syntax: strings bare, other values as JSON; arguments must be an object); results are
    ``\\n<tool_response>\\n{r}\\n</tool_response>``, consecutive string results in one ``<|observation|>``.
    System messages render where they are; other roles render nothing.
    """

    official = "zai-org__GLM-4.5-Air"
    hyperparameter_source = (
        "GLM-4.5-Air generation_config.json as remembered here (not checked): temperature 0.6, top_p 0.95; "
        "128K context (model card)"
    )
    supports_tools = True
    tool_format = "glm45"
    reasoning = True

    session_len: int = 131072
    top_p: float = 0.95
    temperature: float = 0.6
    bos: str = "[gMASK]<sop>"
    assistant: str = "<|assistant|>"
    #: what the model writes before the content of an answer without reasoning (kept by the engine)
    lead: str = "\n<think></think>\n"
    stop_words: tuple[str, ...] | None = stops("<|user|>", "<|observation|>", "<|endoftext|>")

    def header(self, chat: Chat) -> str:
        if not chat.tools:
            return self.bos
        return self.bos + TOOLS_INTRO + "".join(tojson(t) + "\n" for t in chat.tools) + TOOLS_OUTRO

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role == "user":
            text = visible_text(chat.messages[i])
            suffix = NO_THINK if thinking_off(chat) and not text.endswith(NO_THINK) else ""
            return f"<|user|>\n{text}{suffix}"
        if role == "assistant":
            return self.answer(chat, i)
        if role == "tool":
            return tool_result(chat, i)
        if role == "system":
            return f"<|system|>\n{visible_text(chat.messages[i])}"
        return ""

    def answer(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        reasoning, content = split_reasoning(m)
        keep = i > last_user(chat, len(chat.messages)) and reasoning
        out = f"{self.assistant}\n<think>{reasoning.strip()}</think>" if keep else self.assistant + EMPTY_THINK
        if content.strip():
            out += "\n" + content.strip()
        calls = m.get("tool_calls")
        if calls:
            if not isinstance(calls, (list, tuple)):
                raise InvalidMessages("tool_calls must be a list of calls", index=i, field="tool_calls")
            out += "".join(call_text(call, i) for call in calls)
        return out

    def tail(self, chat: Chat) -> str:
        if not chat.add_generation_prompt:
            return ""
        return self.assistant + (EMPTY_THINK if thinking_off(chat) else "")

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        # answers after the old last user message lose their reasoning once a new one arrives
        return max(0, min(n_old - 1, last_user(chat, n_old) + 1))
