"""Token ids for prompts: structural special tokens as control ids, content as plain text.

A rendered prompt is split at the *structural* special tokens the template
wrote (``<|im_start|>``, ``<|eot_id|>``...). Those become their control ids;
everything between them is encoded with special-token parsing off, so a user
who types ``<|im_end|>`` gets ordinary text tokens, never a forged turn (the
guard ChatGLM3's own tokenizer has, and transformers#29279 lacks).

"Special" means every *added* token of the tokenizer, flagged special or not
(DeepSeek-V3's ``<｜User｜>`` is not flagged, and is a role marker all the
same). Which occurrences are structural is found by rendering the window a
second time with every special string inside message fields *defused*
(replaced by same-length private-use characters): what still reads as a
special token was written by the template. The one exception is an
assistant message's own output markup (``<tool_call>``, ``<think>``: what the
model writes in its answers, :func:`lmchat.tools.output_markers`), which stays
markup there, as the model generated it.

Text between structural tokens is encoded the way the tokenizer encodes a
split that follows an added token (:mod:`lmchat.vocab`), so SentencePiece's
dummy-prefix ``▁`` appears only where the tokenizer itself would put it.
Without special strings in content, the result equals
``tokenizer.encode(prompt, add_special_tokens=False)``; tests check that on
real tokenizers.
"""
from __future__ import annotations

import re
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import cast, overload

from ..messages import Message
from ..templates.base import BaseTemplate
from ..templates.chat import Chat
from .vocab import HFVocab, Tokenizer, Vocabulary

_PUA = "\ue000"


class TokenCodec:
    """A vocabulary seen as: marker strings, their ids, and a content-safe encoder.

    ``special`` maps every added token (special or not) to its id: those are
    the strings that are markup when the template writes them and text
    anywhere else.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.vocab: Vocabulary = tokenizer if isinstance(tokenizer, Vocabulary) else HFVocab(tokenizer)
        self.tokenizer = tokenizer
        self.special: dict[str, int] = dict(self.vocab.added)
        # longest first, so '<|im_start|>' never matches inside a longer special string
        self._pattern = re.compile("|".join(re.escape(s) for s in sorted(self.special, key=len, reverse=True))) \
            if self.special else None
        self._outputs: dict[type, frozenset[str]] = {}

    # ------------------------------------------------------------------ encoding
    def encode_text(self, text: str, *, at_start: bool) -> list[int]:
        """Plain-text ids of ``text``; ``at_start``: it opens the prompt (no added token before it)."""
        return self.vocab.encode_plain(text, at_start=at_start) if text else []

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
            if chunk:
                chunk_ids, offsets = self.vocab.encode_plain_offsets(chunk, at_start=at == 0)
                ids.extend(chunk_ids)
                starts.extend(at + a for a in offsets)

        for start, end in spans:
            plain(text[pos:start], pos)
            ids.append(self.special[text[start:end]])
            starts.append(start)
            pos = end
        plain(text[pos:], pos)
        return ids, starts

    def plain_encode(self, text: str) -> list[int]:
        """The tokenizer's own encoding (special strings parsed everywhere), for comparison."""
        return self.vocab.encode_parsed(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.vocab.decode(ids)

    def special_spans(self, text: str, keep: frozenset[str] | None = None) -> list[tuple[int, int]]:
        """Where marker strings occur in ``text`` (only those in ``keep`` when it is given)."""
        if self._pattern is None:
            return []
        return [m.span() for m in self._pattern.finditer(text) if keep is None or m.group() in keep]

    # ------------------------------------------------------------------ structure
    def output_tokens(self, template: BaseTemplate) -> frozenset[str]:
        """The added tokens in the markup the template's model writes in its answers (tool-call
        markers, think tags): an assistant message keeps them as markers, as the model wrote them."""
        kind = type(template)
        if kind not in self._outputs:
            from ..tools.registry import output_markers  # the parsers know each model's output markup

            markers = output_markers(template)
            self._outputs[kind] = frozenset(t for t in self.special if any(t in m for m in markers))
        return self._outputs[kind]

    def defuse(self, value: object, keep: frozenset[str] = frozenset()) -> object:
        """``value`` with every special string (but those in ``keep``) replaced by private-use
        characters of the same length."""
        if isinstance(value, str):
            if self._pattern is None:
                return value
            return self._pattern.sub(lambda m: m.group() if m.group() in keep else _PUA * len(m.group()), value)
        if isinstance(value, dict):
            return {k: self.defuse(v, keep) for k, v in value.items()}
        if isinstance(value, list):
            return [self.defuse(v, keep) for v in value]
        return value

    def defuse_message(self, message: Message, template: BaseTemplate) -> Message:
        """A message as :meth:`structural_spans` sees it: an answer keeps its model's output markers."""
        keep = self.output_tokens(template) if message.get("role") == "assistant" else frozenset()
        return {k: self.defuse(v, keep) for k, v in message.items()}

    def structural_spans(
        self, template: BaseTemplate, chat: Chat, start: int, text: str
    ) -> list[tuple[int, int]] | None:
        """Spans of the special tokens the template itself wrote in ``render_window(chat, start)``,
        plus an answer's own output markers.

        None when defusing content changed the rendering (content steers the
        template's markup), in which case the spans cannot be told apart.
        """
        if self._pattern is None:
            return []
        defused = Chat(
            # a read-only view where Chat holds a list: rendering only reads the messages
            cast("list[Message]", _DefusedMessages(chat.messages, self, template)),
            tools=cast("list[Message] | None", self.defuse(chat.tools)),  # defusing keeps a value's shape
            add_generation_prompt=chat.add_generation_prompt,
            date=chat.date,
            kwargs=chat.kwargs,
        )
        shadow, _ = template.render_window(defused, start)
        if len(shadow) != len(text):
            return None
        return self.special_spans(shadow)

    def spans(self, template: BaseTemplate, chat: Chat, start: int, text: str,
              policy: str = "split") -> list[tuple[int, int]]:
        """The special-token spans to encode as control ids in ``render_window(chat, start)``.

        ``'split'``/``'reject'``: only those the template wrote (and an answer's
        output markers); ``'allow'`` (legacy, transformers' behaviour): every
        special string, content included.
        """
        if policy != "allow":
            structural = self.structural_spans(template, chat, start, text)
            if structural is not None:
                return structural
        return self.special_spans(text)


class _DefusedMessages(Sequence[Message]):
    """A lazy, defused view of a message list (only the messages a window reads are copied)."""

    def __init__(self, messages: list[Message], codec: TokenCodec, template: BaseTemplate):
        self._messages = messages
        self._codec = codec
        self._template = template
        self._cache: dict[int, Message] = {}

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, i: int) -> Message: ...

    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...

    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if i not in self._cache:
            self._cache[i] = self._codec.defuse_message(self._messages[i], self._template)
        return self._cache[i]


