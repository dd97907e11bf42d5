"""Streaming stop words against the naive reference: join the stream, cut at the earliest stop."""
from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lmchat
from lmchat.errors import ConfigError, SessionError
from lmchat.session.tokens import TokenCodec
from lmchat.stops import StopMatcher, combine_stops

from .hypothesis_profiles import examples
from .tokenizers_fixtures import deepseek

FAST = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference(text: str, stops) -> tuple[str, str | None]:
    """The answer and the stop that ended it: earliest occurrence, longest at equal starts."""
    best = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or (i, -len(s)) < (best[0], -len(best[1]))):
            best = (i, s)
    return (text, None) if best is None else (text[: best[0]], best[1])


def longest_growable_suffix(text: str, stops) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a stop word."""
    return max((n for s in stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)


def split(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({c % (len(text) + 1) for c in cuts}), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def run(matcher: StopMatcher, chunks: list[str]) -> tuple[str, list[str]]:
    """Feed ``chunks``, checking the streaming invariants after each feed; returns answer and pieces."""
    longest = max(map(len, matcher.stops), default=0)
    pieces, consumed = [], ""
    for chunk in chunks:
        result = matcher.feed(chunk)
        pieces.append(result.text)
        consumed += chunk
        if result.stopped:
            continue
        assert len(matcher.held) <= max(longest - 1, 0)
        assert "".join(pieces) + matcher.held == consumed
        if reference(consumed, matcher.stops)[1] is None:  # no stop seen yet: hold back only what may grow
            assert len(matcher.held) == longest_growable_suffix(consumed, matcher.stops)
    pieces.append(matcher.finish())
    return "".join(pieces), pieces


# "]^-\\": the scan skips to the next first character of a stop word with a regex character class
ALPHABET = "abc é中😀]^-\\"
stop_words = st.lists(st.text(alphabet="abcé😀]^-\\", min_size=1, max_size=7), max_size=5)
stream = st.text(alphabet=ALPHABET, max_size=60)
cuts = st.lists(st.integers(min_value=0, max_value=200), max_size=30)


@FAST
@given(stream, stop_words, cuts)
def test_random_streams_match_the_reference(text, stops, cuts):
    m = StopMatcher(stops)
    answer, pieces = run(m, split(text, cuts))
    expected, stop = reference(text, stops)
    assert answer == expected
    assert (m.stopped, m.stop) == (stop is not None, stop)
    assert not any(s in answer for s in stops)


@FAST
@given(st.text(alphabet="abcx", max_size=40), cuts)
def test_overlapping_stops(text, cuts):
    stops = ["ab", "abc", "bca", "cab"]
    m = StopMatcher(stops)
    answer, _ = run(m, split(text, cuts))
    assert (answer, m.stop) == reference(text, stops)


@FAST
@given(st.text(alphabet="ab", max_size=80),
       st.lists(st.text(alphabet="ab", min_size=8, max_size=20), min_size=1, max_size=3))
def test_stops_longer_than_every_chunk(text, stops):
    m = StopMatcher(stops)
    answer, _ = run(m, list(text))  # one character per feed
    assert (answer, m.stop) == reference(text, stops)


def test_earliest_start_wins_over_earliest_end():
    m = StopMatcher(["abcd", "bc"])
    assert m.feed("xxab") == ("xx", False, None)
    assert m.feed("c") == ("", False, None)  # 'bc' matched, but 'abcd' would start earlier
    assert m.feed("dyy") == ("", True, "abcd")
    m = StopMatcher(["abcd", "bc"])
    m.feed("xxabc")
    assert m.feed("z") == ("a", True, "bc")


def test_longest_wins_at_the_same_start_even_at_the_end_of_the_stream():
    m = StopMatcher(["ab", "abc"])
    assert m.feed("1ab") == ("1", False, None)
    assert m.finish() == "" and m.stop == "ab"  # 'abc' can no longer complete
    m = StopMatcher(["ab", "abc"])
    assert m.feed("1abc2") == ("1", True, "abc")


def test_after_a_stop_feeds_return_nothing():
    m = StopMatcher(["STOP"])
    assert m.feed("ok STOP after") == ("ok ", True, "STOP")
    assert m.feed("more") == ("", True, "STOP")
    assert m.finish() == ""


def test_feed_after_finish_is_an_error():
    m = StopMatcher(["x"])
    assert m.feed("ab") == ("ab", False, None)
    assert m.finish() == ""
    with pytest.raises(SessionError):
        m.feed("c")


def test_no_stops_passes_everything_through():
    m = StopMatcher([])
    assert m.feed("abc") == ("abc", False, None)
    assert m.finish() == ""


def test_empty_stop_word_is_rejected_naming_the_field():
    with pytest.raises(ConfigError, match="'stops'") as err:
        StopMatcher(["ok", ""])
    assert err.value.field == "stops" and isinstance(err.value, ValueError)
    with pytest.raises(ConfigError, match="'stop'"):
        combine_stops(("<|im_end|>",), [""])


def test_combine_stops():
    assert combine_stops(("<|im_end|>", "<|endoftext|>"), "<|im_end|>") == ("<|im_end|>", "<|endoftext|>")
    assert combine_stops(("a",), ["b", "a", "c", "b"]) == ("a", "b", "c")
    assert combine_stops(None, None) == ()
    assert combine_stops(None, "x") == ("x",)
    assert combine_stops(lmchat.get_template("qwen2.5").stop_words, None) == lmchat.get_template("qwen2.5").stop_words


def test_exported():
    assert lmchat.StopMatcher is StopMatcher


# ---------------------------------------------------------------------- token ids, real tokenizer
@functools.cache
def codec() -> TokenCodec:
    return TokenCodec(deepseek())


def encode(text: str) -> list[int]:
    """Generated-looking ids: special strings in ``text`` stay plain text tokens."""
    return codec().encode_text(text, at_start=True)


def feed_ids(m: StopMatcher, ids: list[int], sizes: list[int]) -> list[str]:
    pieces, i = [], 0
    for n in [*sizes, len(ids)]:
        pieces.append(m.feed_ids(ids[i: i + n], codec().decode).text)
        i += n
    pieces.append(m.finish())
    return pieces


def test_multibyte_characters_split_across_tokens_are_held_until_complete():
    text = "你好 🎉👍🏽 done"
    ids = encode(text)
    assert any("\ufffd" in codec().decode([i]) for i in ids)  # the fixture really splits characters
    m = StopMatcher(["STOP"])
    pieces = feed_ids(m, ids, [1] * len(ids))
    assert not any("\ufffd" in p for p in pieces)
    assert "".join(pieces) == text and m.kept_ids == ids and not m.stopped


def test_stop_string_spanning_several_tokens():
    stop = "<｜end▁of▁sentence｜>"  # typed as text: many tokens, not the special id
    before = "答案是 42 🎉"
    ids = encode(before + stop + " trailing")
    assert len(encode(stop)) > 5
    m = StopMatcher([stop], stop_ids=[1])
    assert "".join(feed_ids(m, ids, [1] * len(ids))) == before
    assert m.stop == stop and m.kept_ids == encode(before)


def test_stop_id_fires_at_once_and_releases_held_text():
    head = encode("Thought: 好 Obs")
    m = StopMatcher(["Observation:"], stop_ids=[1])
    assert m.feed_ids(head, codec().decode).text == "Thought: 好 " and m.held == "Obs"  # may be 'Observation:'
    first = m.feed_ids([1, *encode("never")], codec().decode)
    assert first == ("Obs", True, "<｜end▁of▁sentence｜>")
    assert m.kept_ids == head
    assert m.feed_ids(encode("more"), codec().decode) == ("", True, "<｜end▁of▁sentence｜>")


def test_stop_string_inside_a_token_drops_that_token_but_not_its_text():
    ids = encode("Hello world")
    m = StopMatcher(["llo"])
    assert "".join(feed_ids(m, ids, [])) == "He"
    assert m.kept_ids == [] and m.stop == "llo"


def test_incomplete_character_at_the_end_of_the_stream_is_flushed():
    ids = encode("ok 🎉")[:-1]  # the last byte of the emoji never comes
    m = StopMatcher(["x"])
    assert m.feed_ids(ids, codec().decode).text == "ok"
    assert m.finish() == codec().decode(ids)[2:] and m.kept_ids == ids


WORDS = ["Hello", " world", "你好", "世界", " 🎉", "👍🏽", " ok", "\n\n", "END", "é", " the", "<", "|"]


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(WORDS), max_size=20), st.data())
def test_random_token_streams_match_the_reference(words, data):
    text = "".join(words)
    ids = encode(text)
    stops = data.draw(st.lists(st.sampled_from(["END", "\n\n", "世", "🎉👍", "<|", "ok END", "界 🎉"]),
                               max_size=3))
    sizes = data.draw(st.lists(st.integers(1, 4), max_size=len(ids)))
    m = StopMatcher(stops)
    answer = "".join(feed_ids(m, ids, sizes))
    assert (answer, m.stop) == reference(codec().decode(ids), stops)
    # kept: the longest run of ids whose text lies wholly before the stop
    k = max(n for n in range(len(ids) + 1) if answer.startswith(codec().decode(ids[:n])))
    assert m.kept_ids == ids[:k]
