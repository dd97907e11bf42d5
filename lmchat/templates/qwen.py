"""Qwen2.5, Qwen3 and QwQ: ChatML with Hermes-style tools and, for the latter two, reasoning.

Tools go into the system message as ``<tools>`` JSON lines; calls are
``<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>``; consecutive tool
results are merged into one ``user`` block of ``<tool_response>`` elements.
Qwen3 keeps ``<think>`` only on answers after the last real user query and QwQ
only on the last message, so a new user turn rewrites earlier answers that
carried reasoning: sessions flag that as a reset.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..registry import template
from .base import stops
from .chat import Chat
from .chatml import IM_END, IM_START, ChatML
from .render_utils import jstr, tojson

TOOLS_INTRO = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_OUTRO = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
    f"\n</tool_call>{IM_END}\n"
)


def tools_block(tools: Sequence[JSON]) -> str:
    return TOOLS_INTRO + "".join("\n" + tojson(t) for t in tools) + TOOLS_OUTRO


# Any here: a message and a call's function as the template reads them: any value Jinja may read
def function_of(call: JSON) -> Any:
    """Qwen2.5/QwQ's ``tool_call.function is defined``: OpenAI calls nest the function."""
    return call["function"] if isinstance(call, dict) and "function" in call else call


def tool_call_text(fn: JSON, index: int, *, raw_string_arguments: bool) -> str:
    if not isinstance(fn, dict):
        raise InvalidMessages("a tool call must be an object", index=index, field="tool_calls")
    if "arguments" not in fn:
        raise InvalidMessages("tool call without arguments", index=index, field="tool_calls")
    args = fn["arguments"]
    args = args if raw_string_arguments and isinstance(args, str) else tojson(args)
    name = jstr(fn["name"]) if "name" in fn else ""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def tool_result(chat: Chat, i: int, content: str) -> str:
    """One ``<tool_response>``; the first of a run opens the user block, the last closes it."""
    opening = f"{IM_START}user" if chat.role(i - 1) != "tool" else ""
    closing = f"{IM_END}\n" if chat.role(i + 1) != "tool" else ""
    return f"{opening}\n<tool_response>\n{content}\n</tool_response>{closing}"


@template("qwen2.5", "qwen2d5", "qwen2_5", "qwen2.5-instruct", "qwen2.5-coder")
class Qwen2_5(ChatML):
    """Qwen2.5-Instruct: default system prompt, tools in the system message."""

    official = "Qwen__Qwen2.5-7B-Instruct"
    hyperparameter_source = (
        "Qwen2.5-7B-Instruct generation_config.json: temperature 0.7, top_p 0.8, top_k 20, "
        "repetition_penalty 1.05; 32K context"
    )
    roles = None
    supports_tools = True
    tool_format = "hermes"

    session_len: int = 32768
    top_k: int | None = 20
    temperature: float = 0.7
    repetition_penalty: float = 1.05
    meta_instruction: str | None = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    stop_words: tuple[str, ...] | None = stops(IM_END, "<|endoftext|>")

    def header(self, chat: Chat) -> str:
        first_system = chat.role(0) == "system"
        if chat.tools:
            system = jstr(chat.messages[0].get("content", "")) if first_system else self.meta_instruction
            return f"{IM_START}system\n{system}\n\n{tools_block(chat.tools)}"
        system = chat.text(0) if first_system else self.meta_instruction
        return f"{IM_START}system\n{system}{IM_END}\n"

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        if role == "user" or (role == "system" and i > 0) or (role == "assistant" and not m.get("tool_calls")):
            return f"{IM_START}{role}\n{chat.text(i)}{IM_END}\n"
        if role == "assistant":
            head = f"{IM_START}assistant" + ("\n" + jstr(m["content"]) if m.get("content") else "")
            calls = "".join(
                "\n" + tool_call_text(function_of(c), i, raw_string_arguments=False) for c in m["tool_calls"]
            )
            return f"{head}{calls}{IM_END}\n"
        if role == "tool":
            return tool_result(chat, i, jstr(m.get("content", "")))
        return ""  # the official template skips other roles (and the leading system, in the header)


