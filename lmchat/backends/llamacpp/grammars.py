"""Constraints (:mod:`lmchat.constraints`) enforced token by token with llguidance.

llguidance (guidance-ai's Rust engine, which llama.cpp, vLLM and SGLang use as a backend too) compiles
a JSON schema or a grammar against the model's own vocabulary and says, at every step, which tokens
keep the output valid. It was chosen over llama-cpp-python's JSON-schema-to-GBNF port with llama.cpp's
grammar sampler because that port ignores bounds (``"maximum": 120`` let the bundled model write
``"age": 1234567890``), and because one engine covers schemas, GBNF (converted to its Lark dialect)
and, next, the start after a reasoning block.

The vocabulary is read once per engine (about a second, at the first constraint); each grammar is
compiled once into a prototype matcher, which every answer copies.
"""
from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ...constraints import Constraint
from ...errors import ConstraintUnsupported
from ...extras import needs
from ...lark import Expr, Grammar, Json, Nested, Pattern, Ref, Rule, Text, opt, rules, seq

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_vocab_p
    from llguidance import LLMatcher, LLTokenizer

#: compiled grammars kept per engine (an agent reuses a handful of schemas)
KEPT = 64


def lark_of(constraint: Constraint) -> str:
    """The constraint as one llguidance Lark grammar.

    With ``lead``, that grammar comes first (gpt-oss' analysis message and channel header), then the answer.

    With ``after`` (a reasoning block first), the free part is a lazy lexeme: any text, ended by the first
    occurrence of the marker, then whitespace, then the answer (a nested grammar). With a budget it is a
    greedy lexeme of at most that many tokens followed by the marker, which llguidance then forces; a greedy
    lexeme cannot end where the marker starts (llguidance's lexer does not split back), so that text stops
    at the first character of the marker (``<``), which the marker then follows.
    """
    answer = _answer(constraint)
    if not constraint.after and not constraint.lead:
        return rules(("start", answer)).render() if isinstance(answer, Json) else answer
    inner = Rule("answer", answer if isinstance(answer, Json) else Nested(answer))
    if constraint.lead:
        return "\n".join((rules(("start", seq(Ref("lead"), Ref("answer")))).render(), constraint.lead, inner.render()))
    if constraint.after_max_tokens is None:
        free = Rule("think", Pattern("(?s:.*)" + Pattern.literal(constraint.after).regex), lazy=True)
        block: Expr = Ref("think")
    else:
        free = Rule("think", Pattern.excluding(constraint.after[0]), max_tokens=constraint.after_max_tokens)
        block = seq(Ref("think"), Text(constraint.after))
    if constraint.opens:
        block = opt(seq(Text(constraint.opens), block))
    return Grammar((Rule("start", seq(block, Pattern(r"[ \t\n]*"), Ref("answer"))), free, inner)).render()


def _answer(constraint: Constraint) -> Json | str:
    """The answer's own grammar: a JSON schema, or a grammar's text (llguidance's Lark)."""
    if constraint.kind == "lark":
        return constraint.grammar or ""
    if constraint.kind == "gbnf":
        with needs("constraints on answers", "local"):
            from llguidance.gbnf_to_lark import gbnf_to_lark

        try:
            return gbnf_to_lark(constraint.grammar or "")
        except Exception as exc:  # the converter's own parse errors, of any type
            raise ConstraintUnsupported(f"the grammar does not parse: {exc}", field="grammar") from None
    if constraint.kind == "json_schema":
        assert constraint.schema is not None, "a json_schema constraint carries its schema"
        return Json(json.loads(constraint.schema))
    return Json({"type": "object"})


def advance(matcher: LLMatcher, ids: list[int]) -> None:
    """``matcher`` past an answer's start already written (:attr:`~lmchat.constraints.Constraint.written`);
    :class:`ConstraintUnsupported` if that text does not fit the constraint (nothing then can continue it)."""
    if matcher.validate_tokens(ids) < len(ids) or not matcher.consume_tokens(ids):
        raise ConstraintUnsupported("the answer so far does not fit the format: it cannot be continued under it",
                                    field="format")


