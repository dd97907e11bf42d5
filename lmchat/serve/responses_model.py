"""The Responses API's request body, checked whole, and the response object built from a turn or a note.

Types are strict as in :mod:`.schemas`. Fields that change nothing here
(``include``, ``user``, ``service_tier``, ``prompt_cache_key``...) are accepted
and ignored; fields asking for what lmchat cannot do (``background``, a
hosted tools, a ``prompt`` template) are refused
with ``unsupported_value`` rather than silently ignored. The fields chat
shares are checked as chat checks them (:mod:`lmchat.validation`): the text
limit, the item count, ``tool_choice``; an error in a message of the turn
names the request's ``input[i]`` (:func:`input_error`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, TypedDict

from pydantic import Field, StrictBool, StrictStr, field_validator

from ..errors import InvalidMessages, SessionLengthExceeded
from ..jsontypes import JSON, JSONObject
from ..manager import TurnResult
from ..messages import Message
from ..templates.base import BaseTemplate
from ..tools.registry import response_format
from ..validation import DEFAULT_MAX_CHARS, MAX_MESSAGES, check_text, check_tool_choice
from .chain_state import Note
from .chains import thinking_switch
from .errors import ApiError, as_sent
from .items import bad, input_messages, response_tools
from .schemas import Count, Finite, _Body
from .wire import Item, ResponseObject, TurnCounts, Usage

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
Metadata = Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[StrictStr, Field(max_length=512)]],
                     Field(max_length=16)]


class Checked(TypedDict):
    """What :meth:`ResponsesRequest.checked` read from the nested fields."""

    conversation: str | None
    thinking: bool | None
    effort: str | None


class ResponsesRequest(_Body):
    """OpenAI's ``POST /v1/responses`` body."""

    model: StrictStr | None = None
    input: StrictStr | list[JSON] = Field(default_factory=list)
    instructions: StrictStr | None = None
    tools: list[JSON] | None = None
    tool_choice: StrictStr | JSONObject | None = None
    previous_response_id: StrictStr | None = None
    conversation: StrictStr | JSONObject | None = None
    store: StrictBool = True
    truncation: Literal["auto", "disabled"] = "disabled"
    max_output_tokens: Count | None = None
    temperature: Finite | None = Field(None, ge=0, le=2)
    top_p: Finite | None = Field(None, gt=0, le=1)
    reasoning: JSONObject | None = None
    stream: StrictBool = False
    metadata: Metadata | None = None
    parallel_tool_calls: StrictBool | None = None
    text: JSONObject | None = None
    background: StrictBool | None = None
    prompt: JSONObject | None = None

    @field_validator("input")
    @classmethod
    def _items(cls, value: str | list[JSON]) -> str | list[JSON]:
        # as many items as chat takes messages; checked here, not in the type: a union's error would name
        # its string branch (input.str)
        if isinstance(value, list) and len(value) > MAX_MESSAGES:
            raise ValueError(f"{len(value)} items: at most {MAX_MESSAGES}, as many as chat takes messages")
        return value

    def checked(self, max_chars: int | None = DEFAULT_MAX_CHARS) -> Checked:
        """What the body's nested fields mean, checked (``ApiError`` names the first field at fault);
        ``max_chars``: the server's limit on a message's text, which ``instructions`` (a system prompt) has."""
        check_text(self.instructions, "instructions", max_chars)
        if self.previous_response_id is not None and self.conversation is not None:
            raise bad("previous_response_id", "previous_response_id and conversation cannot be used together")
        if self.background:
            raise bad("background", "background responses are not supported", "unsupported_value")
        if self.prompt is not None:
            raise bad("prompt", "prompt templates are not supported: send instructions and input",
                      "unsupported_value")
        conversation = self.conversation
        if isinstance(conversation, dict):
            named = conversation.get("id")
            if not isinstance(named, str):
                raise bad("conversation.id", "a conversation is named by its id string")
            conversation = named
        if conversation is not None and not self.store:
            raise bad("store", "store=false cannot add to a conversation", "unsupported_value")
        effort = (self.reasoning or {}).get("effort")
        if effort is not None and (not isinstance(effort, str) or effort not in EFFORTS):
            raise bad("reasoning.effort", f"one of {', '.join(EFFORTS)}")
        choice = self.tool_choice
        if isinstance(choice, dict) and choice.get("type") not in ("function", "allowed_tools"):
            raise bad("tool_choice.type", "only function tools can be chosen", "unsupported_value")
        names = [t.get("name") for t in self.tools or () if isinstance(t, dict) and t.get("type") == "function"]
        check_tool_choice(choice, [n for n in names if isinstance(n, str)], chat=False)
        return {"conversation": conversation, "thinking": None if effort is None else effort != "none",
                "effort": effort}

    def fields(self, template: BaseTemplate, text_format: JSONObject | None = None) -> JSONObject:
        """The request's fields a response object repeats (a note keeps them); ``text_format``: ``text.format``
        as the response echoes it (:func:`.formats.text_constraint`)."""
        # kept only when structured: notes stay as they were for plain text
        shaped = {"text_format": text_format} if text_format and text_format.get("type") != "text" else {}
        return {**shaped, "temperature": self.temperature if self.temperature is not None else template.temperature,
                "top_p": self.top_p if self.top_p is not None else template.top_p,
                "max_output_tokens": self.max_output_tokens, "tool_choice": self.tool_choice or "auto",
                "truncation": self.truncation, "reasoning": self.reasoning, "metadata": self.metadata or {},
                "parallel_tool_calls": True if self.parallel_tool_calls is None else self.parallel_tool_calls,
                "store": self.store}


