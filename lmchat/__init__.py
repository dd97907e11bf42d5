"""lmchat: exact chat prompts and stateful interactive sessions for chat LLMs."""
from typing import Any

from .constraints import Constraint
from .errors import (
    ConfigError,
    ConstraintUnsupported,
    InvalidMessages,
    LmchatError,
    MissingExtra,
    ModelMatchError,
    SessionError,
    SessionLengthExceeded,
    TemplateConfigError,
    TemplateRuleError,
    UnknownTemplate,
)
from .interop.jinja import JinjaTemplate
from .interop.loading import load_template, register_template
from .interop.matching import match_template
from .interop.training import encode_for_training
from .registry import CHAT_TEMPLATES, get_template, template_names
from .session import Delta, Session, SessionPolicy
from .stops import StopMatcher
from .templates import AffixTemplate, BaseTemplate, Chat
from .tools import ResponseStream, parse_response

__version__ = "0.1.0"


# Any: PEP 562's module __getattr__: the attribute is whichever of the names below was asked for
def __getattr__(name: str) -> Any:
    # the manager pulls in the backend protocol and the stores: loaded on first use only
    if name in ("ManagerLimits", "OneOff", "SessionManager", "TurnRequest", "TurnResult", "TurnStream"):
        from . import manager

        return getattr(manager, name)
    raise AttributeError(f"module 'lmchat' has no attribute {name!r}")


__all__ = [
    "CHAT_TEMPLATES",
    "AffixTemplate",
    "BaseTemplate",
    "Chat",
    "Delta",
    "InvalidMessages",
    "JinjaTemplate",
    "LmchatError",
    "ManagerLimits",
    "ModelMatchError",
    "OneOff",
    "ResponseStream",
    "Session",
    "SessionError",
    "SessionManager",
    "SessionLengthExceeded",
    "SessionPolicy",
    "StopMatcher",
    "TemplateConfigError",
    "ConfigError",
    "Constraint",
    "ConstraintUnsupported",
    "MissingExtra",
    "TemplateRuleError",
    "TurnRequest",
    "TurnResult",
    "TurnStream",
    "UnknownTemplate",
    "encode_for_training",
    "get_template",
    "load_template",
    "match_template",
    "parse_response",
    "register_template",
    "template_names",
]
