"""A turn's edit as data: the session's frame around its messages, as the caller decided it before the turn.

A caller that reads a session, decides what its next turn's frame must be
(system prompt, tools, template switches, overflow policy, its ``extra``) and
runs the turn with ``expect`` (the version it read) passes a :class:`Frame`
as the turn's ``edit``: the decision is the caller's, made once from what it
read; the manager only applies it, when the turn starts, to the session as it
stands (the same state, or the copy the caller made of it).
"""
from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..jsontypes import JSONObject
from ..session import Session
from ..session.edits import restored
from ..session.snapshot import messages_of
from ..session.vocab import Tokenizer
from .table import View


@attrs.frozen
class Frame:
    """What the turn's session is to be around its messages (a :data:`~.request.Edit`).

    ``system``: its system prompt (None: none); ``head``: whether its first message is the system prompt that
    ``system`` replaces (else ``system`` is put first). ``tools``; ``switches``: template keywords set, after
    those named in ``clears`` are removed; ``overflow``: its overflow policy. ``extra``: the session's ``extra``
    once the turn starts if the system prompt stays, ``reframed_extra`` if it changes (None: kept).
    ``tokenizer``: the sessions'. Applied to a session already so, it changes nothing (O(1)); otherwise the
    session is an edited copy, whose delta resets when what is rendered changed (the reasons say what).
    """

    system: str | None
    head: bool
    tools: list[JSONObject] | None
    switches: Mapping[str, object]
    clears: tuple[str, ...]
    overflow: str
    extra: dict[str, object] | None
    reframed_extra: dict[str, object] | None
    tokenizer: Tokenizer | None

    def __call__(self, v: View) -> tuple[Session | None, dict[str, object] | None] | None:
        session = v.session
        first = session.first_message() if self.head else None
        current = first["content"] if first else None
        kwargs = {k: value for k, value in session.template_kwargs.items() if k not in self.clears}
        kwargs.update(self.switches)
        reasons = [why for why, changed in (
            ("the instructions changed", self.system != current),
            ("the tools changed", (self.tools or None) != (session.tools or None)),
            ("the reasoning setting changed", kwargs != session.template_kwargs)) if changed]
        extra = self.reframed_extra if self.system != current else self.extra
        if not reasons and self.overflow == session.overflow:
            return None if extra is None else (None, extra)
        data = session.to_dict()
        if self.system != current:
            messages = messages_of(data)[int(self.head):]
            data["messages"] = ([{"role": "system", "content": self.system}] if self.system is not None else []
                                ) + messages
            data["system"] = self.system
        data.update(tools=self.tools, template_kwargs=kwargs, overflow=self.overflow)
        if reasons and session.step:
            return restored(data, self.tokenizer, "; ".join(reasons)), extra
        return Session.from_dict(data, tokenizer=self.tokenizer), extra
