"""``lmchat render``: a conversation rendered byte-exactly, or its per-turn deltas."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import TYPE_CHECKING, Any, cast

from ..errors import ConfigError, InvalidMessages
from ..jsonfile import read_json
from ..jsontypes import JSONObject
from ..messages import Message
from .common import add_template_arguments, resolve_template

if TYPE_CHECKING:
    from ..templates.base import BaseTemplate


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_template_arguments(p)
    p.add_argument(
        "--messages",
        required=True,
        metavar="FILE",
        help="JSON list of OpenAI-style messages (or an object with 'messages' and 'tools'); '-' reads stdin",
    )
    p.add_argument("--tools", metavar="FILE", help="JSON list of OpenAI function schemas")
    p.add_argument(
        "--no-generation-prompt", action="store_true", help="do not append the assistant's generation prompt"
    )
    p.add_argument("--date", metavar="YYYY-MM-DD", help="date printed by templates that show one (default: today)")
    p.add_argument(
        "--kwargs", metavar="JSON", default="{}", help='extra template variables, e.g. \'{"enable_thinking": false}\''
    )
    p.add_argument(
        "--deltas",
        action="store_true",
        help="replay the conversation in a session and print the per-turn deltas as JSON",
    )


def _date(text: str | None) -> dt.date | None:
    if text is None:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"expected YYYY-MM-DD, got {text!r}", field="--date") from None


# Any: the template's own keyword arguments (``--kwargs``), which messages2prompt takes as **kwargs
def _kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}", field="--kwargs") from None
    if not isinstance(value, dict):
        raise ConfigError("must be a JSON object", field="--kwargs")
    return value


def _validate(messages: list[object], tools: object) -> None:
    """The checks a session and the server make (roles, content, tool calls and schemas)."""
    from ..messages import normalize_messages
    from ..validation import validate_messages, validate_tools

    validate_tools(tools)
    validate_messages([], normalize_messages(messages), start=0, max_chars=None)


def replay(template: BaseTemplate, messages: list[Message], *, tools: list[JSONObject] | None = None,
           date: dt.date | None = None, template_kwargs: dict[str, object] | None = None) -> list[JSONObject]:
    """Feed a conversation to a session turn by turn; one record per delta."""
    from ..session import Session

    session = Session(template, tools=tools, date=date, template_kwargs=template_kwargs)
    out: list[JSONObject] = []
    pending: list[Message] = []

    def flush(index: int) -> None:
        delta = session.extend(pending)
        out.append({"index": index, **{k: getattr(delta, k) for k in ("text", "reset", "sequence_start", "reason")}})
        pending.clear()

    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "assistant" and (pending or session.pending):
            if pending:
                flush(i - 1)
            fields = {k: v for k, v in message.items() if k not in ("role", "content")}
            session.commit(message.get("content") or "", **fields)
        else:
            pending.append(message)
    if pending:
        flush(len(messages) - 1)
    return out


def run(args: argparse.Namespace) -> int:
    template = resolve_template(args)
    data = read_json(args.messages)
    tools = None
    if isinstance(data, dict):
        tools = data.get("tools")
        data = data.get("messages")
    if not isinstance(data, list):
        raise InvalidMessages("the messages file must hold a JSON list of messages")
    if args.tools:
        tools = read_json(args.tools)
    _validate(data, tools)
    # checked by _validate: a list of message objects, the tools a list of function schemas (or None)
    messages, checked_tools = cast("list[Message]", data), cast("list[JSONObject] | None", tools)
    date, kwargs = _date(args.date), _kwargs(args.kwargs)
    if args.deltas:
        records = replay(template, messages, tools=checked_tools, date=date, template_kwargs=kwargs)
        text = json.dumps(records, ensure_ascii=False, indent=2) + "\n"
    else:
        text = template.messages2prompt(
            messages, tools=checked_tools, add_generation_prompt=not args.no_generation_prompt, date=date, **kwargs
        )
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.flush()
    return 0
