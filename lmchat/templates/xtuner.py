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

import attrs

from ..errors import InvalidMessages, TemplateConfigError
from ..registry import template
from .base import BaseTemplate, Chat, stops

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the user's questions. {system}\n "
)


#: the XTuner keys that are ``str.format`` templates: placeholder required, sample arguments
FORMATS = {"SYSTEM": ("system", {"system": ""}), "INSTRUCTION": ("input", {"input": "", "round": 1})}

#: XTuner key -> (field, accepted JSON type)
XTUNER_KEYS = {
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


def _system(default: str):
    return attrs.field(default=default, validator=lambda _i, _a, value: check_format("SYSTEM", value))


def _instruction(default: str):
    return attrs.field(default=default, validator=lambda _i, _a, value: check_format("INSTRUCTION", value))


@attrs.frozen(kw_only=True)
class XTunerTemplate(BaseTemplate):
    """An XTuner template dict as a frozen template (fields keep XTuner's semantics)."""

    hyperparameter_source = "XTuner templates carry no sampling settings: LMDeploy defaults"
    prefix_stable = True

    system_format: str = _system("{system}")  # SYSTEM
    instruction: str = _instruction("{input}")  # INSTRUCTION
    suffix: str = ""  # SUFFIX
    suffix_as_eos: bool = False  # SUFFIX_AS_EOS
    sep: str = ""  # SEP
    eos: str = ""  # the tokenizer's eos, appended to answers unless SUFFIX_AS_EOS

    def __attrs_post_init__(self):
        # the suffix is what the model emits to end its answer; the engine keeps it
        if self.suffix and not self.eoa:
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
    def from_xtuner(cls, spec: dict, *, source: str | None = None, **fields) -> "XTunerTemplate":
        """Build from an XTuner dict (``SYSTEM``, ``INSTRUCTION``, ...); errors name the key.

        ``INSTRUCTION`` is required; the other keys default as in XTuner. The
        tokenizer's eos (appended to answers unless ``SUFFIX_AS_EOS``) is not
        part of XTuner's dict: pass it as ``eos=``.
        """
        if "INSTRUCTION" not in spec:
            raise TemplateConfigError("missing (the user turn, with {input})", field="INSTRUCTION", source=source)
        values = {}
        for key, value in spec.items():
            if key not in XTUNER_KEYS:
                known = ", ".join(XTUNER_KEYS)
                raise TemplateConfigError(f"unknown XTuner template key (known: {known})", field=key, source=source)
            name, kind = XTUNER_KEYS[key]
            if not isinstance(value, kind) or (kind is list and not all(isinstance(w, str) for w in value)):
                expected = "a list of strings" if kind is list else kind.__name__
                raise TemplateConfigError(f"expected {expected}, got {value!r}", field=key, source=source)
            if key in FORMATS:
                check_format(key, value, source)
            values[name] = value
        return cls(**values, **fields)


@template("default")
class XTunerDefault(XTunerTemplate):
    """XTuner's ``default``: for base models whose chat tokens were never trained."""

    system_format: str = _system("<|System|>:{system}\n")
    instruction: str = _instruction("<|User|>:{input}\n<|Bot|>:")
    sep: str = "\n"


@template("internlm_chat")
class XTunerInternLMChat(XTunerTemplate):
    """XTuner's ``internlm_chat``: ``<eoh>`` after the question, ``<eoa>`` (SUFFIX_AS_EOS) after the answer."""

    system_format: str = _system("<|System|>:{system}\n")
    instruction: str = _instruction("<|User|>:{input}<eoh>\n<|Bot|>:")
    suffix: str = "<eoa>"
    suffix_as_eos: bool = True
    sep: str = "\n"
    stop_words: tuple[str, ...] | None = stops("<eoa>")


@template("vicuna")
class XTunerVicuna(XTunerTemplate):
    """XTuner's ``vicuna`` (Vicuna v1.1 style); answers end with the eos ``</s>``."""

    system_format: str = _system(VICUNA_SYSTEM)
    instruction: str = _instruction("USER: {input} ASSISTANT:")
    sep: str = "\n"
    eos: str = "</s>"
    stop_words: tuple[str, ...] | None = stops("</s>")


@template("wizardlm")
class XTunerWizardLM(XTunerVicuna):
    """XTuner's ``wizardlm``: the Vicuna format."""


@template("baichuan_chat", "baichuan-chat")
class XTunerBaichuanChat(XTunerTemplate):
    """XTuner's ``baichuan_chat``: ``<reserved_102>`` / ``<reserved_103>`` around the question."""

    system_format: str = _system("{system}\n")
    instruction: str = _instruction("<reserved_102>{input}<reserved_103>")
    sep: str = "\n"
    eos: str = "</s>"
    stop_words: tuple[str, ...] | None = stops("</s>")


@template("baichuan2_chat", "baichuan2-chat", "baichuan2")
class XTunerBaichuan2Chat(XTunerBaichuanChat):
    """XTuner's ``baichuan2_chat``: ``<reserved_106>`` / ``<reserved_107>`` around the question."""

    instruction: str = _instruction("<reserved_106>{input}<reserved_107>")


@template("chatglm2", "chatglm2-6b")
class XTunerChatGLM2(XTunerTemplate):
    """XTuner's ``chatglm2``: numbered rounds (``[Round n]``) from the session."""

    system_format: str = _system("{system}\n")
    instruction: str = _instruction("[Round {round}]\n\n问：{input}\n\n答：")
    sep: str = "\n\n"
    eos: str = "</s>"
    stop_words: tuple[str, ...] | None = stops("</s>")
