"""SmolLM3 (Hugging Face): ChatML with a metadata system header, a reasoning mode and Hermes-style tools.

Rendered from code, byte-exact with ``HuggingFaceTB__SmolLM3-3B``.
"""
from __future__ import annotations

from ..errors import TemplateConfigError
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .chatml import IM_END, IM_START

THINK, NO_THINK, OVERRIDE = "/think", "/no_think", "/system_override"
EMPTY_THINK = "<think>\n\n</think>\n"
DEFAULT_THINKING = (
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face. Your role as an assistant involves "
    "thoroughly exploring questions through a systematic thinking process before providing the final precise and "
    "accurate solutions. This requires engaging in a comprehensive cycle of analysis, summarizing, exploration, "
    "reassessment, reflection, backtracking, and iteration to develop well-considered thinking process. Please "
    "structure your response into two main sections: Thought and Solution using the specified format: <think> "
    "Thought section </think> Solution section. In the Thought section, detail your reasoning process in steps. Each "
    "step should include detailed considerations such as analysing questions, summarizing relevant findings, "
    "brainstorming new ideas, verifying the accuracy of the current steps, refining any errors, and revisiting "
    "previous steps. In the Solution section, based on various attempts, explorations, and reflections from the "
    "Thought section, systematically present the final solution that you deem correct. The Solution section should "
    "be logical, accurate, and concise and detail necessary steps needed to reach the conclusion."
)
DEFAULT_PLAIN = "You are a helpful AI assistant named SmolLM, trained by Hugging Face."
XML_TOOLS_INTRO = (
    "You may call one or more functions to assist with the user query.\nYou are provided with function signatures "
    "within <tools></tools> XML tags:\n\n<tools>\n"
)
XML_TOOLS_OUTRO = (
    "</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)
PYTHON_TOOLS_INTRO = (
    "When you send a message containing Python code between '<code>' and '</code>' tags, it will be executed in a "
    "stateful Jupyter notebook environment, and you will then be given the output to continued reasoning in an "
    "agentic loop.\n\nYou can use the following tools in your python code like regular functions:\n<tools>\n"
)
PYTHON_TOOLS_OUTRO = (
    "</tools>\n\nThe state persists between code executions: so variables that you define in one step are still "
    "available thereafter."
)


def listed(tools: JSON, field: str) -> str:
    """``{% for tool in tools[:] %}{{ tool | string }}\\n``: each tool as Python prints it (``str()``: quotes,
    ``True``, ``None``), one per line."""
    if not isinstance(tools, (list, tuple, str)):
        raise TemplateConfigError(f"must be a list of tools, got {type(tools).__name__}", field=field)
    return "".join(f"{tool}\n" for tool in tools)


@template("smollm3", "SmolLM3-3B", "smollm3-3b")
class SmolLM3(BaseTemplate):
    """SmolLM3-3B: a system block of metadata (knowledge cutoff, today's date, the reasoning mode) and custom
    instructions, then ChatML turns.

    The reasoning mode is ``/think`` unless the template variable ``enable_thinking`` is false; a first system
    message containing ``/no_think`` (else ``/think``) sets it, and those flags are taken out of its text, which
    becomes the custom instructions (by default SmolLM's own, longer in ``/think`` mode). A system message with
    ``/system_override`` is the whole system block instead. In ``/no_think`` mode every answer, and the
    generation prompt, starts with an empty ``<think>`` block; in ``/think`` mode the model writes its own and
    answers render as written (less their leading newlines). Tools (``tools``, or the variables ``xml_tools``
    and ``python_tools``) are listed as Python prints them; only then does the system block end with
    ``<|im_end|>``, as in the official template. Later system messages are skipped; tool results are user turns;
    ``tool_calls`` are not rendered (the model writes ``<tool_call>{...}</tool_call>`` in its answer, so a
    history that keeps its calls as ``tool_calls`` renders differently: the next turn resets, with the reason).
    """

    official = "HuggingFaceTB__SmolLM3-3B"
    hyperparameter_source = (
        "SmolLM3-3B generation_config.json and model card: temperature 0.6, top_p 0.95; 64K context "
        "(max_position_embeddings 65536)"
    )
    hf_special_tokens = {"eos_token": IM_END}
    prefix_stable = True
    supports_tools = True
    tool_format = "hermes"
    reasoning = True

    session_len: int = 65536
    top_p: float = 0.95
    temperature: float = 0.6
    assistant: str = f"{IM_START}assistant\n"
    eoa: str = IM_END
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(IM_END)

    @staticmethod
    def thinks(chat: Chat) -> bool:
        """Whether the reasoning mode is ``/think``: the system message's flag, else ``enable_thinking``."""
        if chat.role(0) == "system":
            system = chat.text(0)
            if NO_THINK in system:
                return False
            if THINK in system:
                return True
        return bool(chat.kwargs.get("enable_thinking", True))

    def header(self, chat: Chat) -> str:
        system = chat.text(0) if chat.role(0) == "system" else None
        custom = system.replace(NO_THINK, "").replace(THINK, "").rstrip() if system is not None else ""
        if system is not None and OVERRIDE in system:
            return f"{IM_START}system\n{custom.replace(OVERRIDE, '').rstrip()}{IM_END}\n"
        thinks = self.thinks(chat)
        out = [
            f"{IM_START}system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n",
            f"Today Date: {chat.today().strftime('%d %B %Y')}\n",
            f"Reasoning Mode: {THINK if thinks else NO_THINK}\n\n## Custom Instructions\n\n",
            f"{custom or (DEFAULT_THINKING if thinks else DEFAULT_PLAIN)}\n\n",
        ]
        tools, xml_tools, python_tools = chat.tools, chat.kwargs.get("xml_tools"), chat.kwargs.get("python_tools")
        if xml_tools or python_tools or tools:
            out.append("### Tools\n\n")
            if xml_tools or tools:
                out.append(XML_TOOLS_INTRO + (listed(tools, "tools") if tools else listed(xml_tools, "xml_tools"))
                           + XML_TOOLS_OUTRO)
            if python_tools:
                out.append(PYTHON_TOOLS_INTRO + listed(python_tools, "python_tools") + PYTHON_TOOLS_OUTRO)
            out.append(f"\n\n{IM_END}\n")
        return "".join(out)

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        content = m["content"] if isinstance(m.get("content"), str) else ""
        if role in ("user", "tool"):
            return f"{IM_START}user\n{content}{IM_END}\n"
        if role == "assistant":
            think = "" if self.thinks(chat) else EMPTY_THINK
            return f"{IM_START}assistant\n{think}{content.lstrip(chr(10))}{IM_END}\n"
        return ""  # system messages (the first is in the header) and other roles are skipped

    def tail(self, chat: Chat) -> str:
        if not chat.add_generation_prompt:
            return ""
        return self.assistant + ("" if self.thinks(chat) else EMPTY_THINK)
