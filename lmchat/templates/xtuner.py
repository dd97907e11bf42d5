"""XTuner's prompt templates: SYSTEM, INSTRUCTION, SUFFIX, SUFFIX_AS_EOS, SEP, STOP_WORDS.

A conversation renders as ``SYSTEM.format(system=...)`` for a system message,
``INSTRUCTION.format(input=..., round=n)`` for each user turn (the instruction
already ends with the assistant's prefix, so there is no separate generation
prompt), and ``answer + SUFFIX [+ eos] + SEP`` for each answer. With
``SUFFIX_AS_EOS`` the suffix is the end marker the model learned and emits
(kept by the engine); otherwise the model emits the tokenizer's eos, which the
engine drops and the next delta re-injects with ``SEP``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..errors import InvalidMessages, TemplateConfigError
from ..registry import defaults_class, register
from .base import BaseTemplate
from .chat import Chat

#: the XTuner keys that are ``str.format`` templates: placeholder required, sample arguments
# Any here: template field values (strings, tuples, numbers) as xtuner's configs give them, checked by the fields
FORMATS: dict[str, tuple[str, dict[str, Any]]] = {
    "SYSTEM": ("system", {"system": ""}), "INSTRUCTION": ("input", {"input": "", "round": 1}),
}

#: XTuner key -> (field, accepted JSON type)
XTUNER_KEYS: dict[str, tuple[str, type]] = {
    "SYSTEM": ("system_format", str),
    "INSTRUCTION": ("instruction", str),
    "SUFFIX": ("suffix", str),
    "SUFFIX_AS_EOS": ("suffix_as_eos", bool),
    "SEP": ("sep", str),
    "STOP_WORDS": ("stop_words", list),
}


def check_format(key: str, value: str, source: str | None = None) -> None:
    """An XTuner format string must hold its placeholder and format cleanly.

    Checked when the template is built, so a stray ``{`` fails at load time
    with the XTuner key named, not in the middle of a conversation.
    """
    placeholder, sample = FORMATS[key]
    if "{" + placeholder + "}" not in value:
        raise TemplateConfigError(f"must contain the {{{placeholder}}} placeholder", field=key, source=source)
    try:
        value.format(**sample)
    except (KeyError, IndexError, ValueError) as exc:
        raise TemplateConfigError(
            f"not a valid format string ({exc!r}); literal braces are written {{{{ and }}}}", field=key, source=source
        ) from None


def _format_of(key: str) -> Callable[[object, object, str], None]:
    """The validator of the field holding the XTuner format string ``key``."""
    return lambda _instance, _attribute, value: check_format(key, value)


@attrs.frozen(kw_only=True)
class XTunerTemplate(BaseTemplate):
    """An XTuner template dict as a frozen template (fields keep XTuner's semantics)."""

    hyperparameter_source = "XTuner templates carry no sampling settings: LMDeploy defaults"
    prefix_stable = True

    system_format: str = attrs.field(default="{system}", validator=_format_of("SYSTEM"))  # SYSTEM
    instruction: str = attrs.field(default="{input}", validator=_format_of("INSTRUCTION"))  # INSTRUCTION
    suffix: str = ""  # SUFFIX
    suffix_as_eos: bool = False  # SUFFIX_AS_EOS
    sep: str = ""  # SEP
    eos: str = ""  # the tokenizer's eos, appended to answers unless SUFFIX_AS_EOS

    def __attrs_post_init__(self) -> None:
        # the suffix is what the model emits to end its answer (the engine keeps it); an override
        # of eoa alone is refused (XTuner renders no eoa), so eoa always follows the suffix
        object.__setattr__(self, "eoa", self.suffix)

    def header(self, chat: Chat) -> str:
        return self.bos

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        content = chat.text(i)
        if role == "system":
            return self.system_format.format(system=content)
        if role == "user":
            return self.instruction.format(input=content, round=chat.round(i))
        if role == "assistant":
            eos = "" if self.suffix_as_eos else self.eos
            return f"{content}{self.suffix}{eos}{self.sep}"
        raise InvalidMessages(
            f"role {role!r} is not supported by template {self.name!r} (supported: system, user, assistant)",
            index=i,
            field="role",
        )

    def tail(self, chat: Chat) -> str:
        return ""

    @classmethod
    def from_xtuner(cls, spec: dict[str, Any], *, source: str | None = None, **fields: Any) -> XTunerTemplate:
        """Build from an XTuner dict (``SYSTEM``, ``INSTRUCTION``, ...); errors name the key.

        ``INSTRUCTION`` is required; the other keys default as in XTuner. The
        tokenizer's eos (appended to answers unless ``SUFFIX_AS_EOS``) is not
        part of XTuner's dict: pass it as ``eos=``.
        """
        if "INSTRUCTION" not in spec:
            raise TemplateConfigError("missing (the user turn, with {input})", field="INSTRUCTION", source=source)
        values: dict[str, Any] = {}
        for key, value in spec.items():
            if key not in XTUNER_KEYS:
                known = ", ".join(XTUNER_KEYS)
                raise TemplateConfigError(f"unknown XTuner template key (known: {known})", field=key, source=source)
            name, kind = XTUNER_KEYS[key]
            if not isinstance(value, kind) or (isinstance(value, list) and not all(isinstance(w, str) for w in value)):
                expected = "a list of strings" if kind is list else kind.__name__
                raise TemplateConfigError(f"expected {expected}, got {value!r}", field=key, source=source)
            if key in FORMATS and isinstance(value, str):  # always a str there (XTUNER_KEYS)
                check_format(key, value, source)
            values[name] = value
        return cls(**values, **fields)


VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the user's questions. {system}\n "
)

#: XTuner's own dicts (``PROMPT_TEMPLATE`` in xtuner/utils/templates.py) for the models lmchat registers
PROMPT_TEMPLATE: dict[str, dict[str, Any]] = {
    "default": dict(SYSTEM="<|System|>:{system}\n", INSTRUCTION="<|User|>:{input}\n<|Bot|>:", SEP="\n"),
    "internlm_chat": dict(
        SYSTEM="<|System|>:{system}\n",
        INSTRUCTION="<|User|>:{input}<eoh>\n<|Bot|>:",
        SUFFIX="<eoa>",
        SUFFIX_AS_EOS=True,
        SEP="\n",
        STOP_WORDS=["<eoa>"],
    ),
    "vicuna": dict(SYSTEM=VICUNA_SYSTEM, INSTRUCTION="USER: {input} ASSISTANT:", SEP="\n"),
    "wizardlm": dict(SYSTEM=VICUNA_SYSTEM, INSTRUCTION="USER: {input} ASSISTANT:", SEP="\n"),
    "baichuan_chat": dict(SYSTEM="{system}\n", INSTRUCTION="<reserved_102>{input}<reserved_103>", SEP="\n"),
    "baichuan2_chat": dict(SYSTEM="{system}\n", INSTRUCTION="<reserved_106>{input}<reserved_107>", SEP="\n"),
    "chatglm2": dict(SYSTEM="{system}\n", INSTRUCTION="[Round {round}]\n\n问：{input}\n\n答：", SEP="\n\n"),
}

#: name -> (aliases, the eos that ends answers when SUFFIX does not, the summary ``lmchat templates`` shows)
BUILT_INS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "default": ((), "", "XTuner's ``default``: for base models whose chat tokens were never trained."),
    "internlm_chat": (
        (),
        "",
        "XTuner's ``internlm_chat``: ``<eoh>`` after the question, ``<eoa>`` (SUFFIX_AS_EOS) after the answer.",
    ),
    "vicuna": ((), "</s>", "XTuner's ``vicuna`` (Vicuna v1.1 style); answers end with the eos ``</s>``."),
    "wizardlm": ((), "</s>", "XTuner's ``wizardlm``: the Vicuna format."),
    "baichuan_chat": (
        ("baichuan-chat",),
        "</s>",
        "XTuner's ``baichuan_chat``: ``<reserved_102>`` / ``<reserved_103>`` around the question.",
    ),
    "baichuan2_chat": (
        ("baichuan2-chat", "baichuan2"),
        "</s>",
        "XTuner's ``baichuan2_chat``: ``<reserved_106>`` / ``<reserved_107>`` around the question.",
    ),
    "chatglm2": (("chatglm2-6b",), "</s>", "XTuner's ``chatglm2``: numbered rounds (``[Round n]``) from the session."),
}


def _register_built_ins() -> None:
    for name, (aliases, eos, doc) in BUILT_INS.items():
        spec = PROMPT_TEMPLATE[name]
        # an XTuner dict names no stop words when answers end with the tokenizer's eos: that is the stop word
        stop_words: dict[str, Any] = {} if "STOP_WORDS" in spec or not eos else {"stop_words": (eos,)}
        built = XTunerTemplate.from_xtuner(spec, eos=eos, **stop_words)
        register(name, *aliases)(defaults_class(built, f"XTuner_{name}", doc))


_register_built_ins()
