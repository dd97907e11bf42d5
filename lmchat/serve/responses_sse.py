"""The Responses API's event stream: ``event: TYPE`` / ``data: JSON`` pairs with a ``sequence_number``.

``response.created`` and ``response.in_progress`` open it; the answer's
reasoning and text stream as they are parsed (``output_item.added``,
``content_part.added``, ``reasoning_text.delta`` / ``output_text.delta``, then
their ``.done`` events); function calls come once the turn is committed, with
the call ids the session keeps (a tool result must name them), as one
``function_call_arguments.delta`` each; ``response.completed`` (or
``response.incomplete``) carries the whole response, sent once the turn is
saved and the session free. A failure after the stream began (any: an
unexpected one is logged as a 500 would be) is an ``error`` event followed by
``response.failed``, and the stream ends as any does: its connection goes on.
"""
from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import TypeVar

from ..manager import TurnResult, TurnStream
from ..tools import ContentDelta, ReasoningDelta
from ..tools.events import Event
from .errors import api_error
from .items import arguments_text, call_item, message_item, reasoning_item
from .request_turns import parsed_of
from .responses_model import failed
from .wire import Item, OutputMessage, OutputText, ReasoningItem, ReasoningText, ResponseObject


class Events:
    """Formats the events of one stream, numbering them."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: str, **fields: object) -> str:
        payload = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"


Opened = TypeVar("Opened", ReasoningItem, OutputMessage)


def _opened(item: Opened) -> Opened:
    """An item as its stream opens it: no content part yet (``content_part.added`` brings it)."""
    item["content"] = []
    return item


async def response_events(turn: TurnStream, base: ResponseObject, *, sid: str, serial: int, parse: bool,
                          finish: Callable[[TurnResult, list[Item]], ResponseObject]
                          ) -> AsyncGenerator[str, None]:
    """The events of one response. ``turn``: the turn's stream, started (its answer parsed as it reads it, the
    same as the stored answer, when ``parse``); ``base``: the response object in progress; ``serial``: the
    answer's item serial; ``finish(result, output)``: the finished response object."""
    event = Events()
    parser = turn.reading.stream() if parse else None
    output: list[Item] = []
    texts: dict[str, list[str]] = {}  # item id -> its text so far
    open_ids: list[str] = []

    def open_item(item: Item, part: ReasoningText | OutputText) -> list[str]:
        output.append(item)
        texts[item["id"]] = []
        open_ids.append(item["id"])
        return [event("response.output_item.added", output_index=len(output) - 1, item=item),
                event("response.content_part.added", item_id=item["id"], output_index=len(output) - 1,
                      content_index=0, part=part)]

    def close(status: str) -> list[str]:
        out = []
        for item_id in open_ids:
            index = next(i for i, it in enumerate(output) if it["id"] == item_id)
            text = "".join(texts[item_id])
            done: Item
            part: ReasoningText | OutputText
            if output[index]["type"] == "reasoning":
                done = reasoning_item(sid, serial, text, status)
                part = done["content"][0]
                out.append(event("response.reasoning_text.done", item_id=item_id, output_index=index,
                                 content_index=0, text=text))
            else:
                said = message_item(sid, serial, text, status)
                done, part = said, said["content"][0]
                out.append(event("response.output_text.done", item_id=item_id, output_index=index,
                                 content_index=0, text=text, logprobs=[]))
            out.append(event("response.content_part.done", item_id=item_id, output_index=index, content_index=0,
                             part=part))
            out.append(event("response.output_item.done", output_index=index, item=done))
            output[index] = done
        open_ids.clear()
        return out

    def deltas(parsed: list[Event]) -> list[str]:
        out = []
        for piece in parsed:
            if not isinstance(piece, (ReasoningDelta, ContentDelta)) or not piece.text:
                continue  # calls come once committed; a parse note is not for clients
            reasoning = isinstance(piece, ReasoningDelta)
            item_id = f"{'rs' if reasoning else 'msg'}_{sid}_{serial}"
            if item_id not in open_ids:
                if not reasoning:
                    out += close("completed")  # the reasoning is over
                if item_id in texts:  # reasoning again after the answer began: it joins the first block
                    open_ids.append(item_id)
                elif reasoning:
                    out += open_item(_opened(reasoning_item(sid, serial, "", "in_progress")),
                                     {"type": "reasoning_text", "text": ""})
                else:
                    out += open_item(_opened(message_item(sid, serial, "", "in_progress")),
                                     {"type": "output_text", "text": "", "annotations": [], "logprobs": []})
            texts[item_id].append(piece.text)
            index = next(i for i, it in enumerate(output) if it["id"] == item_id)
            kind = "response.reasoning_text.delta" if reasoning else "response.output_text.delta"
            extra: dict[str, object] = {} if reasoning else {"logprobs": []}
            out.append(event(kind, item_id=item_id, output_index=index, content_index=0, delta=piece.text, **extra))
        return out

    yield event("response.created", response=base)
    yield event("response.in_progress", response=base)
    try:
        async for chunk in turn:
            parsed: list[Event]
            if parser is None:
                parsed = [ContentDelta(chunk.text)]
            else:
                parsed = parser.feed(chunk.text) + (parser.finish() if chunk.finish_reason else [])
            for line in deltas(parsed):
                yield line
        result = turn.result
        status = "completed" if result.finish_reason == "stop" else "incomplete"
        calls = parsed_of(result).tool_calls if parse and result.finish_reason == "stop" else []
        if not calls and not any(it["type"] == "message" for it in output):  # no text, no call: an empty message
            for line in open_item(_opened(message_item(sid, serial, "", "in_progress")),
                                  {"type": "output_text", "text": "", "annotations": [], "logprobs": []}):
                yield line
        for line in close(status):
            yield line
        for j, call in enumerate(calls):
            done = call_item(sid, serial, j, call, status)
            index = len(output)
            output.append(done)
            yield event("response.output_item.added", output_index=index,
                        item={**done, "arguments": "", "status": "in_progress"})
            arguments = arguments_text(call["function"]["arguments"])
            yield event("response.function_call_arguments.delta", item_id=done["id"], output_index=index,
                        delta=arguments)
            yield event("response.function_call_arguments.done", item_id=done["id"], output_index=index,
                        arguments=arguments)
            yield event("response.output_item.done", output_index=index, item=done)
        response = finish(result, output)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        yield event(kind, response=response)
    except Exception as exc:  # the status line is sent already: the error is an event, then the failure
        error = api_error(exc)
        yield event("error", code=error.code, message=error.message, param=error.param)
        yield event("response.failed", response=failed(base, error))
