"""The GLM family (THUDM): ChatGLM3-6B and GLM-4-9B-Chat.

A message is a role marker, a metadata line and the content:
``<|role|>{metadata}\\n{content}``. The official Jinja templates keep the
metadata line empty (GLM-4 prints a message's ``metadata`` field); ChatGLM3's
Hugging Face template writes ``\\n `` (the space is what its SentencePiece
tokenizer puts before the content). There is no end-of-turn marker: the model
ends its answer by emitting the *next* role marker, ``<|user|>`` or
``<|observation|>`` (stop words), which the template injects itself, so
``eoa`` is empty and the engine must not keep the stop token.

The generation prompt is the bare ``<|assistant|>``: the model writes the
metadata line itself (``lead``): the engine keeps it with the answer, the
message content does not, so sessions stay prefix-stable.
"""
from __future__ import annotations

from typing import Any

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..messages import optional_text
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import jstr, tojson
from .toolcalls import arguments_of, call_function, functions, interpreter_code, is_interpreter_call

#: ChatGLM3's tool system prompt (``TOOL_DEFINITION_PREFIX`` of its fine-tuning code, the demos' system content)
TOOL_PROMPT = "Answer the following questions as best as you can. You have access to the following tools:"


# Any here: a message as the template reads it: any value Jinja may read
def printed(message: dict[str, Any], field: str) -> str:
    """What ``{{ message[field] }}`` prints: nothing for a missing field."""
    return jstr(message[field]) if field in message else ""


@template("chatglm3", "chatglm3-6b")
class ChatGLM3(BaseTemplate):
    """ChatGLM3-6B: ``[gMASK]sop`` then ``<|role|>\\n {content}`` per message, any role.

    Plain conversations render as the Hugging Face template, which prints
    neither ``metadata`` nor tools. The tool format, from ChatGLM3's own code
    (``build_chat_input``, ``build_single_message`` and the fine-tuning
    ``format_conversation``), is rendered too: ``<|role|>{metadata}\\n {content}``;
    ``tools`` as a first system message (:data:`TOOL_PROMPT` + the functions as
    ``json.dumps(indent=4)``); a call as ``<|assistant|>{name}\\n ```python\\n
    tool_call(k=repr(v), ...)\\n``` ``; ``tool`` results under ``<|observation|>``.
    ``supports_tools`` stays False: the official template renders no tools.
    See docs/tool-prompts.md.
    """

    official = "THUDM__chatglm3-6b"
    prefix_stable = True
    tool_format = "chatglm3"
    hyperparameter_source = "ChatGLM3-6B's chat() defaults (top_p 0.8, temperature 0.8); 8K context"

    session_len: int = 8192
    top_p: float = 0.8
    temperature: float = 0.8
    bos: str = "[gMASK]sop"
    assistant: str = "<|assistant|>"
    #: what the model writes between ``<|assistant|>`` and its answer (empty metadata line)
    lead: str = "\n "
    stop_words: tuple[str, ...] | None = stops("<|user|>", "<|observation|>")

    def header(self, chat: Chat) -> str:
        if not chat.tools:
            return self.bos
        return f"{self.bos}<|system|>\n {TOOL_PROMPT}\n{tojson(functions(chat.tools), indent=4)}"

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        role = m["role"]
        if role == "assistant" and m.get("tool_calls"):
            content = optional_text(m, i)
            text = f"<|assistant|>\n {content}" if content else ""
            return text + "".join(self.call(chat, call, i) for call in m["tool_calls"])
        if role == "tool":  # OpenAI's tool result; ChatGLM3's fine-tuning code JSON-encodes non-text results
            content = m.get("content", "")
            return f"<|observation|>\n {content if isinstance(content, str) else tojson(content)}"
        content = printed(m, "content")
        if role == "system" and "tools" in m:  # ChatGLM3's native form: a system message carrying the tools
            content += "\n" + tojson(m["tools"], indent=4)
        return f"<|{role}|>{printed(m, 'metadata')}\n {content}"

    def call(self, chat: Chat, call: JSON, i: int) -> str:
        """One tool call: the tool name on the metadata line, the call as a Python code block."""
        name, fn = call_function(call, i)
        if is_interpreter_call(chat, name):
            return f"<|assistant|>interpreter\n ```python\n{interpreter_code(fn, i)}\n```"
        # ChatGLM3's format_function_call: astunparse of tool_call(k=Constant(v)), i.e. repr() of each value
        args = ", ".join(f"{k}={v!r}" for k, v in arguments_of(fn, i).items())
        return f"<|assistant|>{name}\n ```python\ntool_call({args})\n```"


