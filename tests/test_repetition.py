"""The runaway-repetition stop: loops are cut, ordinary text is not."""
from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from lmchat import Session
from lmchat.backends.echo import EchoBackend
from lmchat.repetition import RepetitionGuard, shortest_period
from lmchat.repl.app import run_plain
from lmchat.repl.conversation import Conversation
from lmchat.repl.rendering import PlainOutput
from lmchat.stores import MemoryStore

from .conversations import TRICKY
from .hypothesis_profiles import examples


def naive_period(s: str) -> int:
    return next(p for p in range(1, len(s) + 1) if all(s[i] == s[i + p] for i in range(len(s) - p)))


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet="ab c", max_size=40), st.integers(1, 6))
def test_shortest_period_is_the_naive_one(unit, repeats):
    s = unit * repeats
    assert shortest_period(s) == naive_period(s) if s else shortest_period(s) == 0


def test_a_loop_is_caught_whatever_the_chunking():
    answer = "L'Étoile, la Marseillaise, la femme au roi" + ", la femme au roi" * 40
    for size in (1, 3, 7, 50):
        guard = RepetitionGuard()
        pieces = [answer[i:i + size] for i in range(0, len(answer), size)]
        at = next(i for i, piece in enumerate(pieces) if guard.feed(piece))
        assert guard.period == len(", la femme au roi") and at * size < len(answer) - 100  # well before the end


def test_ordinary_text_never_trips():
    guard = RepetitionGuard()
    with open(__file__.replace("tests/test_repetition.py", "README.md"), encoding="utf-8") as f:
        text = f.read()
    text += "".join(TRICKY) + "| --- | --- |\n" * 5 + "ha" * 100  # a short run of a loop is fine
    assert not any(guard.feed(text[i:i + 5]) for i in range(0, len(text), 5))


def test_the_repl_stops_a_looping_answer_and_keeps_it():
    out = PlainOutput(io.StringIO(), io.StringIO())
    conv = Conversation(Session("qwen2.5"), EchoBackend(delay=0.002), MemoryStore(), out)
    conv.overrides["max_new_tokens"] = 10_000
    run_plain(conv, io.StringIO("la femme au roi, " * 200 + "\n"))
    assert conv.last.finish_reason == "repetition"
    assert "kept repeating itself" in out.stderr.getvalue()
    answer = conv.session.messages[-1]["content"]
    assert answer.startswith("echo: la femme au roi") and len(answer) < len("la femme au roi, " * 200) // 2
