"""Single-model families: Falcon3, OpenChat 3.5 and 3.6, and SOLAR Instruct."""
from __future__ import annotations

from ..errors import InvalidMessages
from ..registry import template
from .affix import AffixTemplate
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import jstr, tojson, trimmed

FALCON_EOS = "<|endoftext|>"
FALCON_TOOLS = (
    "You are a Falcon assistant skilled in function calling. You are helpful, respectful, and concise.\n\n# Tools\n\n"
    "You have access to the following functions. You MUST use them to answer questions when needed. For each "
    "function call, you MUST return a JSON object inside <tool_call></tool_call> tags.\n\n<tools>{tools}</tools>\n\n"
    "# Output Format\n\nYour response MUST follow this format when making function calls:\n<tool_call>\n[\n"
    '  {{"name": "function_name", "arguments": {{"arg1": "value1", "arg2": "value2"}}}},\n'
    '  {{"name": "another_function", "arguments": {{"arg": "value"}}}}\n]\n</tool_call>\n'
    "If no function calls are needed, respond normally without the tool_call tags.\n"
)


@template("falcon3", "falcon3-instruct", "falcon-3")
class Falcon3(AffixTemplate):
    """Falcon3 Instruct: ``<|{role}|>\\n{content}\\n``; an answer ends with the eos ``<|endoftext|>``.

    The model emits ``<|endoftext|>`` (a stop word the engine keeps); the
    ``\\n`` after it, which the official template omits after a final answer,
    comes with the next turn's delta. Roles other than system/user/assistant
    render nothing.

    With tools the format changes: one system block holds the first system
    message, Falcon's tool instructions and the tool list; later system
    messages are dropped; ``tool_calls`` follow the content inside
    ``<tool_call>`` tags; tool results are assistant turns wrapped in
    ``<tool_response>``; every answer ends with ``<|endoftext|>\\n``.
    """

    official = "tiiuae__Falcon3-7B-Instruct"
    hyperparameter_source = "Falcon3-7B-Instruct config.json (32K context); sampling: defaults (none published)"
    hf_special_tokens = {"eos_token": FALCON_EOS}
    prefix_stable = True
    supports_tools = True
    tool_format = "hermes"
    roles = None  # unknown roles render nothing rather than raise

    session_len: int = 32768
    system: str = "<|system|>\n"
    eosys: str = "\n"
    user: str = "<|user|>\n"
    eoh: str = "\n"
    assistant: str = "<|assistant|>\n"
    eoa: str = FALCON_EOS
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(FALCON_EOS)

    def header(self, chat: Chat) -> str:
        if not chat.tools:
            return ""
        first = chat.messages[0] if chat.role(0) == "system" else {}
        own = jstr(first["content"]) if "content" in first else ""
        return f"{self.system}{own}{FALCON_TOOLS.format(tools=tojson(chat.tools, indent=2))}"

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if chat.tools:
            return self.tool_piece(chat, i)
        if role not in ("system", "user", "assistant"):
            return ""
        if role == "assistant" and i == len(chat.messages) - 1:
            return f"{self.assistant}{chat.text(i)}{self.eoa}"  # no separator after the final answer
        return super().piece(chat, i)

    def tool_piece(self, chat: Chat, i: int) -> str:
        role, m = chat.role(i), chat.messages[i]
        if role == "user":
            return super().piece(chat, i)
        if role == "assistant":
            content = f"{self.assistant}{chat.text(i)}" if m.get("content") else ""
            calls = f"\n<tool_call>\n{tojson(m['tool_calls'], indent=2)}\n</tool_call>" if m.get("tool_calls") else ""
            return f"{content}{calls}{self.eoa}{self.separator}"
        if role == "tool":
            return f"{self.assistant}<tool_response>\n{chat.text(i)}\n</tool_response>\n"
        return ""  # system messages (the first is in the header) and other roles

    def tail(self, chat: Chat) -> str:
        return self.assistant if chat.add_generation_prompt else ""


