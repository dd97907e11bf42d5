"""lmchat: exact chat prompts and stateful interactive sessions for chat LLMs."""
from .errors import (
    InvalidMessages,
    LmchatError,
    ModelMatchError,
    SessionError,
    TemplateConfigError,
    TemplateRuleError,
    UnknownTemplate,
)
from .matching import match_template
from .registry import CHAT_TEMPLATES, get_template, template_names
from .session import Delta, Session
from .templates.base import AffixTemplate, BaseTemplate, Chat

__version__ = "0.1.0"

__all__ = [
    "CHAT_TEMPLATES",
    "AffixTemplate",
    "BaseTemplate",
    "Chat",
    "Delta",
    "InvalidMessages",
    "LmchatError",
    "ModelMatchError",
    "Session",
    "SessionError",
    "TemplateConfigError",
    "TemplateRuleError",
    "UnknownTemplate",
    "get_template",
    "match_template",
    "template_names",
]
