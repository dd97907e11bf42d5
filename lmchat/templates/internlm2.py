"""InternLM2, InternLM2.5 and InternLM3 chat: ChatML after ``<s>``, plus InternLM2's agent format.

Plain conversations render exactly as the official Hugging Face template
(``<|im_start|>{role}\\n{content}<|im_end|>\\n``). The agent format, which that
template does not render, follows InternLM's chat-format document (seed 000)
and LMDeploy's ``internlm2`` template:

* ``tools`` (OpenAI function schemas): ``<|im_start|>system name=<|plugin|>\\n``
  + ``json.dumps([functions], ensure_ascii=False)`` + ``<|im_end|>\\n``, right
  after the first message when it is a system message, else before the first
  message (LMDeploy's insertion point);
* the template keyword ``interpreter`` (True: the seed's prompt; a string: that
  prompt): ``<|im_start|>system name=<|interpreter|>\\n{prompt}<|im_end|>\\n``,
  before the plugin block, the seed's order when both are on;
* an assistant's ``tool_calls``, after its content:
  ``<|action_start|><|plugin|>\\n{"name": ..., "parameters": {...}}<|action_end|>``
  per call; a call to ``python``/``interpreter`` (not declared as a function)
  with a ``code`` argument is
  ``<|action_start|><|interpreter|>\\n```python\\n{code}\\n```<|action_end|>\\n``
  (the seed writes a newline after an interpreter action, none after a plugin's);
* a ``tool`` message: ``<|im_start|>environment name=<|plugin|>\\n`` (or
  ``name=<|interpreter|>`` when it answers an interpreter call);
* a message ``name``: `` name={name}`` after the role (``user name=file``);
  ``plugin``/``interpreter`` become their tokens except for users, as in
  lagent's ``INTERNLM2_META``.

The model stops at ``<|im_end|>`` or, after a call, at ``<|action_end|>``; what
follows either comes with the next delta. Every piece depends only on its
message and earlier ones, so sessions stay prefix-stable with tools too.
"""
from __future__ import annotations

from ..jsontypes import JSON
from ..messages import optional_text
from ..registry import template
from .base import stops
from .chat import Chat
from .chatml import IM_END, ChatML
from .render_utils import tojson
from .toolcalls import answered_call, arguments_of, call_function, functions, interpreter_code, is_interpreter_call

PLUGIN, INTERPRETER = "<|plugin|>", "<|interpreter|>"
ACTION_START, ACTION_END = "<|action_start|>", "<|action_end|>"
#: names that stand for InternLM2's tool tokens (lagent's INTERNLM2_META name map)
NAME_TOKENS = {"plugin": PLUGIN, "interpreter": INTERPRETER}

#: the code-interpreter system prompt of InternLM's chat-format document (seed 000)
INTERPRETER_PROMPT = (
    "你现在可以使用一个支持 Python 代码执行的 Jupyter 笔记本环境。"
    "只需向 python 发送代码，即可在这个有状态环境中进行运行。"
    "这个功能适用于:\n"
    "- 数据分析或处理（如数据操作和图形制作）\n"
    "- 复杂计算（如数学和物理问题）\n"
    "- 编程示例（用于理解编程概念或语言特性）\n"
    "- 文本处理和分析（包括文本分析和自然语言处理）\n"
    "- 机器学习和数据科学（模型训练和数据可视化展示）\n"
    "- 文件操作和数据导入（处理CSV、JSON等格式文件）\n"
)


def named(prefix: str, name: str) -> str:
    """``<|im_start|>role\\n`` -> ``<|im_start|>role name={name}\\n`` (LMDeploy strips the newline the same way)."""
    return prefix.rstrip("\n") + f" name={name}\n"


@template("internlm2", "internlm2_chat", "internlm2-chat", "internlm2-chat-7b", "internlm2-chat-20b")
class InternLM2(ChatML):
    """InternLM2-Chat: ChatML after ``<s>``. Roles pass through (``environment`` too).

    Also renders InternLM2's agent format (tools, ``<|action_start|>`` calls,
    ``environment`` results, ``name=`` metadata), which the official template
    does not: ``supports_tools`` stays False because that flag means "renders
    tools as the official template does". See docs/tool-prompts.md.
    """

    official = "internlm__internlm2-chat-7b"
    tool_format = "internlm"
    hyperparameter_source = "LMDeploy's internlm2 template (session_len 32768, top_p 0.8, temperature 0.8)"

    session_len: int = 32768
    bos: str = "<s>"
    stop_words: tuple[str, ...] | None = stops(IM_END, ACTION_END)

    def header(self, chat: Chat) -> str:
        # with no leading system message the tool prompts follow bos (and a default system prompt, if set)
        return super().header(chat) + ("" if chat.role(0) == "system" else self.tool_prompts(chat))

    def tool_prompts(self, chat: Chat) -> str:
        """The interpreter and plugin system turns the conversation's options ask for."""
        out = ""
        interpreter = chat.kwargs.get("interpreter")
        if interpreter:
            prompt = interpreter if isinstance(interpreter, str) else INTERPRETER_PROMPT
            out += f"{named(self.system, INTERPRETER)}{prompt}{self.eosys}"
        if chat.tools:
            out += f"{named(self.system, PLUGIN)}{tojson(functions(chat.tools))}{self.eosys}"
        return out

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        if role == "tool":
            target = INTERPRETER if is_interpreter_call(chat, answered_call(chat, i) or "") else PLUGIN
            prefix, suffix = named(self.affixes("environment")[0], target), f"{IM_END}\n"
        else:
            prefix, suffix = self.affixes(role)
            name = m.get("name")
            if isinstance(name, str):
                prefix = named(prefix, name if role == "user" else NAME_TOKENS.get(name, name))
        if role == "assistant" and m.get("tool_calls"):
            content = optional_text(m, i) + "".join(self.action(chat, call, i) for call in m["tool_calls"])
        else:
            content = chat.text(i)
        out = f"{prefix}{content}{suffix}"
        return out + self.tool_prompts(chat) if i == 0 and role == "system" else out

    def action(self, chat: Chat, call: JSON, i: int) -> str:
        """One tool call as the model writes it."""
        name, fn = call_function(call, i)
        if is_interpreter_call(chat, name):
            return f"{ACTION_START}{INTERPRETER}\n```python\n{interpreter_code(fn, i)}\n```{ACTION_END}\n"
        call_json = tojson({"name": name, "parameters": arguments_of(fn, i)})
        return f"{ACTION_START}{PLUGIN}\n{call_json}{ACTION_END}"


@template("internlm2.5", "internlm2_5", "internlm2d5", "internlm2_5-chat")
class InternLM2_5(InternLM2):
    """InternLM2.5-Chat: the InternLM2 format."""

    official = "internlm__internlm2_5-7b-chat"


@template("internlm3", "internlm3-instruct")
class InternLM3(InternLM2):
    """InternLM3-Instruct: the InternLM2 format."""

    official = "internlm__internlm3-8b-instruct"
    hyperparameter_source = "internlm3-8b-instruct generation_config.json (top_p 0.8, temperature 0.8); 32K context"