@template("openchat", "openchat-3.5", "openchat_3.5")
class OpenChat(BaseTemplate):
    """OpenChat 3.5: ``<s>`` then ``GPT4 Correct {Role}: {content}<|end_of_turn|>`` for any role.

    The model emits ``<|end_of_turn|>`` (a stop word the engine keeps). The
    generation prompt ``GPT4 Correct Assistant:`` has no trailing space: the
    model writes it (``lead``), as the leading space of its first token.
    """

    official = "openchat__openchat-3.5-0106"
    prefix_stable = True
    hyperparameter_source = "openchat-3.5-0106 config.json (8K context); sampling: defaults (none published)"

    session_len: int = 8192
    bos: str = "<s>"
    assistant: str = "GPT4 Correct Assistant:"
    eoa: str = "<|end_of_turn|>"
    #: what the model writes between the generation prompt and its answer
    lead: str = " "
    stop_words: tuple[str, ...] | None = stops("<|end_of_turn|>")

    def piece(self, chat: Chat, i: int) -> str:
        return f"GPT4 Correct {chat.messages[i]['role'].title()}: {chat.text(i)}{self.eoa}"


@template("openchat-3.6", "openchat-3.6-8b-20240522", "openchat-3.6-8b", "openchat_3.6")
class OpenChat36(BaseTemplate):
    """OpenChat 3.6 (Llama-3-8B based): Llama 3's header blocks with OpenChat's role names.

    ``<|begin_of_text|>`` then ``<|start_header_id|>GPT4 Correct User<|end_header_id|>\\n\\n{content}<|eot_id|>``
    (``GPT4 Correct Assistant`` for answers, ``System`` for system messages), content trimmed; any other role
    is an error, as in the official template. The model ends its turn with ``<|eot_id|>``.
    """

    official = "openchat__openchat-3.6-8b-20240522"
    prefix_stable = True
    hf_special_tokens = {"bos_token": "<|begin_of_text|>"}
    hyperparameter_source = "openchat-3.6-8b-20240522 config.json (8K context); sampling: LMDeploy defaults"

    session_len: int = 8192
    bos: str = "<|begin_of_text|>"
    assistant: str = "<|start_header_id|>GPT4 Correct Assistant<|end_header_id|>\n\n"
    eoa: str = "<|eot_id|>"
    stop_words: tuple[str, ...] | None = stops("<|eot_id|>", "<|end_of_text|>")

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role in ("user", "assistant"):
            name = f"GPT4 Correct {role.title()}"
        elif role == "system":
            name = "System"
        else:
            raise InvalidMessages("Only user, assistant and system roles are supported!", index=i, field="role")
        return f"<|start_header_id|>{name}<|end_header_id|>\n\n{trimmed(chat.messages[i])}<|eot_id|>"


@template("solar", "solar-instruct")
class Solar(AffixTemplate):
    """SOLAR-10.7B-Instruct: ``### User:\\n{content}\\n\\n### Assistant:\\n{content}``.

    An answer has no end marker in the template: the model's eos ``</s>`` is
    not kept (``eoa`` is empty) and the next ``### User:`` follows the answer
    directly. An empty system message and roles other than
    system/user/assistant render nothing.
    """

    official = "upstage__SOLAR-10.7B-Instruct-v1.0"
    hyperparameter_source = "SOLAR-10.7B-Instruct-v1.0 config.json (4K context); sampling: defaults (none published)"
    prefix_stable = True
    roles = None

    session_len: int = 4096
    system: str = "### System:\n"
    eosys: str = "\n\n"
    user: str = "### User:\n"
    eoh: str = "\n\n"
    assistant: str = "### Assistant:\n"

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role not in ("system", "user", "assistant") or (role == "system" and not chat.messages[i].get("content")):
            return ""
        return super().piece(chat, i)
