"""LMDeploy's own templates for the names lmchat registers from XTuner's dicts: ``vicuna``, ``wizardlm``, ``baichuan2``.

lmchat's ``vicuna``, ``wizardlm`` and ``baichuan2`` (an alias of
``baichuan2_chat``) are XTuner's templates (:mod:`.xtuner`), which render from
format strings and have no ``system`` / ``meta_instruction`` / ``user`` ...
fields. LMDeploy registers templates of the same names that render otherwise
and take those fields, so an LMDeploy ``ChatTemplateConfig`` naming them
(:func:`lmchat.interop.loading.template_from_lmdeploy_config`) starts from the
classes here: LMDeploy v0.9.2, lmdeploy/model.py, ``Vicuna`` (lines 340-385,
registered as both ``vicuna`` and ``wizardlm``) and ``Baichuan2`` (lines
682-699), on ``BaseChatTemplate`` (lines 157-234). They are not registered:
the names stay XTuner's everywhere else (``get_template``, ``--template``,
model matching).
"""
from __future__ import annotations

import attrs

from ..errors import TemplateConfigError
from .affix import AffixTemplate
from .base import stops
from .chat import Chat

VICUNA_META = (
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
    "detailed, and polite answers to the user's questions."
)


def _assistant(instance: object, attribute: object, value: str) -> None:
    if not value:
        # LMDeploy's Vicuna cuts the last character of the prompt, meant to be the assistant prefix's own
        raise TemplateConfigError("must not be empty: LMDeploy's vicuna drops its last character from the "
                                  "generation prompt", field="assistant")


@attrs.frozen(kw_only=True)
class LMDeployVicuna(AffixTemplate):
    """LMDeploy's ``vicuna`` (and ``wizardlm``): ``{meta} USER: {q} ASSISTANT: {a}</s>USER: ...``.

    ``BaseChatTemplate`` with LMDeploy's Vicuna values; ``system`` is the text
    before a system prompt, ``meta_instruction`` the system prompt a
    conversation without one gets. LMDeploy drops the last character of the
    prompt (``ASSISTANT: `` becomes ``ASSISTANT:``): the generation prompt is
    ``assistant`` without its last character, which the model writes itself
    (``lead``), while history keeps the whole ``assistant``.
    """

    hyperparameter_source = "LMDeploy's vicuna template carries no sampling settings: LMDeploy defaults"
    prefix_stable = True

    meta_instruction: str | None = VICUNA_META
    eosys: str = " "
    user: str = "USER: "
    eoh: str = " "
    assistant: str = attrs.field(default="ASSISTANT: ", validator=_assistant)
    eoa: str = "</s>"
    stop_words: tuple[str, ...] | None = stops("</s>")

    def __attrs_post_init__(self) -> None:
        # the character LMDeploy cuts from the generation prompt is the first one the model writes
        object.__setattr__(self, "lead", self.assistant[-1])

    def tail(self, chat: Chat) -> str:
        return self.assistant[:-1] if chat.add_generation_prompt else ""


@attrs.frozen(kw_only=True)
class LMDeployWizardLM(LMDeployVicuna):
    """LMDeploy's ``wizardlm``: its ``Vicuna`` class under a second name."""


@attrs.frozen(kw_only=True)
class LMDeployBaichuan2(AffixTemplate):
    """LMDeploy's ``baichuan2``: ``<reserved_106>{q}<reserved_107>{a}<reserved_106>...``, nothing between turns.

    ``BaseChatTemplate`` with ``user`` and ``assistant`` set; its
    ``meta_instruction`` is ``''`` (``BaseChatTemplate``'s default), so a
    ``system`` prefix is printed even without a system message, as in LMDeploy.
    No stop words (LMDeploy names none).
    """

    hyperparameter_source = "LMDeploy's baichuan2 template carries no sampling settings: LMDeploy defaults"
    prefix_stable = True

    meta_instruction: str | None = ""
    user: str = "<reserved_106>"
    assistant: str = "<reserved_107>"


#: LMDeploy's template name -> lmchat's class for it, where lmchat's template of that name is XTuner's
LMDEPLOY_TWINS: dict[str, type[AffixTemplate]] = {
    "vicuna": LMDeployVicuna,
    "wizardlm": LMDeployWizardLM,
    "baichuan2": LMDeployBaichuan2,
}
