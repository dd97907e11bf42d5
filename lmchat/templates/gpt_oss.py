"""OpenAI gpt-oss (the harmony format), rendered from code byte for byte as its official template renders it.

Every message is ``<|start|>{role}<|message|>{text}<|end|>``; an answer also names its channel
(``<|start|>assistant<|channel|>final<|message|>{content}<|end|>``). The template opens with a
system message of its own (model identity, knowledge cutoff, today's date, reasoning effort, the
valid channels), then a developer message with the conversation's first system (or developer)
message as instructions and the tools as a TypeScript-like ``namespace functions``. A tool call is
``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{args}<|call|>``, its
result ``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>{json}<|end|>``.

History policy (the official template's): an answer's reasoning (``thinking``) is never rendered,
except on the analysis of a tool call that no later final answer follows, and on a last answer
without a generation prompt (training), which ends in ``<|return|>`` instead of ``<|end|>``. The
model itself writes its analysis and ends a final answer with ``<|return|>``: what the engine holds
after such an answer is not what the history renders, so the next turn's delta is a reset (the
session finds the divergence and says where). Only the first call of a message with several is
rendered, as the official template does.

The template's keywords: ``model_identity``, ``reasoning_effort`` (``low``, ``medium``, ``high``;
default ``medium``) and ``builtin_tools`` (``browser``, ``python``).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidMessages, TemplateRuleError
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .gpt_oss_tools import UNDEFINED, _cat, _contains, _get, _iterate, _json, functions_namespace
from .render_utils import jstr

START, END, MESSAGE, CHANNEL = "<|start|>", "<|end|>", "<|message|>", "<|channel|>"
CALL, RETURN, CONSTRAIN = "<|call|>", "<|return|>", "<|constrain|>"
ANALYSIS = f"{START}assistant{CHANNEL}analysis{MESSAGE}"
FINAL = f"{START}assistant{CHANNEL}final{MESSAGE}"
DEFAULT_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
CHANNELS = "# Valid channels: analysis, commentary, final. Channel must be included for every message."
FUNCTIONS_NOTE = "\nCalls to these tools must go to the commentary channel: 'functions'."
TAG_ERROR = (
    "You have passed a message containing <|channel|> tags in the {field} field. Instead of doing this, you "
    "should pass analysis messages (the string between '<|message|>' and '<|end|>') in the 'thinking' field, and "
    "final messages (the string between '<|message|>' and '<|end|>') in the 'content' field."
)
BOTH_ERROR = (
    "Cannot pass both content and thinking in an assistant message with tool calls! Put the analysis message "
    "in one or the other, but not both."
)
NO_CALL_ERROR = "Message has tool role, but there was no previous assistant message with a tool call!"

BROWSER = (
    "## browser\n\n"
    "// Tool for browsing.\n"
    "// The `cursor` appears in brackets before each browsing display: `[{cursor}]`.\n"
    "// Cite information from the tool using the following format:\n"
    "// `【{cursor}†L{line_start}(-L{line_end})?】`, for example: `【6†L9-L11】` or `【8†L3】`.\n"
    "// Do not quote more than 10 words directly from the tool output.\n"
    "// sources=web (default: web)\n"
    "namespace browser {\n\n"
    "// Searches for information related to `query` and displays `topn` results.\n"
    "type search = (_: {\n"
    "query: string,\n"
    "topn?: number, // default: 10\n"
    "source?: string,\n"
    "}) => any;\n\n"
    "// Opens the link `id` from the page indicated by `cursor` starting at line number `loc`, showing "
    "`num_lines` lines.\n"
    "// Valid link ids are displayed with the formatting: `【{id}†.*】`.\n"
    "// If `cursor` is not provided, the most recent page is implied.\n"
    "// If `id` is a string, it is treated as a fully qualified URL associated with `source`.\n"
    "// If `loc` is not provided, the viewport will be positioned at the beginning of the document or centered "
    "on the most relevant passage, if available.\n"
    "// Use this function without `id` to scroll to a new location of an opened page.\n"
    "type open = (_: {\n"
    "id?: number | string, // default: -1\n"
    "cursor?: number, // default: -1\n"
    "loc?: number, // default: -1\n"
    "num_lines?: number, // default: -1\n"
    "view_source?: boolean, // default: false\n"
    "source?: string,\n"
    "}) => any;\n\n"
    "// Finds exact matches of `pattern` in the current page, or the page given by `cursor`.\n"
    "type find = (_: {\n"
    "pattern: string,\n"
    "cursor?: number, // default: -1\n"
    "}) => any;\n\n"
    "} // namespace browser\n\n"
)
PYTHON = (
    "## python\n\n"
    "Use this tool to execute Python code in your chain of thought. The code will not be shown to the user. "
    "This tool should be used for internal reasoning, but not for code that is intended to be visible to the "
    "user (e.g. when creating plots, tables, or files).\n\n"
    "When you send a message containing Python code to python, it will be executed in a stateful Jupyter "
    "notebook environment. python will respond with the output of the execution or time out after 120.0 "
    "seconds. The drive at '/mnt/data' can be used to save and persist user files. Internet access for this "
    "session is UNKNOWN. Depends on the cluster.\n\n"
)
_MARKUP = re.compile(r"(<\|start\|>|<\|channel\|>|<\|message\|>|<\|end\|>|<\|call\|>|<\|return\|>)")
_RECIPIENT = re.compile(r"(?:^|\s)to=([^\s<]+)")


def split_answer(text: str) -> tuple[str, str | None]:
    """``(content, reasoning)`` of a raw harmony answer, as ``lmchat.tools.harmony`` reads it (whole, without
    its notes and whitespace rules): analysis is reasoning, final and commentary without a recipient are
    content, a message to a recipient (a tool call) is neither, text outside any message is content."""
    content: list[str] = []
    reasoning: list[str] = []
    state, header, kind = "outside", "", ""
    if text.startswith(("to=", " to=")):
        state = "header"
    for piece in _MARKUP.split(text):
        if state == "body" and piece in (END, CALL, RETURN, START, CHANNEL):
            state = "outside" if piece in (END, CALL, RETURN) else "header"
            header = CHANNEL if piece == CHANNEL else ""
        elif state == "outside" and piece in (START, CHANNEL):
            state, header = "header", CHANNEL if piece == CHANNEL else ""
        elif state == "header" and piece == MESSAGE:
            recipient = _RECIPIENT.search(header)
            channel = header.partition(CHANNEL)[2].strip().split(" ")[0] if CHANNEL in header else ""
            kind = ("call" if recipient and recipient.group(1) not in ("assistant", "user", "all")
                    else "reasoning" if channel == "analysis" else "content")
            state = "body"
        elif state == "header":
            header += piece
        elif state == "body":
            (reasoning if kind == "reasoning" else content if kind == "content" else []).append(piece)
        else:
            content.append(piece)
    return "".join(content), ("".join(reasoning) if reasoning else None)


@template("gpt-oss", "gpt_oss", "gpt-oss-120b", "gpt-oss-20b", "harmony")
class GptOss(BaseTemplate):
    """OpenAI gpt-oss-120b and gpt-oss-20b: the harmony format (see the module docstring).

    ``lead`` is ``<|channel|>final<|message|>``: an answer that goes straight to its final channel
    is stored as its content, and the engine holds what the history renders. An answer that
    reasons first, or ends in ``<|return|>`` (the model's own end of a final answer; the history
    renders ``<|end|>``), makes the next turn a reset.
    """

    official = "openai__gpt-oss-120b"
    hyperparameter_source = (
        "gpt-oss-120b/20b generation_config.json: no temperature or top_p (transformers' defaults, 1.0), "
        "eos_token_id [200002 <|return|>, 199999 <|endoftext|>, 200012 <|call|>]; OpenAI's gpt-oss README "
        "recommends temperature 1.0, top_p 1.0; config.json max_position_embeddings 131072"
    )
    hf_special_tokens = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"}
    supports_tools = True
    tool_format = "harmony"
    reasoning = True
    reasoning_efforts = ("low", "medium", "high")

    session_len: int = 131072
    # generation_config.json sets no sampling values; OpenAI's README (github.com/openai/gpt-oss,
    # "Recommended Sampling Parameters"): temperature=1.0 and top_p=1.0; no top_k, no repetition penalty
    top_p: float = 1.0
    top_k: int | None = None
    temperature: float = 1.0
    repetition_penalty: float = 1.0
    # generation_config.json's eos_token_id list: <|return|> (a final answer), <|call|> (a tool call),
    # <|endoftext|>
    stop_words: tuple[str, ...] | None = stops(RETURN, CALL, "<|endoftext|>")
    assistant: str = f"{START}assistant"
    lead: str = f"{CHANNEL}final{MESSAGE}"
    eoa: str = END

    def answer_fields(self, answer: str) -> dict[str, JSON]:
        """A raw answer as the message the history renders: the analysis as reasoning, the final text as content
        (the official template refuses channel markup in either field)."""
        if CHANNEL not in answer and START not in answer and not answer.startswith(("to=", " to=")):
            return {"content": answer}
        content, reasoning = split_answer(answer)
        return {"content": content} if reasoning is None else {"content": content, "reasoning_content": reasoning}

    # ------------------------------------------------------------------ header: system and developer messages
    def system_message(self, chat: Chat) -> str:
        kwargs = chat.kwargs
        identity = kwargs.get("model_identity", DEFAULT_IDENTITY)
        effort = kwargs.get("reasoning_effort", "medium")
        out = [
            _cat(identity, "\n", where="model_identity"),
            "Knowledge cutoff: 2024-06\n",
            "Current date: " + chat.today().strftime("%Y-%m-%d") + "\n\n",
            _cat("Reasoning: ", effort, "\n\n", where="reasoning_effort"),
        ]
        builtin = kwargs.get("builtin_tools")
        if builtin:
            names = _iterate(builtin, "builtin_tools")
            out.append("# Tools\n\n")
            out.append(BROWSER if "browser" in names else "")
            out.append(PYTHON if "python" in names else "")
        out.append(CHANNELS)
        if chat.tools:
            out.append(FUNCTIONS_NOTE)
        return f"{START}system{MESSAGE}" + "".join(out) + END

    @staticmethod
    def first_in_loop(chat: Chat) -> int:
        """Where the official ``loop_messages`` start: after a leading system or developer message."""
        return 1 if chat.role(0) in ("developer", "system") else 0

    def header(self, chat: Chat) -> str:
        system = self.system_message(chat)
        instructions = _get(chat.messages[0], "content") if self.first_in_loop(chat) else ""
        if not (instructions or chat.tools):
            return system
        out = [system, f"{START}developer{MESSAGE}"]
        if instructions:
            out.append(f"# Instructions\n\n{jstr(instructions)}\n\n")
        if chat.tools:
            out.append("# Tools\n\n" + functions_namespace(chat.tools))
        return "".join(out) + END

    # ------------------------------------------------------------------ messages
    def piece(self, chat: Chat, i: int) -> str:
        if i < self.first_in_loop(chat):
            return ""
        m = chat.messages[i]
        role = m["role"]
        if role == "assistant":
            return self.answer(chat, i)
        if role == "tool":
            name = self.last_call_name(chat, i)
            if name is None:
                raise TemplateRuleError("tool-without-call", NO_CALL_ERROR, index=i, field="role")
            return _cat(f"{START}functions.", name, f" to=assistant{CHANNEL}commentary{MESSAGE}",
                        _json(_get(m, "content"), "content", i), END, where="content", index=i)
        if role == "user":
            return _cat(f"{START}user{MESSAGE}", _get(m, "content"), END, where="content", index=i)
        return ""  # the official template skips other roles (and system messages after the first)

    def answer(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        for field in ("content", "thinking"):
            if field in m:
                value = m[field]
                if (_contains(f"{CHANNEL}analysis{MESSAGE}", value, field, i)
                        or _contains(f"{CHANNEL}final{MESSAGE}", value, field, i)):
                    raise TemplateRuleError("channel-tags", TAG_ERROR.format(field=field), index=i, field=field)
        content, thinking = _get(m, "content"), _get(m, "thinking")
        if "tool_calls" in m:
            return self.call(chat, i, m, content, thinking)
        if i == len(chat.messages) - 1 and not chat.add_generation_prompt:
            # training only: the last answer keeps its reasoning and ends as the model ends it
            analysis = _cat(ANALYSIS, thinking, END, where="thinking", index=i) if "thinking" in m else ""
            return analysis + _cat(FINAL, content, RETURN, where="content", index=i)
        return _cat(FINAL, content, END, where="content", index=i)

    # Any here: a message and its first call as the template reads them: any value Jinja may read
    def call(self, chat: Chat, i: int, m: Mapping[str, Any], content: JSON, thinking: JSON) -> str:
        """An answer with ``tool_calls``: its analysis unless a final answer follows, then its first call."""
        fn = self.first_call(m, i)
        later_final = any(chat.role(j) == "assistant" and "tool_calls" not in chat.messages[j]
                          for j in range(i + 1, len(chat.messages)))
        if content and thinking:
            raise TemplateRuleError("content-and-thinking", BOTH_ERROR, index=i, field="thinking")
        analysis = ""
        if content and not later_final:
            analysis = _cat(ANALYSIS, content, END, where="content", index=i)
        elif thinking and not later_final:
            analysis = _cat(ANALYSIS, thinking, END, where="thinking", index=i)
        content_type = fn.get("content_type", "json")
        return analysis + _cat(
            f"{START}assistant to=functions.", _get(fn, "name"), f"{CHANNEL}commentary ", content_type, MESSAGE,
            _json(_get(fn, "arguments"), "tool_calls", i), CALL, where="tool_calls", index=i,
        )

    @staticmethod
    def first_call(m: Mapping[str, Any], i: int) -> Mapping[str, Any]:
        """``message.tool_calls[0]``, its ``function`` when it has one (only the first call is rendered)."""
        calls = m["tool_calls"]
        call: Any = calls[0] if isinstance(calls, (list, tuple, str)) and calls else UNDEFINED
        if call is UNDEFINED:
            raise InvalidMessages("tool_calls[0] is undefined", index=i, field="tool_calls")
        fn = _get(call, "function")
        call = fn if fn else call
        if not isinstance(call, Mapping):
            raise InvalidMessages("a tool call must be an object with a name", index=i, field="tool_calls")
        return call

    def last_call_name(self, chat: Chat, i: int) -> str | None:
        """The official ``last_tool_call.name`` before message ``i``: the first call of the nearest earlier
        answer, None when that answer was a final one (or there is none)."""
        for j in range(i - 1, self.first_in_loop(chat) - 1, -1):
            m = chat.messages[j]
            if m["role"] == "assistant":
                if "tool_calls" not in m:
                    return None
                name = _get(self.first_call(m, j), "name")
                return name if isinstance(name, str) else None
        return None

    def tail(self, chat: Chat) -> str:
        return self.assistant if chat.add_generation_prompt else ""

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        """The analysis of a tool call is dropped once a final answer follows: re-render from the first
        answer with calls after the last final answer (the header never changes with new messages)."""
        start = max(0, n_old - 1)
        for j in range(n_old - 1, self.first_in_loop(chat) - 1, -1):
            m = chat.messages[j]
            if m["role"] == "assistant":
                if "tool_calls" not in m:
                    break
                start = j
        return start