# GLM-4's system prompt for a message that carries ``tools``: an intro, then
# one section per tool (one newline before each "##": trim_blocks eats the other).
GLM4_TOOLS_INTRO = (
    "<|system|>\n你是一个名为 ChatGLM 的人工智能助手。"
    "你是基于智谱AI训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具"
)
GLM4_FUNCTION_NOTE = "\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
GLM4_BUILTIN_TOOLS = {
    "python": (
        "\n## python\n\n当你向 `python` 发送包含 Python 代码的消息时，"
        "该代码将会在一个有状态的 Jupyter notebook 环境中执行。\n"
        "`python` 返回代码执行的输出，或在执行 60 秒后返回超时。\n"
        "`/mnt/data` 将会持久化存储你的文件。在此会话中，`python` 无法访问互联网。"
        "不要使用 `python` 进行任何网络请求或者在线 API 调用，"
        "这些在线内容的访问将不会成功。"
    ),
    "simple_browser": (
        "\n## simple_browser\n\n你可以使用 `simple_browser` 工具。该工具支持以下函数：\n"
        "`search(query: str, recency_days: int)`：使用搜索引擎进行查询并显示结果，"
        "可以使用 `recency_days` 参数控制搜索内容的时效性。\n"
        "`mclick(ids: list[int])`：获取一系列指定 id 的页面内容。"
        "每次调用时，须选择3-10个页面。"
        "选择多个角度的页面，同时尽可能选择可信任的信息来源。"
        "考虑到部分页面是无法加载的，"
        "你也可以多打开一些可能有用的页面而不用担心内容过多。\n"
        "`open_url(url: str)`：打开指定的 URL。\n\n"
        "使用 `【{引用 id}†{引用文本}】` 来引用内容。\n\n"
        "操作步骤：1. 使用 `search` 来获得信息列表; "
        "2. 使用 `mclick` 来获取指定 ID 页面的内容; "
        "3. 根据获得的内容进行回复。在回复中应当引用信息来源。\n"
        " 如果用户提供了 URL，也可以用 `open_url` 直接打开页面。\n"
        "如果初次搜索结果没有找到合适的信息，也可以再次使用 `search` 进行搜索。"
    ),
    "cogview": (
        "\n## cogview\n\n如果用户的请求中包含了对图像的描述，"
        "你可以使用 `cogview` 来生成图像并展示给用户。"
        "你需要向 `cogview` 发送图像描述，规则：\n"
        "- 发送给 `cogview` 的消息必须使用英语。用户的中文描述必须完全翻译为英语。\n"
        "- 应当尽可能详细地描述图像生成的需求，需求描述约 100 英文单词。\n"
        "- 保持用户原始描述的意图。不要虚构内容或者没见过的人物。\n"
        "- 如无特殊说明，所在地为中国，持有中国立场并遵循中国社会主义价值观。"
    ),
}


def glm4_tools(tools: JSON, i: int) -> str:
    """The system block GLM-4 renders for a message's ``tools`` field."""
    if not isinstance(tools, (list, tuple)):
        raise InvalidMessages(f"expected a list of tools, got {type(tools).__name__}", index=i, field="tools")
    out = [GLM4_TOOLS_INTRO]
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None  # anything else renders nothing
        if kind == "function":
            function = tool.get("function")
            if not isinstance(function, dict):
                raise InvalidMessages("a function tool needs a 'function' object", index=i, field="tools")
            out.append(f"\n## {printed(function, 'name')}\n\n{tojson(function, indent=4)}{GLM4_FUNCTION_NOTE}")
        elif isinstance(kind, str):
            out.append(GLM4_BUILTIN_TOOLS.get(kind, ""))
    return "".join(out)


@template("glm4", "glm-4", "glm4-chat", "chatglm4", "glm-4-9b-chat")
class GLM4(ChatGLM3):
    """GLM-4-9B-Chat: ``[gMASK]<sop>`` then ``<|role|>{metadata}\\n{content}``, any role.

    Messages with empty content are left out. Tools follow GLM-4's own
    convention, not OpenAI's: a message with a ``tools`` list (usually
    ``{"role": "system", "content": "", "tools": [...]}``) renders GLM-4's tool
    system prompt; a call is an assistant message whose ``metadata`` is the tool
    name and whose content is the JSON arguments; results use the
    ``observation`` role. As in the official template, the ``tools`` argument,
    ``tool_calls`` and ``tool_call_id`` are ignored (a ``tool`` role prints as
    ``<|tool|>``).
    """

    official = "THUDM__glm-4-9b-chat"
    hyperparameter_source = (
        "glm-4-9b-chat generation_config.json (top_p 0.8, temperature 0.8) and config.json (seq_length 131072)"
    )
    prefix_stable = True
    supports_tools = True
    tool_format = "glm4"

    session_len: int = 131072
    bos: str = "[gMASK]<sop>"
    lead: str = "\n"
    stop_words: tuple[str, ...] | None = stops("<|endoftext|>", "<|user|>", "<|observation|>")

    def header(self, chat: Chat) -> str:
        return self.bos  # GLM-4 renders tools from messages only; the tools argument is ignored

    def piece(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        out = glm4_tools(m["tools"], i) if "tools" in m else ""
        if m.get("content"):
            out += f"<|{m['role']}|>{printed(m, 'metadata')}\n{jstr(m['content'])}"
        return out
