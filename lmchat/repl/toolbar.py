"""The bottom toolbar: what the engine holds, what the last turn cost, how fast it generated."""
from __future__ import annotations


def toolbar_text(conversation) -> str:
    """E.g. ``1234/32768 tokens │ last turn: 1200 reused, 34 prefilled │ 41.5 tok/s │ qwen2.5 · echo``."""
    session = conversation.session
    if session.context_ids is not None:
        used = f"{session.step}/{session.session_len} tokens"
    else:  # no tokenizer: the session counts characters and checks no budget
        used = f"{session.step} chars (no tokenizer)"
    parts = [used]
    last = conversation.last
    if last is not None:
        parts.append(f"last turn: {last.reused} reused, {last.prefilled} prefilled")
        speed, unit = last.speed
        parts.append(f"{speed:.1f} {unit}")
    parts.append(f"{session.template.name} · {conversation.backend.name}")
    return " │ ".join(parts)