def check_effort(template: BaseTemplate, thinking: bool | None) -> None:
    """``reasoning.effort`` the template can honour: ``"none"`` needs a switch to turn reasoning off (Qwen3's
    ``enable_thinking``), any other effort a template whose model reasons (switched on, or always: R1, QwQ).
    Either is refused on a template that cannot do it, rather than silently ignored."""
    if thinking is None:
        return
    if not thinking and not thinking_switch(template):
        raise bad("reasoning.effort", f"the {template.name} template has no switch to turn reasoning off",
                  "unsupported_value")
    if thinking and not (thinking_switch(template) or response_format(template).reasoning):
        raise bad("reasoning.effort", f"the {template.name} template's model does not reason: leave reasoning "
                                      "out", "unsupported_value")


def input_error(exc: InvalidMessages | SessionLengthExceeded, value: str | list[JSON]) -> ApiError:
    """A turn's error naming the request's ``input`` (``input[i].content``) instead of the session's messages.

    Items are not messages (a ``function_call`` joins the assistant message
    before it, a ``reasoning`` item the next one): the item behind message
    ``j`` is found from prefixes of the input, which :func:`.items.input_messages`
    turns into the first messages of the whole (only when there is an error).
    """
    if isinstance(value, str):
        return as_sent(exc, 1, lambda k, field: "input")
    n = len(input_messages(value))

    def item(k: int | None, field: str | None) -> str:
        if k is None:
            return "input"
        if field is not None and field.startswith("tool_calls["):  # the n-th call is a function_call item of its own
            call, _, rest = field[len("tool_calls["):].partition("]")
            at = _first(len(value), lambda i: len(_message(value, i, k).get("tool_calls") or ()) > int(call))
            rest = rest.removeprefix(".function").removeprefix(".")
            return f"input[{at}].{_ITEM_FIELDS.get(rest, rest)}" if rest else f"input[{at}]"
        at = _first(len(value), lambda i: len(input_messages(value[:i + 1])) > k)
        if not field:
            return f"input[{at}]"
        field = _ITEM_FIELDS.get(field, field)
        item = value[at]  # an object: input_messages read it
        if isinstance(item, dict) and item.get("type") == "function_call_output" and field.startswith("content"):
            field = "output" + field[len("content"):]  # a tool result's text is the item's output
        return f"input[{at}].{field}"

    return as_sent(exc, n, item)


