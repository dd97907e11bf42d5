"""DeepSeek-V3.1 (hybrid thinking): V3's ``<bos>{systems}<｜User｜>{q}<｜Assistant｜>`` with a think switch.

Rendered from code, byte-exact with ``deepseek-ai__DeepSeek-V3.1`` (the text DeepSeek-V3.1-Terminus ships too).
"""
from __future__ import annotations

from ..errors import InvalidMessages
from ..jsontypes import JSON
from ..registry import template
from .chat import Chat
from .deepseek_v3_r1 import CALLS_BEGIN, CALLS_END, OUTPUT_BEGIN, OUTPUT_END, DeepSeekV3, _calls

CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
THINK, NO_THINK = "<think>", "</think>"


def _last_turn(chat: Chat, i: int) -> str | None:
    """The role of the last user, assistant or tool message before ``i`` (the official ``ns.is_last_user`` /
    ``ns.is_tool``: other roles change neither)."""
    for j in range(i - 1, -1, -1):
        role = chat.role(j)
        if role in ("user", "assistant", "tool"):
            return role
    return None


def _call_text(call: JSON, i: int) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    parts = (fn.get("name"), fn.get("arguments")) if isinstance(fn, dict) else ()
    if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        raise InvalidMessages("each tool call needs a string function.name and function.arguments (a JSON string)",
                              index=i, field="tool_calls")
    name, arguments = parts
    return f"{CALL_BEGIN}{name}{SEP}{arguments}{CALL_END}"


@template("deepseek-v3.1", "DeepSeek-V3.1", "deepseek_v3.1", "deepseek-v3.1-terminus", "DeepSeek-V3.1-Terminus")
class DeepSeekV31(DeepSeekV3):
    """DeepSeek-V3.1: one model, thinking or not, switched by the ``thinking`` template keyword.

    The generation prompt is ``<｜Assistant｜></think>`` (non-thinking, the default) or, with ``thinking=True``,
    ``<｜Assistant｜><think>``: the model then writes ``reasoning</think>answer``. History renders every answer
    that follows a user turn as ``<｜Assistant｜></think>{text after its first </think>}<eos>``, so a thinking
    turn's reasoning is dropped and the next turn is a reset; without thinking the history extends the prompt.
    An assistant message with a true ``prefix`` renders ``<think>`` instead when ``thinking`` is on (the
    official prefix-completion switch).

    Tool calls (``tool_calls`` present): ``{content}<｜tool▁calls▁begin｜>`` then, per call,
    ``<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{arguments}<｜tool▁call▁end｜>`` (no type, no fence: unlike V3),
    closed by ``<｜tool▁calls▁end｜><eos>``; the content is read only with a first call, and must then be a
    string, as the arguments must (a JSON string). Results are
    ``<｜tool▁output▁begin｜>{r}<｜tool▁output▁end｜>`` with no block around them, and no generation prompt
    follows them: the model answers right after the last result (its answer renders without
    ``<｜Assistant｜>`` and keeps any ``</think>`` in it).
    """

    official = "deepseek-ai__DeepSeek-V3.1"
    hyperparameter_source = (
        "DeepSeek-V3.1 config.json max_position_embeddings 163840 (the model card says 128K); sampling as "
        "DeepSeek's generation_config.json files ship it (temperature 0.6, top_p 0.95), not stated on the "
        "V3.1 model card"
    )
    tool_format = "deepseek_v31"
    reasoning = True

    top_p: float = 0.95
    temperature: float = 0.6

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role == "user":
            return self.user + chat.text(i)
        if role == "assistant":
            return self.answer(chat, i)
        if role == "tool":
            return f"{OUTPUT_BEGIN}{chat.text(i)}{OUTPUT_END}"
        return ""  # system messages are in the header; other roles are skipped

    def answer(self, chat: Chat, i: int) -> str:
        m = chat.messages[i]
        last = _last_turn(chat, i)
        end = self.eoa + self.separator
        if m.get("tool_calls") is not None:
            out = self.assistant + NO_THINK if last == "user" else ""
            for k, call in enumerate(_calls(chat, i)):
                out += (chat.text(i) + CALLS_BEGIN if k == 0 else "") + _call_text(call, i)
            return out + CALLS_END + end
        out = ""
        if last == "user":
            out = self.assistant + (THINK if m.get("prefix") and chat.kwargs.get("thinking") else NO_THINK)
        content = chat.text(i)
        if last != "tool" and NO_THINK in content:
            content = content.split(NO_THINK, 1)[1]
        return out + content + end

    def tail(self, chat: Chat) -> str:
        if not chat.add_generation_prompt or _last_turn(chat, len(chat.messages)) != "user":
            return ""
        return self.assistant + (THINK if chat.kwargs.get("thinking") else NO_THINK)