#: one codec per tokenizer, for as long as the tokenizer lives (building one copies the tokenizer)
_CODECS: weakref.WeakKeyDictionary[Tokenizer, TokenCodec] = weakref.WeakKeyDictionary()
#: tokenizers that cannot be weakly referenced (``tokenizers.Tokenizer``): the few most recent
_PINNED: OrderedDict[int, tuple[Tokenizer, TokenCodec]] = OrderedDict()
PINNED_CODECS = 8


def codec_for(tokenizer: Tokenizer | TokenCodec) -> TokenCodec:
    """The codec of a tokenizer (or vocabulary), built once per tokenizer object."""
    if isinstance(tokenizer, TokenCodec):
        return tokenizer
    try:
        codec = _CODECS.get(tokenizer)
        if codec is None:
            codec = _CODECS[tokenizer] = TokenCodec(tokenizer)
        return codec
    except TypeError:  # not weakly referenceable
        pass
    entry = _PINNED.get(id(tokenizer))
    if entry is None or entry[0] is not tokenizer:
        entry = (tokenizer, TokenCodec(tokenizer))
        _PINNED[id(tokenizer)] = entry
        while len(_PINNED) > PINNED_CODECS:
            _PINNED.popitem(last=False)
    _PINNED.move_to_end(id(tokenizer))
    return entry[1]


def encode_prompt(
    template: BaseTemplate, chat: Chat, codec: TokenCodec, policy: str = "split"
) -> tuple[str, list[int]]:
    """The full prompt of ``chat`` and its ids (content-safe unless ``policy='allow'``)."""
    template.check(chat)
    text, _ = template.render_window(chat, 0)
    return text, codec.encode(text, codec.spans(template, chat, 0, text, policy))[0]
