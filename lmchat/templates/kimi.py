"""Kimi-K2 (Moonshot AI): ``<|im_user|>user<|im_middle|>{q}<|im_end|><|im_assistant|>assistant<|im_middle|>``.

Rendered from code, byte-exact with ``moonshotai__Kimi-K2-Instruct``.
"""
from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import jstr, tojson

IM_END, MIDDLE = "<|im_end|>", "<|im_middle|>"
DEFAULT_SYSTEM = "You are Kimi, an AI assistant created by Moonshot AI."
MEDIA = "<|media_start|>image<|media_content|><|media_pad|><|media_end|>\n"
BOXES = {"user": "<|im_user|>", "assistant": "<|im_assistant|>"}


# Any here: a message as the template reads it: any value Jinja may read
def _content(message: dict[str, Any], i: int) -> str:
    """The official ``render_content`` macro: a string as it is, a list of parts as text and image placeholders."""
    c = message.get("content")
    if c is None or isinstance(c, str):
        return c or ""
    if not isinstance(c, (list, dict)):
        raise InvalidMessages(f"content must be a string or a list of parts, got {type(c).__name__}",
                              index=i, field="content")
    out = []
    for part in c:  # a dict iterates its keys, as Jinja's for does
        if isinstance(part, dict):
            image = part.get("type") == "image" or "image" in part or "image_url" in part
            out.append(MEDIA if image else (jstr(part["text"]) if "text" in part else ""))
        elif isinstance(part, str):
            out.append(MEDIA if "image" in part else "")  # a string part: 'image' in it is a substring test
        else:
            raise InvalidMessages("each content part must be an object", index=i, field="content")
    return "".join(out)


def _call(call: JSON, i: int) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or "arguments" not in fn:
        raise InvalidMessages("each tool call needs function.arguments", index=i, field="tool_calls")
    arguments = fn["arguments"]
    call_id = jstr(call["id"]) if isinstance(call, dict) and "id" in call else ""  # a dict: its function is
    try:
        args = arguments if isinstance(arguments, str) else tojson(arguments)
    except (TypeError, ValueError):
        raise InvalidMessages("tool call arguments must be a JSON string or JSON values", index=i,
                              field="tool_calls") from None
    return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"


@template("kimi-k2", "Kimi-K2-Instruct", "kimi-k2-instruct", "kimi_k2")
class KimiK2(BaseTemplate):
    """Kimi-K2-Instruct: every message ``<|im_{box}|>{name or role}<|im_middle|>{content}<|im_end|>``.

    The box is ``im_user`` for user messages, ``im_assistant`` for answers and ``im_system`` for every other
    role; a message's ``name`` replaces its role in the header. Tools are declared first, as
    ``<|im_system|>tool_declare<|im_middle|>{compact JSON}<|im_end|>``; a conversation that does not open with a
    system message gets Kimi's default one, the only text followed by a newline. Calls render as
    ``{content}<|tool_calls_section_begin|>`` then per call
    ``<|tool_call_begin|>{id}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>`` and
    ``<|tool_calls_section_end|>``: the call's ``id`` (``functions.NAME:IDX`` as the model writes it) stands for
    the name, which is not rendered. Tool results are ``## Return of {tool_call_id}\\n{content}``. Content may be
    a list of parts (text, and an image placeholder followed by a newline).
    """
    call_arguments = "text"  # a string is printed as it is (an object as tojson writes it): the model's own text

    official = "moonshotai__Kimi-K2-Instruct"
    hyperparameter_source = (
        "Kimi-K2-Instruct model card: recommended temperature 0.6, 128K context; top_p not stated (LMDeploy default)"
    )
    prefix_stable = True
    supports_tools = True
    tool_format = "kimi_k2"

    session_len: int = 131072
    temperature: float = 0.6
    meta_instruction: str | None = DEFAULT_SYSTEM
    assistant: str = "<|im_assistant|>assistant<|im_middle|>"
    eoa: str = IM_END
    stop_words: tuple[str, ...] | None = stops(IM_END)

    def header(self, chat: Chat) -> str:
        out = ""
        if chat.tools:
            declared = json.dumps(chat.tools, ensure_ascii=False, separators=(",", ":"))
            out = f"<|im_system|>tool_declare{MIDDLE}{declared}{IM_END}"
        if chat.messages and chat.role(0) != "system" and self.meta_instruction is not None:
            out += f"<|im_system|>system{MIDDLE}{self.meta_instruction}{IM_END}\n"
        return out

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        name = m.get("name")
        head = f"{BOXES.get(role, '<|im_system|>')}{jstr(name) if name else role}{MIDDLE}"
        calls = m.get("tool_calls")
        if role == "assistant" and calls:
            if not isinstance(calls, (list, dict, str)):
                raise InvalidMessages("tool_calls must be a list of calls", index=i, field="tool_calls")
            body = _content(m, i) + "<|tool_calls_section_begin|>"
            body += "".join(_call(call, i) for call in calls) + "<|tool_calls_section_end|>"
        elif role == "tool":
            call_id = jstr(m["tool_call_id"]) if "tool_call_id" in m else ""
            body = f"## Return of {call_id}\n{_content(m, i)}"
        else:
            body = _content(m, i)
        return head + body + IM_END
