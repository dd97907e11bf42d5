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
from ..registry import register
from .base import BaseTemplate, Chat, stops

VICUNA_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives "
    "helpful, detailed, and polite answers to the user's questions. {system}\n "
)


def _has_input(instance, attribute, value):
    if "{input}" not in value:
        raise TemplateConfigError("must contain the {input} placeholder", field="INSTRUCTION")


@attrs.frozen(kw_only=True)
class XTunerTemplate(BaseTemplate):
    """An XTuner template dict as a frozen template (fields keep XTuner's semantics)."""

    hyperparameter_source = "XTuner templates carry no sampling settings: LMDeploy defaults"
    prefix_stable = True

    system_format: str = "{system}"  # SYSTEM
    instruction: str = attrs.field(default="{input}", validator=_has_input)  # INSTRUCTION
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
    def from_xtuner(cls, spec: dict, **fields) -> "XTunerTemplate":
        """Build from an XTuner dict (``SYSTEM``, ``INSTRUCTION``, ...)."""
        keys = {"SYSTEM": "system_format", "INSTRUCTION": "instruction", "SUFFIX": "suffix",
                "SUFFIX_AS_EOS": "suffix_as_eos", "SEP": "sep", "STOP_WORDS": "stop_words"}
        for key in spec:
            if key not in keys:
                raise TemplateConfigError(f"unknown XTuner template key (known: {', '.join(keys)})", field=key)
        return cls(**{keys[k]: v for k, v in spec.items()}, **fields)


@register("default")
@attrs.frozen(kw_only=True)
class XTunerDefault(XTunerTemplate):
    """XTuner's ``default``: for base models whose chat tokens were never trained."""

    system_format: str = "<|System|>:{system}\n"
    instruction: str = attrs.field(default="<|User|>:{input}\n<|Bot|>:", validator=_has_input)
    sep: str = "\n"


@register("internlm_chat")
@attrs.frozen(kw_only=True)
class XTunerInternLMChat(XTunerTemplate):
    """XTuner's ``internlm_chat``: ``<eoh>`` after the question, ``<eoa>`` (SUFFIX_AS_EOS) after the answer."""

    system_format: str = "<|System|>:{system}\n"
    instruction: str = attrs.field(default="<|User|>:{input}<eoh>\n<|Bot|>:", validator=_has_input)
    suffix: str = "<eoa>"
    suffix_as_eos: bool = True
    sep: str = "\n"
    stop_words: tuple[str, ...] | None = stops("<eoa>")


@register("vicuna")
@attrs.frozen(kw_only=True)
class XTunerVicuna(XTunerTemplate):
    """XTuner's ``vicuna`` (Vicuna v1.1 style); answers end with the eos ``</s>``."""

    system_format: str = VICUNA_SYSTEM
    instruction: str = attrs.field(default="USER: {input} ASSISTANT:", validator=_has_input)
    sep: str = "\n"
    eos: str = "</s>"
    stop_words: tuple[str, ...] | None = stops("</s>")


@register("wizardlm")
@attrs.frozen(kw_only=True)
class XTunerWizardLM(XTunerVicuna):
    """XTuner's ``wizardlm``: the Vicuna format."""


@register("baichuan_chat", "baichuan-chat")
@attrs.frozen(kw_only=True)
class XTunerBaichuanChat(XTunerTemplate):
    """XTuner's ``baichuan_chat``: ``<reserved_102>`` / ``<reserved_103>`` around the question."""

    system_format: str = "{system}\n"
    instruction: str = attrs.field(default="<reserved_102>{input}<reserved_103>", validator=_has_input)
    sep: str = "\n"
    eos: str = "</s>"
    stop_words: tuple[str, ...] | None = stops("</s>")


@register("baichuan2_chat", "baichuan2-chat", "baichuan2")
@attrs.frozen(kw_only=True)
class XTunerBaichuan2Chat(XTunerBaichuanChat):
    """XTuner's ``baichuan2_chat``: ``<reserved_106>`` / ``<reserved_107>`` around the question."""

    instruction: str = attrs.field(default="<reserved_106>{input}<reserved_107>", validator=_has_input)


@register("chatglm2", "chatglm2-6b")
@attrs.frozen(kw_only=True)
class XTunerChatGLM2(XTunerTemplate):
    """XTuner's ``chatglm2``: numbered rounds (``[Round n]``) from the session."""

    system_format: str = "{system}\n"
    instruction: str = attrs.field(default="[Round {round}]\n\n问：{input}\n\n答：", validator=_has_input)
    sep: str = "\n\n"
    eos: str = "</s>"
    stop_words: tuple[str, ...] | None = stops("</s>")