@template("qwq-preview", "QwQ-32B-Preview", "qwq-32b-preview")
class QwQPreview(Qwen2_5):
    """QwQ-32B-Preview: Qwen2.5's template (tools, calls, results) with QwQ's own default system prompt.

    The preview reasons in plain prose, without ``<think>`` tags, so nothing in its history is rewritten.
    """

    official = "Qwen__QwQ-32B-Preview"
    hyperparameter_source = (
        "QwQ-32B-Preview generation_config.json: temperature 0.7, top_p 0.8, top_k 20, "
        "repetition_penalty 1.05; 32K context (model card)"
    )

    meta_instruction: str | None = (
        "You are a helpful and harmless assistant. You are Qwen developed by Alibaba. You should think step-by-step."
    )


def last_query_index(chat: Chat, n: int) -> int:
    """Qwen3's ``ns.last_query_index`` over the first ``n`` messages: the last real user query."""
    for i in range(n - 1, -1, -1):
        m = chat.messages[i]
        content = m.get("content")
        if m["role"] == "user" and isinstance(content, str) and not (
                content.startswith("<tool_response>") and content.endswith("</tool_response>")):
            return i
    return n - 1


def qwen3_calls(m: dict[str, Any], i: int, content: str) -> str:
    """Qwen3's tool calls of an answer: a newline before each but a first one that follows no content."""
    out = ""
    for k, call in enumerate(m.get("tool_calls") or ()):
        if k or content:
            out += "\n"
        if isinstance(call, dict) and call.get("function"):
            call = call["function"]
        out += tool_call_text(call, i, raw_string_arguments=True)
    return out


@attrs.frozen(kw_only=True)
class _QwenReasoning(ChatML):
    """What Qwen3 and QwQ share: thinking-mode sampling, tools, history rewritten by reasoning."""

    roles = None
    prefix_stable = False
    supports_tools = True
    tool_format = "hermes"
    reasoning = True

    session_len: int = 32768
    top_p: float = 0.95
    temperature: float = 0.6
    stop_words: tuple[str, ...] | None = stops(IM_END, "<|endoftext|>")


@template("qwen3", "qwen3-instruct", "qwen3-8b")
class Qwen3(_QwenReasoning):
    """Qwen3 (hybrid thinking): ``<think>`` kept only after the last user query.

    ``enable_thinking=False`` (a template keyword) adds an empty think block to
    the generation prompt only; history never has it, so the next turn resets
    (QwenLM/Qwen3#1826).
    """

    official = "Qwen__Qwen3-8B"
    hyperparameter_source = (
        "Qwen3-8B generation_config.json (thinking mode): temperature 0.6, top_p 0.95, top_k 20; 32K context"
    )

    top_k: int | None = 20

    def header(self, chat: Chat) -> str:
        first_system = chat.role(0) == "system"
        if chat.tools:
            system = chat.text(0) + "\n\n" if first_system else ""
            return f"{IM_START}system\n{system}{tools_block(chat.tools)}"
        return f"{IM_START}system\n{chat.text(0)}{IM_END}\n" if first_system else ""

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        # answers after the old last query may lose their <think> once a new query arrives
        return max(0, min(n_old - 1, last_query_index(chat, n_old) + 1))

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        content = m["content"] if isinstance(m.get("content"), str) else ""
        if role == "user" or (role == "system" and i > 0):
            return f"{IM_START}{role}\n{content}{IM_END}\n"
        if role == "assistant":
            return self._answer(chat, i, m, content)
        if role == "tool":
            return tool_result(chat, i, content)
        return ""

    def _answer(self, chat: Chat, i: int, m: dict[str, Any], content: str) -> str:
        reasoning = m.get("reasoning_content")
        if not isinstance(reasoning, str):
            reasoning = ""
            if "</think>" in content:
                reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                content = content.split("</think>")[-1].lstrip("\n")
        last = i == len(chat.messages) - 1
        if i > last_query_index(chat, len(chat.messages)) and (last or reasoning):
            out = f"{IM_START}assistant\n<think>\n{reasoning.strip(chr(10))}\n</think>\n\n{content.lstrip(chr(10))}"
        else:
            out = f"{IM_START}assistant\n{content}"
        return out + qwen3_calls(m, i, content) + f"{IM_END}\n"

    def tail(self, chat: Chat) -> str:
        if not chat.add_generation_prompt:
            return ""
        if chat.kwargs.get("enable_thinking") is False:
            return f"{IM_START}assistant\n<think>\n\n</think>\n\n"
        return f"{IM_START}assistant\n"


