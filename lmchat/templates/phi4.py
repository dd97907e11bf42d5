"""Phi-4-mini-instruct (``<|{role}|>{content}<|end|>``, tools in the system turn) and Phi-4-reasoning (phi-4's
ChatML under a fixed reasoning system prompt). phi-4 itself is in :mod:`.phi`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .phi import Phi4

TOOL_OPEN, TOOL_CLOSE = "<|tool|>", "<|/tool|>"


def declared_tools(tools: Sequence[JSON]) -> str:
    """The tool list as the model card writes it into a system message: ``json.dumps`` of the functions (an
    OpenAI ``{"type": "function", "function": {...}}`` wrapper taken off), Python's default separators."""
    functions = [t["function"] if isinstance(t, dict) and isinstance(t.get("function"), dict) else t
                 for t in tools]
    try:
        return json.dumps(functions)
    except (TypeError, ValueError):
        raise InvalidMessages("tools must be JSON values", field="tools") from None


@template("phi4-mini", "Phi-4-mini-instruct", "phi-4-mini-instruct", "phi-4-mini", "phi4_mini")
class Phi4Mini(BaseTemplate):
    """Phi-4-mini-instruct: every message ``<|{role}|>{content}<|end|>``, no newlines, any role.

    Tools are declared in a system message, as the model card does: its ``tools`` field, a string (the JSON
    list of functions), renders as ``<|system|>{content}<|tool|>{tools}<|/tool|><|end|>``. The official
    template reads nothing else: it ignores the ``tools`` argument, ``tool_calls`` (the answer's content is
    rendered; the model's own ``<|tool_call|>[...]<|/tool_call|>`` is part of the content a session stores) and
    renders a tool result as ``<|tool|>{content}<|end|>``. lmchat renders a ``tools`` argument where the model
    card puts it, written as ``json.dumps`` of the functions, unless the first message is a system message with
    a ``tools`` field of its own: into the first message when it is a system message, else as a system turn of
    its own (``<|system|><|tool|>[...]<|/tool|><|end|>``) first. Without a ``tools`` argument the rendering is
    the official one.
    Without a generation prompt the rendering ends with the eos.
    """

    official = "microsoft__Phi-4-mini-instruct"
    hyperparameter_source = (
        "Phi-4-mini-instruct model card: 128K context; its generation_config.json sets no sampling values "
        "(LMDeploy defaults)"
    )
    hf_special_tokens = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    prefix_stable = True
    tool_format = "phi4_mini"

    session_len: int = 131072
    system: str = "<|system|>"
    user: str = "<|user|>"
    assistant: str = "<|assistant|>"
    eoa: str = "<|end|>"
    stop_words: tuple[str, ...] | None = stops("<|end|>", "<|endoftext|>")

    def _argument_tools(self, chat: Chat) -> str | None:
        """The ``tools`` argument as the system turn declares it, unless the first message declares its own.

        Only the first message decides, so that what a session holds never changes with a later message.
        """
        if not chat.tools or (chat.role(0) == "system" and "tools" in chat.messages[0]):
            return None
        return declared_tools(chat.tools)

    def header(self, chat: Chat) -> str:
        tools = self._argument_tools(chat)
        if tools is None or chat.role(0) == "system":
            return ""
        return f"{self.system}{TOOL_OPEN}{tools}{TOOL_CLOSE}{self.eoa}"

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        content = chat.text(i)
        tools = m.get("tools") if role == "system" else None
        if tools is None and role == "system" and i == 0:
            tools = self._argument_tools(chat)
        if tools is None:
            return f"<|{role}|>{content}{self.eoa}"
        if not isinstance(tools, str):
            raise InvalidMessages(f"a system message's tools must be a string (the JSON list), got "
                                  f"{type(tools).__name__}", index=i, field="tools")
        return f"<|{role}|>{content}{TOOL_OPEN}{tools}{TOOL_CLOSE}{self.eoa}"

    def tail(self, chat: Chat) -> str:
        return self.assistant if chat.add_generation_prompt else self.hf_special_tokens["eos_token"]


REASONING_SYSTEM = (
    "You are Phi, a language model trained by Microsoft to help users. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise and "
    "accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, "
    "reassessment, reflection, backtracing, and iteration to develop well-considered thinking process. Please "
    "structure your response into two main sections: Thought and Solution using the specified format: <think> "
    "{Thought section} </think> {Solution section}. In the Thought section, detail your reasoning process in "
    "steps. Each step should include detailed considerations such as analysing questions, summarizing relevant "
    "findings, brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and "
    "revisiting previous steps. In the Solution section, based on various attempts, explorations, and "
    "reflections from the Thought section, systematically present the final solution that you deem correct. The "
    "Solution section should be logical, accurate, and concise and detail necessary steps needed to reach the "
    "conclusion. Now, try to solve the following question through the above guidelines:"
)


@template("phi4-reasoning", "Phi-4-reasoning", "phi-4-reasoning", "Phi-4-reasoning-plus", "phi-4-reasoning-plus")
class Phi4Reasoning(Phi4):
    """Phi-4-reasoning (and -plus, which ships the same text): phi-4's format under a fixed system prompt.

    Every rendering opens with Microsoft's reasoning system prompt; system messages (and roles other than user
    and assistant) are skipped, so that prompt cannot be replaced. The model answers
    ``<think>{reasoning}</think>{solution}``; earlier answers render as their content, reasoning included
    when it is in the content (a session stores the answer as the model wrote it, so the history extends the
    prompt). A ``reasoning_content`` field is not rendered: a client that sends an answer back with its
    reasoning split off sends another history, and the session resets.
    """

    official = "microsoft__Phi-4-reasoning"
    hyperparameter_source = (
        "Phi-4-reasoning model card and generation_config.json: temperature 0.8, top_k 50, top_p 0.95; "
        "32K context"
    )
    reasoning = True
    roles = ("user", "assistant")

    session_len: int = 32768
    temperature: float = 0.8
    top_k: int | None = 50
    top_p: float = 0.95
    meta_instruction: str | None = REASONING_SYSTEM

    def header(self, chat: Chat) -> str:
        return f"{self.system}{self.meta_instruction}{self.eosys}"
