"""The engine's own vocabulary: llama.cpp's tokenizer seen as lmchat's vocabulary adapter.

:class:`LlamaVocab` implements :class:`lmchat.session.vocab.Vocabulary`, what
:class:`~lmchat.session.tokens.TokenCodec` builds on (so sessions take it as
their tokenizer: ``Session(template, tokenizer=backend.tokenizer)``): ``added`` (the marker strings a
template may write, and their ids), plain encoding (special parsing off, so
content never becomes a control token), the tokenizer's own encoding with
special parsing on (for comparisons), and decoding.

How llama.cpp splits a prompt: with special parsing on, it cuts the text at
every added token and tokenizes each piece of text between them on its own;
SentencePiece vocabularies with ``add_space_prefix`` get the dummy ``▁``
prepended to *every* such piece (the first one and each one that follows an
added token). So encoding a prompt piecewise -- markers as their ids, the text
between them with :meth:`LlamaVocab.encode_plain` -- gives exactly
``llama_tokenize(prompt, parse_special=True)`` whenever the content holds no
marker strings, for ``at_start`` true or false alike.

With special parsing off llama.cpp still cuts out *user-defined* added tokens
(as Hugging Face tokenizers do for non-special added tokens); plain encoding
breaks those occurrences apart so content never yields an added token
(exact pieces for vocabularies without a space prefix; see
:meth:`LlamaVocab.encode_plain`).
"""
from __future__ import annotations

import ctypes
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ...errors import BackendError
from ._lib import lib

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_model_p, llama_vocab_p


class LlamaVocab:
    """A llama.cpp vocabulary (``llama_vocab *`` of a loaded model) as lmchat's vocabulary adapter."""

    def __init__(self, model: llama_model_p) -> None:
        L = self._L = lib()
        self._vocab: llama_vocab_p | None = L.llama_model_get_vocab(model)
        self.n_tokens: int = L.llama_vocab_n_tokens(self._vocab)
        control = L.LLAMA_TOKEN_ATTR_CONTROL
        user = L.LLAMA_TOKEN_ATTR_USER_DEFINED
        added: dict[str, int] = {}
        user_defined: dict[str, int] = {}
        for i in range(self.n_tokens):
            attr = L.llama_vocab_get_attr(self._vocab, i)
            if attr & (control | user):
                text = self._piece(i, special=True).decode("utf-8", "replace")
                if text and text not in added:
                    added[text] = i
                    if attr & user:
                        user_defined[text] = i
        #: every control and user-defined token's text -> id: the markers a template may write
        self.added: Mapping[str, int] = added
        #: ids that end generation (end of text, end of turn...)
        self.eog_ids = frozenset(i for i in added.values() if L.llama_vocab_is_eog(self._vocab, i))
        self.bos_id: int = L.llama_vocab_bos(self._vocab)
        self.eos_id: int = L.llama_vocab_eos(self._vocab)
        self._user_ids = frozenset(user_defined.values())
        self._user_pattern = (
            re.compile("|".join(re.escape(t) for t in sorted(user_defined, key=len, reverse=True)))
            if user_defined else None
        )
        first = self._tokenize("a", special=False)
        self.space_prefix = bool(first) and self._piece(first[0], special=False).startswith(b" ")

    # ------------------------------------------------------------------ the protocol
    def encode_plain(self, text: str, *, at_start: bool = False) -> list[int]:
        """Ids of ``text`` with special parsing off: content never yields an added token.

        ``at_start`` (the text opens the prompt) changes nothing here: llama.cpp
        treats the first piece of a prompt and a piece that follows an added
        token alike. A user-defined added token's text inside ``text`` is cut
        after its first character, and the two sides are tokenized apart: the
        result decodes to ``text`` and holds no added id (with a SentencePiece
        space prefix the cut side starts with ``▁``, so such vocabularies keep
        llama.cpp's own result for those rare occurrences).
        """
        if not text:
            return []
        ids = self._tokenize(text, special=False)
        if self._user_pattern is None or self.space_prefix or not self._user_ids.intersection(ids):
            return ids
        out: list[int] = []
        pos = 0
        for m in self._user_pattern.finditer(text):
            out += self._tokenize(text[pos:m.start() + 1], special=False)
            pos = m.start() + 1
        return out + self._tokenize(text[pos:], special=False)

    def encode_plain_offsets(self, text: str, *, at_start: bool = False) -> tuple[list[int], list[int]]:
        """:meth:`encode_plain` and the character offset where each id's text starts (best effort:
        an id that starts inside a multi-byte character points at that character)."""
        ids = self.encode_plain(text, at_start=at_start)
        data = text.encode("utf-8")
        char_at = [0] * (len(data) + 1)  # byte offset -> index of the character it falls in
        b = 0
        for i, ch in enumerate(text):
            n = len(ch.encode("utf-8"))
            char_at[b:b + n] = [i] * n
            b += n
        char_at[len(data)] = len(text)
        starts = []
        b = -1 if self.space_prefix else 0  # the dummy prefix space is not in the text
        for i in ids:
            starts.append(char_at[min(max(b, 0), len(data))])
            b += len(self._piece(i, special=False))
        return ids, starts

    def encode_parsed(self, text: str) -> list[int]:
        """llama.cpp's own encoding, special parsing on (added tokens anywhere become their ids); no BOS."""
        return self._tokenize(text, special=True) if text else []

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, added tokens rendered as their text; an incomplete UTF-8 tail becomes U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", "replace")

    # ------------------------------------------------------------------ helpers
    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        n = len(ids)
        if not n:
            return b""
        arr = (self._L.llama_token * n)(*ids)
        size = 8 * n + 16
        while True:
            buf = ctypes.create_string_buffer(size)
            got = self._L.llama_detokenize(self._live(), arr, n, buf, size, False, True)
            if got >= 0:
                return buf.raw[:got]
            size = -got

    def piece(self, token: int) -> str:
        """One token's text (added tokens rendered)."""
        return self._piece(token, special=True).decode("utf-8", "replace")

    def close(self) -> None:
        """The model is about to be freed: from now on every call raises instead of reading freed memory
        (a session may outlive its backend, e.g. across a restart)."""
        self._vocab = None

    def _live(self) -> llama_vocab_p:
        if self._vocab is None:
            raise BackendError("this tokenizer's llamacpp backend is closed: load the session with the new "
                               "backend's tokenizer (Session.from_dict(data, tokenizer=backend.tokenizer))")
        return self._vocab

    def _tokenize(self, text: str, *, special: bool) -> list[int]:
        vocab = self._live()
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            arr = (self._L.llama_token * size)()
            n = self._L.llama_tokenize(vocab, data, len(data), arr, size, False, special)
            if n >= 0:
                ids: list[int] = arr[:n]
                return ids
            size = -n

    def _piece(self, token: int, *, special: bool) -> bytes:
        vocab = self._live()
        size = 64
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._L.llama_token_to_piece(vocab, token, buf, size, 0, special)
            if n >= 0:
                return buf.raw[:n]
            size = -n

    def __repr__(self) -> str:
        return f"LlamaVocab({self.n_tokens} tokens, {len(self.added)} added)"