@template("qwen3-instruct-2507", "qwen3-4b-instruct-2507", "qwen3-30b-a3b-instruct-2507",
          "qwen3-235b-a22b-instruct-2507")
class Qwen3Instruct2507(Qwen3):
    """Qwen3-2507 Instruct (non-thinking only): Qwen3's template without reasoning or ``enable_thinking``.

    Answers are written back as they are, so plain conversations never reset.
    """

    official = "Qwen__Qwen3-4B-Instruct-2507"
    hyperparameter_source = (
        "Qwen3-4B-Instruct-2507 generation_config.json and model card: temperature 0.7, top_p 0.8, top_k 20, "
        "min_p 0; 256K (262,144) native context"
    )
    prefix_stable = True
    reasoning = False

    session_len: int = 262144
    top_p: float = 0.8
    temperature: float = 0.7

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        return max(0, n_old - 1)  # no reasoning to drop: only grouped tool results look at a neighbour

    def _answer(self, chat: Chat, i: int, m: dict[str, Any], content: str) -> str:
        return f"{IM_START}assistant\n{content}" + qwen3_calls(m, i, content) + f"{IM_END}\n"

    def tail(self, chat: Chat) -> str:
        return f"{IM_START}assistant\n" if chat.add_generation_prompt else ""


@template("qwen3-thinking-2507", "qwen3-4b-thinking-2507", "qwen3-30b-a3b-thinking-2507",
          "qwen3-235b-a22b-thinking-2507")
class Qwen3Thinking2507(Qwen3):
    """Qwen3-2507 Thinking: Qwen3's template whose generation prompt always opens ``<think>``.

    As with QwQ, the answer starts inside the block and a new user query drops
    the reasoning of earlier answers, so the session resets then; the
    continuation (``sequence_start=False``) is for an engine that keeps the
    answer as the model wrote it (:meth:`BaseTemplate._continuation`).
    """

    official = "Qwen__Qwen3-4B-Thinking-2507"
    hyperparameter_source = (
        "Qwen3-4B-Thinking-2507 generation_config.json and model card: temperature 0.6, top_p 0.95, top_k 20, "
        "min_p 0; 256K (262,144) native context"
    )

    session_len: int = 262144

    def tail(self, chat: Chat) -> str:
        return f"{IM_START}assistant\n<think>\n" if chat.add_generation_prompt else ""


@template("qwq", "qwq-32b")
class QwQ(_QwenReasoning):
    """QwQ-32B: the generation prompt opens ``<think>``; earlier answers keep only what follows ``</think>``."""

    official = "Qwen__QwQ-32B"
    hyperparameter_source = "QwQ-32B generation_config.json: temperature 0.6, top_p 0.95, top_k 40; 32K context"

    top_k: int | None = 40

    def header(self, chat: Chat) -> str:
        first_system = chat.role(0) == "system"
        if chat.tools:
            system = jstr(chat.messages[0].get("content", "")) if first_system else ""
            return f"{IM_START}system\n{system}\n\n{tools_block(chat.tools)}"
        return f"{IM_START}system\n{chat.text(0)}{IM_END}\n" if first_system else ""

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        if role == "user" or (role == "system" and i > 0):
            return f"{IM_START}{role}\n{chat.text(i)}{IM_END}\n"
        if role == "assistant":
            return self._answer(chat, i, m)
        if role == "tool":
            return tool_result(chat, i, jstr(m.get("content", "")))
        return ""

    def _answer(self, chat: Chat, i: int, m: dict[str, Any]) -> str:
        last = i == len(chat.messages) - 1

        def content() -> str:  # only evaluated where the official template reads it
            text = chat.text(i)
            return text if last else text.split("</think>")[-1].lstrip("\n")

        if not m.get("tool_calls"):
            return f"{IM_START}assistant\n{content()}{IM_END}\n"
        if not last and "content" not in m:
            chat.text(i)  # the official template splits the missing content and fails
        head = f"{IM_START}assistant" + ("\n" + content() if m.get("content") else "")
        calls = "".join("\n" + tool_call_text(function_of(c), i, raw_string_arguments=False) for c in m["tool_calls"])
        return f"{head}{calls}{IM_END}\n"

    def tail(self, chat: Chat) -> str:
        return f"{IM_START}assistant\n<think>\n" if chat.add_generation_prompt else ""
