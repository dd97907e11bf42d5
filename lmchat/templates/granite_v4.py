"""IBM Granite 4.0: Granite 3's role boxes with Hermes-style tools, calls and results.

Rendered from code, byte-exact with ``ibm-granite__granite-4.0-h-small`` (the text every Granite 4.0 model
ships: h-small, h-tiny, h-micro, micro, h-1b, 1b, h-350m, 350m).
"""
from __future__ import annotations

from typing import Any

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .granite import END, EOT, START, looped
from .render_utils import jstr, tojson

TOOLS_PREFIX = (
    "You are a helpful assistant with access to the following tools. You may call one or more tools to assist with "
    "the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_SUFFIX = (
    "\n</tools>\n\nFor each tool call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>. If a tool does not exist in the provided list of tools, notify the user that you do not have the "
    "ability to fulfill the request."
)
DOCUMENTS_PREFIX = (
    "You are a helpful assistant with access to the following documents. You may use one or more documents to "
    "assist with the user query.\n\nYou are given a list of documents within <documents></documents> XML tags:\n"
    "<documents>"
)
DOCUMENTS_SUFFIX = (
    "\n</documents>\n\nWrite the response to the user's input by strictly aligning with the facts in the provided "
    "documents. If the information needed to answer the question is not available in the documents, inform the "
    "user that the question cannot be answered based on the available data."
)
DEFAULT_SYSTEM = "You are a helpful assistant. Please ensure responses are professional, accurate, and safe."


# Any here: a message as the template reads it: any value Jinja may read
def content_text(message: dict[str, Any], i: int) -> str:
    """The official content loop: a string as it is, else the ``text`` of its ``text`` parts, a newline between
    two once there is text (a missing content, a number or an object give '')."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        return ""
    text = ""
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            if not isinstance(part.get("text"), str):
                raise InvalidMessages("a text part needs a string text", index=i, field="content")
            text += ("\n" if text else "") + part["text"]  # a newline only after text: empty parts add none
    return text


def listing(prefix: str, items: JSON, suffix: str, field: str) -> str:
    """The tools' or documents' system text: each item as a line of compact JSON."""
    if not items:
        return ""
    return prefix + "".join("\n" + tojson(item) for item in looped(items, field)) + suffix


def call_text(call: JSON, i: int) -> str:
    """One ``<tool_call>``: the call's ``function`` when it has one, its name, its arguments (a string as written)."""
    fn = call.get("function") if isinstance(call, dict) and call.get("function") else call
    if not isinstance(fn, dict) or "arguments" not in fn:
        raise InvalidMessages("each tool call needs function.arguments", index=i, field="tool_calls")
    arguments = fn["arguments"]
    name = jstr(fn["name"]) if "name" in fn else ""
    args = arguments if isinstance(arguments, str) else tojson(arguments)
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


@template("granite-4.0", "granite4", "granite-4.0-h-small", "granite-4.0-h-tiny", "granite-4.0-h-micro",
          "granite-4.0-micro", "granite-4.0-h-1b", "granite-4.0-1b", "granite-4.0-h-350m", "granite-4.0-350m")
class Granite4(BaseTemplate):
    """Granite 4.0: a system block (the first system message, then the tool and document listings; or the
    default prompt when that is all empty), then the messages.

    Tools (``tools``, or the template variable ``available_tools``) and ``documents`` are listed as compact JSON
    lines in the system block. Content may be a list of parts (the texts of ``text`` parts, one per line). An
    answer's calls follow its content as ``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``, each on
    a line of its own; results are ``<tool_response>`` elements of one user turn per run of tool messages.
    Other roles are skipped; the generation prompt follows whatever the last message is.
    """

    official = "ibm-granite__granite-4.0-h-small"
    hyperparameter_source = (
        "granite-4.0-h-small config.json (128K context, the model card); sampling: LMDeploy defaults (none "
        "published)"
    )
    hf_special_tokens = {"eos_token": EOT}
    prefix_stable = True
    supports_tools = True
    tool_format = "hermes"

    session_len: int = 131072
    assistant: str = f"{START}assistant{END}"
    eoa: str = EOT
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(EOT)

    def header(self, chat: Chat) -> str:
        tools = chat.kwargs.get("available_tools") or chat.tools
        tools_text = listing(TOOLS_PREFIX, tools, TOOLS_SUFFIX, "tools")
        documents_text = listing(DOCUMENTS_PREFIX, chat.kwargs.get("documents"), DOCUMENTS_SUFFIX, "documents")
        listed = "\n\n".join(t for t in (tools_text, documents_text) if t)
        system = ""
        if chat.role(0) == "system":
            system = content_text(chat.messages[0], 0)
            if listed:
                system += "\n\n" + listed
        else:
            system = listed
        return f"{START}system{END}{system or DEFAULT_SYSTEM}{EOT}\n"

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        if role == "user" or (role == "system" and i > 0):
            return f"{START}{role}{END}{content_text(m, i)}{EOT}\n"
        if role == "assistant":
            content = content_text(m, i)
            return f"{START}assistant{END}{content}{self._calls(m, i, content)}{EOT}\n"
        if role == "tool":
            opening = f"{START}user{END}" if chat.role(i - 1) != "tool" else ""
            closing = f"{EOT}\n" if chat.role(i + 1) != "tool" else ""
            return f"{opening}\n<tool_response>\n{content_text(m, i)}\n</tool_response>{closing}"
        return ""  # the first system message is in the header; other roles are skipped

    @staticmethod
    def _calls(m: dict[str, Any], i: int, content: str) -> str:
        calls = m.get("tool_calls")
        if not calls:
            return ""
        if not isinstance(calls, list):
            raise InvalidMessages("tool_calls must be a list of calls", index=i, field="tool_calls")
        return "".join(("\n" if k or content else "") + call_text(c, i) for k, c in enumerate(calls))
