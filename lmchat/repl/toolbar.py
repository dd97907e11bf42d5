"""The bottom toolbar: what the engine holds, what the last turn cost, how fast it generated."""
from __future__ import annotations

#: the reason of a cache miss is cut to this many characters (`/show delta` prints it whole)
REASON_CHARS = 60


def toolbar_text(conversation) -> str:
    """E.g. ``1234/32768 tokens │ last turn: 1200 reused, 34 prefilled │ 41.5 tok/s │ qwen2.5 · echo``.

    When the last turn could not reuse all the engine held (a reset, a drift
    rewind, an overflow), its reason follows the counts.
    """
    session = conversation.session
    if session.counts_tokens:
        used = f"{session.step}/{session.session_len} tokens"
    else:  # no tokenizer: the session counts characters and checks no budget
        used = f"{session.step} chars (no tokenizer)"
    parts = [used]
    last = conversation.last
    if last is not None:
        turn = f"last turn: {last.reused} reused, {last.prefilled} prefilled"
        delta = conversation.last_delta
        if delta is not None and delta.reason and (delta.reset or delta.discard):
            reason = delta.reason if len(delta.reason) <= REASON_CHARS else delta.reason[: REASON_CHARS - 1] + "…"
            turn += f" ({'reset' if delta.reset else 'rewound'}: {reason})"
        parts.append(turn)
        speed, unit = last.speed
        parts.append(f"{speed:.1f} {unit}")
    parts.append(f"{session.template.name} · {conversation.backend.name}")
    return " │ ".join(parts)
