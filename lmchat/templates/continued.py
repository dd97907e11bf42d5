"""``continue_final_message``: a conversation rendered with its final message left open.

transformers prefills the beginning of an answer this way: the final
message's text gets a tag appended, the conversation is rendered, and the
rendering is cut where the tag starts (after trimming, when the template
strips the tag's trailing space). Doing the same on any template, built-in or
Jinja, gives what ``apply_chat_template(..., continue_final_message=True)``
gives on the official template.
"""
from __future__ import annotations

import copy
from typing import Any

from ..errors import InvalidMessages, TemplateConfigError
from ..messages import REASONING_KEYS

TAG = "CONTINUE_FINAL_MESSAGE_TAG "


# Any here: messages as the template reads them: any value Jinja may read
def tagged(messages: list[dict[str, Any]], field: str) -> tuple[list[dict[str, Any]], str]:
    """A copy of ``messages`` with the tag after the final message's ``field``, and that field's text."""
    messages = copy.deepcopy(messages)
    final = messages[-1]
    text = final.get(field)
    if text is None:
        raise InvalidMessages(f'continue_final_message is set but the final message has no "{field}"',
                              index=len(messages) - 1, field=field)
    if isinstance(text, (list, tuple)):
        block = next((b for b in reversed(text) if isinstance(b, dict) and "text" in b), None)
        if block is None:
            raise InvalidMessages("continue_final_message is set but the final message has no text block",
                                  index=len(messages) - 1, field=field)
        text = block["text"]
        block["text"] = text + TAG
        return messages, text
    # a reasoning field and its aliases hold the same text (transformers' normalisation): tag them all
    fields = [f for f in REASONING_KEYS if final.get(f) == text] if field in REASONING_KEYS else [field]
    for f in fields:
        final[f] = final[f] + TAG
    return messages, text


def cut(rendered: str, text: str) -> str:
    """The rendering up to where the tag was (the final message open after its text)."""
    if text.strip() not in rendered or TAG.strip() not in rendered:
        raise TemplateConfigError("continue_final_message: the final message does not appear in the rendered chat",
                                  field="continue_final_message")
    loc = rendered.rindex(TAG.strip())
    return rendered[:loc] if rendered[loc:loc + len(TAG)] == TAG else rendered[:loc].rstrip()


def field_of(continue_final_message: bool | str) -> str:
    return continue_final_message if isinstance(continue_final_message, str) else "content"
