"""The Responses and Conversations API's objects as they go on the wire, typed (``TypedDict``).

They are the JSON the routes return and the records a session keeps, key for key: a ``TypedDict``
is the dict itself at run time, so what goes out is what went out before (the tests compare it
byte for byte, the ``openai`` client reads it), and mypy checks every key that is built or read.
The names follow ``openai.types.responses`` (``ResponseReasoningItem``, ``ResponseOutputMessage``,
``ResponseFunctionToolCall``...), whose pydantic models are for reading a response, not for
building one key for key.

:data:`JSON` and :data:`JSONObject` (lmchat/jsontypes.py) are values parsed from JSON before they are
checked: ``object``, so that nothing reads them without looking at their type first.
"""
from __future__ import annotations

from typing import Literal, TypeAlias, TypedDict

from typing_extensions import NotRequired

from ..jsontypes import JSON, JSONObject
from ..messages import Message

Status = Literal["completed", "in_progress", "incomplete"]


class TextPart(TypedDict):
    type: Literal["input_text"]
    text: str


class OutputText(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[JSONObject]
    logprobs: list[JSONObject]


class ReasoningText(TypedDict):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(TypedDict):
    type: Literal["reasoning"]
    id: str
    summary: list[JSONObject]
    content: list[ReasoningText]
    status: str


class OutputMessage(TypedDict):
    type: Literal["message"]
    id: str
    role: Literal["assistant"]
    status: str
    content: list[OutputText]


class InputMessage(TypedDict):
    """A user's, a system's (a developer's) message read back as an item."""

    type: Literal["message"]
    id: str
    role: str
    status: str
    content: list[TextPart]


class FunctionCall(TypedDict):
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: str


class FunctionCallOutput(TypedDict):
    type: Literal["function_call_output"]
    id: str
    call_id: str
    output: str
    status: str


Item: TypeAlias = ReasoningItem | OutputMessage | InputMessage | FunctionCall | FunctionCallOutput


class ItemPage(TypedDict):
    """A list object (``GET .../items``, ``.../input_items``)."""

    object: Literal["list"]
    data: list[Item]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FunctionTool(TypedDict):
    """A Responses function tool, as a response echoes it."""

    type: Literal["function"]
    name: str | None
    description: str | None
    parameters: JSONObject | None
    strict: bool


#: tools as the session holds them (chat completions' form), which the core types so
Tools = list[Message]


class TurnCounts(TypedDict):
    """A finished turn's counts, as a note keeps them (``Note.turn``)."""

    finish_reason: NotRequired[str | None]  # the manager leaves out a None
    prefilled: int
    reused: int
    generated: int
    chars: NotRequired[int]
    cache_miss_reason: NotRequired[str | None]
    cached_from: NotRequired[str | None]


class CachedDetails(TypedDict):
    cached_tokens: int
    cache_write_tokens: int
    cached_from: str | None
    cache_miss_reason: str | None


class Usage(TypedDict):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: CachedDetails
    output_tokens_details: dict[str, int]


class ResponseObject(TypedDict):
    """A response as ``/v1/responses`` returns it (``openai.types.responses.Response``'s keys)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: str
    completed_at: int | None
    error: dict[str, str] | None
    incomplete_details: dict[str, str | None] | None
    instructions: JSON
    max_output_tokens: JSON
    model: JSON
    output: list[Item]
    parallel_tool_calls: JSON
    previous_response_id: str | None
    conversation: dict[str, str] | None
    reasoning: JSON
    store: JSON
    temperature: JSON
    text: dict[str, JSON]
    tool_choice: JSON
    tools: list[FunctionTool]
    top_p: JSON
    truncation: JSON
    usage: Usage | None
    user: None
    metadata: JSON
    background: bool


class Deleted(TypedDict):
    """What a DELETE answers (``response.deleted``, ``conversation.deleted``)."""

    id: str
    object: str
    deleted: bool


class Conversation(TypedDict):
    """A conversation as ``/v1/conversations`` returns it (``updated_at``: lmchat's list adds it)."""

    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]
    updated_at: NotRequired[int]


class ConversationPage(TypedDict):
    object: Literal["list"]
    data: list[Conversation]
    first_id: str | None
    last_id: str | None
    has_more: bool


class SessionView(TypedDict):
    """A session as ``/v1/sessions/{id}`` shows it (``unit``: what ``step`` and ``session_len`` count)."""

    id: str
    object: Literal["session"]
    template: str
    step: int
    unit: Literal["tokens", "characters"]
    session_len: int
    turns: int
    messages: list[Message]
    tools: Tools | None


class SessionSummary(TypedDict):
    id: str
    object: Literal["session"]
    title: str | None
    turns: int
    updated_at: float
    template: str | None


class SessionList(TypedDict):
    object: Literal["list"]
    data: list[SessionSummary]
