"""Conversations for conformance and session tests: a fixed battery and hypothesis strategies."""
from __future__ import annotations

import functools

from hypothesis import strategies as st

# the fixed battery lives in the package (``lmchat check`` uses it too); tests add strategies
from lmchat.interop.battery import (  # noqa: F401
    PLAIN,
    REASONING,
    TOOL_CONVERSATIONS,
    TOOLS,
    TRICKY,
    a,
    call,
    s,
    tool,
    u,
)

#: built once: a strategy built inside a draw is validated again at every draw (hypothesis walks its parts to
#: know whether it can be empty), which took most of a property test's time here
TEXT = st.one_of(
    st.sampled_from(TRICKY + ["ok", "Paris", "<think>\nhmm\n</think>\n\nyes", "a</think>b"]),
    st.text(max_size=16),
    st.text(alphabet=st.sampled_from(list(" \n\tab中😀<|>/")), max_size=12),
)
MAYBE_TEXT = st.none() | TEXT


@st.composite
def conversations(draw, roles=("system", "user", "assistant"), max_messages=7):
    """Any sequence of messages over ``roles``: the official template may reject it."""
    n = draw(st.integers(1, max_messages))
    role = st.sampled_from(roles)
    return [{"role": draw(role), "content": draw(TEXT)} for _ in range(n)]


@functools.cache
def _turns(text: st.SearchStrategy, max_turns: int) -> st.SearchStrategy:
    """Between 1 and ``max_turns`` (prompt, answer) pairs; made once per arguments, as TEXT is."""
    return st.lists(st.tuples(text, text), min_size=1, max_size=max_turns)


@st.composite
def dialogues(draw, with_system=None, max_turns=5):
    """A well-formed session script: optional system, then alternating user prompts and answers."""
    system = draw(MAYBE_TEXT) if with_system is None else with_system
    return system, draw(_turns(TEXT, max_turns))


PLAIN_WORDS = st.text(alphabet=st.sampled_from(list("abc XYZ,.?!中文😀")), min_size=1, max_size=20).map(
    lambda t: t.strip() or "x"
)
MAYBE_WORDS = st.none() | PLAIN_WORDS


@st.composite
def plain_dialogues(draw, max_turns=6):
    """Conversations a prefix-stable template must never reset on: no edge whitespace, no reasoning."""
    return draw(MAYBE_WORDS), draw(_turns(PLAIN_WORDS, max_turns))
