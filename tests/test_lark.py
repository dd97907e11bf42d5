"""lmchat.lark: grammars built from typed parts, written out by one function that escapes. Any text, written as a
literal (or as a pattern matching it as it is), comes back through llguidance's own Lark parser as exactly that
text: quotes, backslashes, newlines, control characters and any unicode. Checked on a byte vocabulary (every
byte a token), as tests/test_forcing.py checks the forced calls' grammars."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lmchat.lark import EMPTY, Json, Pattern, Ref, Rule, Text, Token, alt, many, opt, rules, seq, some

llguidance = pytest.importorskip("llguidance")


class Bytes:
    """Bytes as tokens, and an end-of-text token (llguidance's marker byte 0xff before its text)."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([b]) for b in range(256)] + [b"\xff</s>"]
    special_token_ids = [256]

    def __call__(self, data):
        return list(data if isinstance(data, bytes) else data.encode())


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Bytes()))


def matcher(grammar: str):
    m = llguidance.LLMatcher(TOKENIZER, llguidance.LLMatcher.grammar_from_lark(grammar), log_level=0)
    assert not m.is_error(), (m.get_error(), grammar)
    return m


def accepts(grammar: str, text: str) -> bool:
    """The grammar takes the whole text, and may end there."""
    m, ids = matcher(grammar), list(text.encode())
    if m.validate_tokens(ids) < len(ids):
        return False
    assert m.consume_tokens(ids), m.get_error()
    return m.is_accepting()


def start(body) -> str:
    return rules(("start", body)).render()


def only(grammar: str, text: str) -> None:
    """The grammar matches ``text`` and nothing longer or shorter."""
    data = text.encode()
    assert accepts(grammar, text), (grammar, text)
    m = matcher(grammar)
    assert m.validate_tokens([*data, ord("x")]) == len(data)  # nothing after it
    if data:
        m = matcher(grammar)
        assert m.consume_tokens(list(data[:-1])) and not m.is_accepting()  # nor less


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=1))
@example("\x7f")  # printed raw, llguidance's lexer refused it: the forced call of an enum value holding one
@example("\U000e0001 \u2028 \x85 \ufeff \x00 \\\" \U0001f600")
def test_any_text_is_a_literal_of_itself(text):
    only(start(Text(text)), text)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(['"', "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u2028", "é", "/",
                                         "|", "(", ")", "{", "}", "%", "<", ">", "[", "]", "a", " "]), min_size=1))
def test_a_text_of_the_characters_grammars_treat_specially(text):
    only(start(Text(text)), text)
    only(start(seq(Text("<"), Text(text), Text(">"))), f"<{text}>")


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1))
def test_any_text_is_a_pattern_of_itself(text):
    # a lazy lexeme ending at a marker's spelling (lmchat.tools.channel_lead): the text must be matched as it is
    only(start(Pattern(Pattern.literal(text).regex)), text)


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=1, max_size=6), st.text(max_size=12))
def test_a_pattern_excluding_characters_takes_exactly_the_others(excluded, text):
    grammar = start(Pattern.excluding(excluded, (0, 12)))
    assert accepts(grammar, text) is (not set(excluded) & set(text))


def test_precedence_is_written_as_built():
    a, b, c = Text("a"), Text("b"), Text("c")
    grammar = start(seq(a, alt(b, c)))  # a (b | c), not (a b) | c
    assert accepts(grammar, "ab") and accepts(grammar, "ac") and not accepts(grammar, "c")
    grammar = start(opt(seq(a, b)))  # (a b)?, not a b?
    assert accepts(grammar, "") and accepts(grammar, "ab") and not accepts(grammar, "a")
    grammar = start(seq(a, many(seq(Text(","), a)), EMPTY))
    assert all(accepts(grammar, t) for t in ("a", "a,a", "a,a,a")) and not accepts(grammar, "a,")
    grammar = start(some(alt(a, b)))
    assert accepts(grammar, "abba") and not accepts(grammar, "")
    grammar = rules(("start", seq(Ref("x"), Ref("x"))), ("x", alt(seq(a, b), c))).render()
    assert accepts(grammar, "abc") and accepts(grammar, "cab") and not accepts(grammar, "ac")


def test_a_schema_a_token_and_rule_flags_are_written_as_llguidance_reads_them():
    assert start(Json({"type": "integer", "maximum": 9})) == (
        'start: %json {"type": "integer", "maximum": 9, "x-guidance": {"whitespace_flexible": false, '
        '"item_separator": ", ", "key_separator": ": "}}')
    assert accepts(start(Json({"type": "integer", "maximum": 9})), "7")
    assert not accepts(start(Json({"type": "integer", "maximum": 9})), "12")
    assert start(seq(Token(7), Text("x"))) == "start: <[7]> x".replace("x", '"x"')
    assert Rule("free", Pattern("[^<]*"), lazy=True, max_tokens=3).render() == "free[lazy,max_tokens=3]: /[^<]*/"
    with pytest.raises(ValueError, match="not a rule name"):
        Ref('x" | "y')


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm45", "gemma4", "chatglm3"])
def test_a_forced_call_whose_values_hold_characters_grammars_escape(fmt):
    """Values written as text in the call (enum values, parameter names) go through the same literals: a DEL in
    an enum value made the grammar of three formats fail to compile (llguidance's lexer error)."""
    from lmchat.backends.llamacpp.grammars import lark_of
    from lmchat.tools.forcing import forced_calls
    from lmchat.tools.registry import ResponseFormat

    values = ["a\x7fb", 'q"\\', "é"] if fmt != "chatglm3" else ["a\x7fb", 'q"', "é"]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "required": ["m"], "properties": {"m": {"enum": values}}}}}]
    grammar = lark_of(forced_calls(tools, ResponseFormat(tools=fmt)))
    matcher(grammar)
    if fmt == "qwen3_coder":
        for value in values:
            assert accepts(grammar, f"<tool_call>\n<function=f>\n<parameter=m>\n{value}\n</parameter>\n</function>\n"
                                    "</tool_call>")