#: a message's field as the item that gave it names it (a call's ``id`` is the item's ``call_id``)
_ITEM_FIELDS = {"tool_call_id": "call_id", "id": "call_id"}


def _message(value: list[JSON], i: int, k: int) -> Message:
    messages = input_messages(value[:i + 1])
    return messages[k] if k < len(messages) else {}


def _first(n: int, reached: Callable[[int], bool]) -> int:
    """The first ``i < n`` for which ``reached(i)`` holds (it holds from there on), by bisection."""
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if reached(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def turn_of(result: TurnResult) -> TurnCounts:
    """The counts of a finished turn, as a note keeps them (``stream_turn(note=)``)."""
    return {"finish_reason": result.finish_reason, "prefilled": result.prefilled, "reused": result.reused,
            "generated": len(result.token_ids), "chars": len(result.text),
            "cache_miss_reason": result.cache_miss_reason, "cached_from": result.cached_from}


def status_of(finish_reason: str | None) -> tuple[str, dict[str, str | None] | None]:
    if finish_reason == "stop":
        return "completed", None
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "cancelled":
        return "cancelled", None
    return "incomplete", {"reason": None}  # e.g. a repetition stop


def usage(turn: TurnCounts, tokens: bool) -> Usage:
    """Responses usage: the prompt is what the engine prefilled plus what it reused (``cached_tokens``);
    ``cache_miss_reason`` (lmchat's) says why it could not reuse all it held. Counts are characters when
    the sessions have no tokenizer (``tokens`` False)."""
    prompt = turn["prefilled"] + turn["reused"]
    output = turn["generated"] if tokens else turn.get("chars", 0)
    return {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output,
            "input_tokens_details": {"cached_tokens": turn["reused"], "cache_write_tokens": 0,
                                     "cached_from": turn.get("cached_from"),
                                     "cache_miss_reason": turn.get("cache_miss_reason")},
            "output_tokens_details": {"reasoning_tokens": 0}}


def response_object(rid: str, note: Note, conversation: str | None, output: list[Item] | None, *,
                    tokens: bool, status: str | None = None) -> ResponseObject:
    """A response as the API returns it, from its whole note (:func:`.chains.expanded`) and the conversation it
    belongs to; a note without its ``turn`` is a response still running."""
    # resolved: values, no references (:func:`.chains.expanded`)
    req = note.request if isinstance(note.request, dict) else {}
    tools, turn = note.tools if isinstance(note.tools, list) else None, note.turn
    incomplete = None
    if status is None:
        status, incomplete = status_of(turn.get("finish_reason")) if turn else ("in_progress", None)
    return {
        "id": rid, "object": "response", "created_at": int(note.created_at), "status": status,
        "completed_at": int(note.created_at) if turn else None, "error": None, "incomplete_details": incomplete,
        "instructions": note.instructions, "max_output_tokens": req.get("max_output_tokens"),
        "model": note.model, "output": output or [], "parallel_tool_calls": req.get("parallel_tool_calls", True),
        "previous_response_id": note.previous_response_id,
        "conversation": {"id": conversation} if conversation else None,
        "reasoning": req.get("reasoning"), "store": req.get("store", True), "temperature": req.get("temperature"),
        "text": {"format": req.get("text_format") or {"type": "text"}}, "tool_choice": req.get("tool_choice", "auto"),
        "tools": response_tools(tools), "top_p": req.get("top_p"), "truncation": req.get("truncation"),
        "usage": usage(turn, tokens) if turn else None, "user": None, "metadata": req.get("metadata") or {},
        "background": False,
    }


def failed(response: ResponseObject, error: ApiError) -> ResponseObject:
    return {**response, "status": "failed", "error": {"code": "server_error", "message": error.message}}
