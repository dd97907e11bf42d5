"""Token ids for prompts: structural special tokens as control ids, content as plain text.

A rendered prompt is split at the *structural* special tokens the template
wrote (``<|im_start|>``, ``<|eot_id|>``...). Those become their control ids;
everything between them is encoded with special-token parsing off, so a user
who types ``<|im_end|>`` gets ordinary text tokens, never a forged turn (the
guard ChatGLM3's own tokenizer has, and transformers#29279 lacks).

Which occurrences are structural is found by rendering the window a second
time with every special string inside message fields *defused* (replaced by
same-length private-use characters): what still reads as a special token was
written by the template.

Text between structural tokens is encoded the way the tokenizer encodes a
split that follows an added token (an anchor token is prepended and dropped),
so SentencePiece's dummy-prefix ``▁`` appears only where the tokenizer itself
would put it. Without special strings in content, the result equals
``tokenizer.encode(prompt, add_special_tokens=False)``; tests check that on
real tokenizers.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .extras import needs
from .templates.base import BaseTemplate, Chat

ANCHOR = "<lmchat|anchor>"
_PUA = "\ue000"


class TokenCodec:
    """A tokenizer seen as: special strings, their ids, and a content-safe encoder."""

    def __init__(self, tokenizer: Any):
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
        self._markup = backend
        added = backend.get_added_tokens_decoder()
        self.special: dict[str, int] = {t.content: i for i, t in added.items() if t.special}
        # longest first, so '<|im_start|>' never matches inside a longer special string
        self._pattern = re.compile("|".join(re.escape(s) for s in sorted(self.special, key=len, reverse=True))) \
            if self.special else None
        # a private copy that treats special strings as text, plus an anchor added token
        self._content = Tokenizer.from_str(backend.to_str())
        self._content.encode_special_tokens = True
        self._content.add_tokens([AddedToken(ANCHOR, special=False, normalized=False)])
        self._anchor_id = self._content.token_to_id(ANCHOR)

    # ------------------------------------------------------------------ encoding
    def encode_text(self, text: str, *, at_start: bool) -> list[int]:
        """Plain-text ids of ``text``; ``at_start``: it opens the prompt (no added token before it)."""
        if not text:
            return []
        if at_start:
            return self._content.encode(text, add_special_tokens=False).ids
        ids = self._content.encode(ANCHOR + text, add_special_tokens=False).ids
        if not ids or ids[0] != self._anchor_id:
            raise AssertionError("anchor token was not kept first")  # tokenizer normalises added tokens away
        return ids[1:]

    def encode(
        self, text: str, spans: Sequence[tuple[int, int]], *, base: int = 0
    ) -> tuple[list[int], tuple[int, int] | None]:
        """Ids of ``text`` given its structural special spans; ``base`` is its offset in the prompt.

        Also returns the anchor after the last structural token, ``(chars, ids)``
        into ``text`` and the returned ids: text after it can be re-encoded on
        its own, text before it never changes tokenisation again.
        """
        ids: list[int] = []
        pos = 0
        anchor = None
        for start, end in spans:
            ids += self.encode_text(text[pos:start], at_start=base + pos == 0)
            ids.append(self.special[text[start:end]])
            pos = end
            anchor = (end, len(ids))
        ids += self.encode_text(text[pos:], at_start=base + pos == 0)
        return ids, anchor

    def encode_offsets(self, text: str, spans: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Like :meth:`encode` for a whole prompt, plus the character offset where each id starts."""
        ids: list[int] = []
        starts: list[int] = []
        pos = 0

        def plain(chunk: str, at: int) -> None:
            if not chunk:
                return
            if at == 0:
                enc = self._content.encode(chunk, add_special_tokens=False)
                ids.extend(enc.ids)
                starts.extend(at + a for a, _ in enc.offsets)
            else:
                enc = self._content.encode(ANCHOR + chunk, add_special_tokens=False)
                ids.extend(enc.ids[1:])
                starts.extend(at + a - len(ANCHOR) for a, _ in enc.offsets[1:])

        for start, end in spans:
            plain(text[pos:start], pos)
            ids.append(self.special[text[start:end]])
            starts.append(start)
            pos = end
        plain(text[pos:], pos)
        return ids, starts

    def plain_encode(self, text: str) -> list[int]:
        """The tokenizer's own encoding (special strings parsed everywhere), for comparison."""
        return self._markup.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._markup.decode(list(ids), skip_special_tokens=False)

    def special_spans(self, text: str) -> list[tuple[int, int]]:
        if self._pattern is None:
            return []
        return [m.span() for m in self._pattern.finditer(text)]

    # ------------------------------------------------------------------ structure
    def defuse(self, value: Any) -> Any:
        """``value`` with every special string replaced by private-use characters of the same length."""
        if isinstance(value, str):
            return self._pattern.sub(lambda m: _PUA * len(m.group()), value) if self._pattern else value
        if isinstance(value, dict):
            return {k: self.defuse(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.defuse(v) for v in value]
        return value

    def structural_spans(self, template: BaseTemplate, chat: Chat, start: int, text: str) -> list[tuple[int, int]] | None:
        """Spans of the special tokens the template itself wrote in ``render_window(chat, start)``.

        None when defusing content changed the rendering (content steers the
        template's markup), in which case the spans cannot be told apart.
        """
        if self._pattern is None:
            return []
        defused = Chat(
            _DefusedMessages(chat.messages, self),
            tools=self.defuse(chat.tools),
            add_generation_prompt=chat.add_generation_prompt,
            date=chat.date,
            kwargs=chat.kwargs,
        )
        shadow, _ = template.render_window(defused, start)
        if len(shadow) != len(text):
            return None
        return self.special_spans(shadow)


    def spans(self, template: BaseTemplate, chat: Chat, start: int, text: str, policy: str = "split"):
        """The special-token spans to encode as control ids in ``render_window(chat, start)``.

        ``'split'``/``'reject'``: only those the template wrote; ``'allow'`` (legacy,
        transformers' behaviour): every special string, content included.
        """
        if policy != "allow":
            structural = self.structural_spans(template, chat, start, text)
            if structural is not None:
                return structural
        return self.special_spans(text)


class _DefusedMessages(Sequence):
    """A lazy, defused view of a message list (only the messages a window reads are copied)."""

    def __init__(self, messages: list[dict], codec: TokenCodec):
        self._messages = messages
        self._codec = codec
        self._cache: dict[int, dict] = {}

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if i not in self._cache:
            self._cache[i] = self._codec.defuse(self._messages[i])
        return self._cache[i]


_CODECS: dict[int, tuple[Any, TokenCodec]] = {}


def codec_for(tokenizer: Any) -> TokenCodec:
    """One codec per tokenizer object (building one copies the tokenizer once)."""
    if isinstance(tokenizer, TokenCodec):
        return tokenizer
    entry = _CODECS.get(id(tokenizer))
    if entry is None or entry[0] is not tokenizer:
        entry = (tokenizer, TokenCodec(tokenizer))
        _CODECS[id(tokenizer)] = entry
    return entry[1]


def encode_prompt(template: BaseTemplate, chat: Chat, codec: TokenCodec, policy: str = "split") -> tuple[str, list[int]]:
    """The full prompt of ``chat`` and its ids (content-safe unless ``policy='allow'``)."""
    template.check(chat)
    text, _ = template.render_window(chat, 0)
    return text, codec.encode(text, codec.spans(template, chat, 0, text, policy))[0]
