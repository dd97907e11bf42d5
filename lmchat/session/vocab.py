"""Vocabularies: what a token codec needs from a tokenizer, whatever library holds it.

A :class:`Vocabulary` knows its *added tokens* (every control or
user-defined token, special or not: the strings a template may write as
markup) and encodes text two ways: *plain* (added-token strings are ordinary
text, so content can never produce a marker id) and *parsed* (the
tokenizer's own behaviour, markers recognised anywhere). :class:`HFVocab`
wraps a Hugging Face tokenizer; the llama.cpp backend brings its own
vocabulary over the engine's tokenizer.
"""
from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, Union, runtime_checkable

from ..extras import needs

if TYPE_CHECKING:
    import tokenizers


@runtime_checkable
class Vocabulary(Protocol):
    #: every added token's text -> its id (markers a template may write)
    added: Mapping[str, int]
    #: how many ids there are (added tokens included): valid ids are ``range(n_tokens)``
    n_tokens: int

    def encode_plain(self, text: str, *, at_start: bool) -> list[int]:
        """Ids of ``text`` with added-token strings read as text; ``at_start``: it opens the prompt
        (otherwise it follows an added token)."""

    def encode_plain_offsets(self, text: str, *, at_start: bool) -> tuple[list[int], list[int]]:
        """:meth:`encode_plain` plus the character offset where each id starts."""

    def encode_parsed(self, text: str) -> list[int]:
        """The tokenizer's own encoding, added tokens recognised anywhere (for comparisons)."""

    def decode(self, ids: Sequence[int]) -> str: ...


class FastTokenizer(Protocol):
    """A transformers fast tokenizer, as :class:`HFVocab` reads it: the ``tokenizers.Tokenizer`` it wraps."""

    @property
    def backend_tokenizer(self) -> tokenizers.Tokenizer: ...


#: what a session tokenizes with: a :class:`Vocabulary` (the llama.cpp backend's), a transformers fast tokenizer
#: or a ``tokenizers.Tokenizer`` (:class:`HFVocab` wraps both, and checks which it got when it is built)
Tokenizer = Union[Vocabulary, FastTokenizer, "tokenizers.Tokenizer"]


class HFVocab:
    """A transformers fast tokenizer or a ``tokenizers.Tokenizer`` as a :class:`Vocabulary`.

    Plain encoding runs on a private copy of the tokenizer that knows none of
    the added tokens, plus an *anchor*: an added token with a random name put
    before text that follows a marker, then dropped, so the text is split as
    the tokenizer splits text after an added token (SentencePiece's dummy
    prefix appears only where the tokenizer itself puts it). The name is
    random so that content can never contain it.
    """

    def __init__(self, tokenizer: FastTokenizer | tokenizers.Tokenizer):
        with needs("token-level sessions", "tokens"):
            from tokenizers import AddedToken, Tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
        if isinstance(tokenizer, Tokenizer):
            backend = tokenizer
        if not isinstance(backend, Tokenizer):
            raise TypeError(
                f"expected a transformers fast tokenizer or a tokenizers.Tokenizer, got {type(tokenizer).__name__}"
            )
        self.tokenizer = tokenizer
        self._parsed = backend
        self.added: Mapping[str, int] = {t.content: i for i, t in backend.get_added_tokens_decoder().items()}
        self.n_tokens = backend.get_vocab_size(with_added_tokens=True)
        spec = json.loads(backend.to_str())
        spec["added_tokens"] = []  # content must never match an added token, special or not
        self._plain = Tokenizer.from_str(json.dumps(spec))
        self._anchor = f"<lmchat-anchor-{secrets.token_hex(8)}>"
        self._plain.add_tokens([AddedToken(self._anchor, special=False, normalized=False)])
        self._anchor_id = self._plain.token_to_id(self._anchor)

    def encode_plain(self, text: str, *, at_start: bool) -> list[int]:
        return self.encode_plain_offsets(text, at_start=at_start)[0]

    def encode_plain_offsets(self, text: str, *, at_start: bool) -> tuple[list[int], list[int]]:
        if not text:
            return [], []
        if at_start:
            enc = self._plain.encode(text, add_special_tokens=False)
            return list(enc.ids), [a for a, _ in enc.offsets]
        enc = self._plain.encode(self._anchor + text, add_special_tokens=False)
        if not enc.ids or enc.ids[0] != self._anchor_id:
            raise AssertionError("the anchor token was not kept first")  # a normaliser rewrote added tokens
        shift = len(self._anchor)
        return list(enc.ids[1:]), [a - shift for a, _ in enc.offsets[1:]]

    def encode_parsed(self, text: str) -> list[int]:
        return self._parsed.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._parsed.decode(list(ids), skip_special_tokens=False)