class Grammars:
    """The compiled constraints of one vocabulary (one model's tokenizer: the cache's other key), by their grammar's
    text (a schema's canonical JSON in it), least recently used dropped past :data:`KEPT`. A constraint that cannot
    be enforced is kept too, so that a client repeating it costs no compile again.

    A compile runs on the caller's thread, never under the lock: a slow one holds up neither the engine's thread
    copying another prototype nor other callers; those asking for the same grammar meanwhile wait for its result."""

    def __init__(self, vocab: llama_vocab_p, eog_ids: Iterable[int]) -> None:
        self._vocab = vocab
        self._eog = sorted(eog_ids)
        self._tokenizer: LLTokenizer | None = None
        self._longest: int | None = None
        self._kept: OrderedDict[str, LLMatcher | ConstraintUnsupported] = OrderedDict()
        self._compiling: dict[str, Future[LLMatcher | ConstraintUnsupported]] = {}
        self._lock = threading.Lock()  # checked on the callers' threads, copied on the scheduler's
        self._tokenizer_lock = threading.Lock()

    def check(self, constraint: Constraint) -> None:
        """Raise :class:`ConstraintUnsupported` if ``constraint`` cannot be enforced (compiling it if new)."""
        self._prototype(constraint)

    def matcher(self, constraint: Constraint) -> LLMatcher:
        """A fresh ``LLMatcher`` for one answer."""
        return self._prototype(constraint).deep_copy()

    def longest_token(self) -> int:
        """The most bytes one token of the vocabulary writes (how few tokens a text of so many bytes can take)."""
        if self._longest is None:
            tokenizer = self._llguidance_tokenizer()
            self._longest = max(len(tokenizer.decode_bytes([i])) for i in range(tokenizer.vocab_size))
        return self._longest

    def close(self) -> None:
        with self._lock:
            self._kept.clear()

    def _prototype(self, constraint: Constraint) -> LLMatcher:
        outcome = self._outcome(lark_of(constraint), constraint)
        if isinstance(outcome, ConstraintUnsupported):  # a fresh one: the kept one would carry its old traceback
            raise ConstraintUnsupported(outcome.reason, field=outcome.field)
        return outcome

    def _outcome(self, lark: str, constraint: Constraint) -> LLMatcher | ConstraintUnsupported:
        with self._lock:
            kept = self._kept.get(lark)
            if kept is not None:
                self._kept.move_to_end(lark)
                return kept
            pending = self._compiling.get(lark)
            compiles = pending is None
            if pending is None:
                pending = self._compiling[lark] = Future()
        if not compiles:
            return pending.result()  # the same grammar, being compiled by another caller
        try:
            outcome: LLMatcher | ConstraintUnsupported = self._compile(lark, constraint)
        except ConstraintUnsupported as exc:
            outcome = exc
        except BaseException as exc:
            with self._lock:
                del self._compiling[lark]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._compiling[lark]
            self._kept[lark] = outcome
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        pending.set_result(outcome)
        return outcome

    def _llguidance_tokenizer(self) -> LLTokenizer:
        with needs("constraints on answers", "local"):
            from llguidance.llamacpp import lltokenizer_from_vocab

        with self._tokenizer_lock:
            if self._tokenizer is None:
                with warnings.catch_warnings():  # it reads each token's attributes through a deprecated alias
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self._tokenizer = lltokenizer_from_vocab(self._vocab, eos_token=self._eog)
            return self._tokenizer

    def _compile(self, lark: str, constraint: Constraint) -> LLMatcher:
        with needs("constraints on answers", "local"):
            from llguidance import LLMatcher

        field = {"gbnf": "grammar", "json_schema": "schema", "lark": "tool_choice"}.get(constraint.kind,
                                                                                        "response_format")
        matcher = LLMatcher(self._llguidance_tokenizer(), LLMatcher.grammar_from_lark(lark), log_level=0)
        if matcher.is_error():
            raise ConstraintUnsupported(f"cannot be enforced: {_first_line(matcher.get_error())}", field=field)
        # the first step's tokens, worked out here rather than by the engine's thread at the answer's first token:
        # llguidance builds a pattern's lexer lazily, seconds for some
        matcher.compute_bitmask()
        if matcher.is_error():  # no token can start it: a rule defined only by itself, say
            raise ConstraintUnsupported(f"cannot be enforced: no answer can even start under it "
                                        f"({_first_line(matcher.get_error())})", field=field)
        return matcher


def _first_line(error: str) -> str:
    """llguidance's error without the parser state it appends (its tokens, counters, the grammar again)."""
    return error.split("\n<state>", 1)[0].strip()
