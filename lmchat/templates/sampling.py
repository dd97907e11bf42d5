"""The sampling settings a template bundles: their names, and the defaults of a model that publishes none."""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

SAMPLING_FIELDS = ("session_len", "top_p", "top_k", "temperature", "repetition_penalty", "stop_words", "capability")
#: LMDeploy's sampling defaults: what a template whose model publishes none bundles, and a turn that sets none uses
# Any here: sampling values of several types (floats, an int or None), read as the fields' defaults
DEFAULT_SAMPLING: Mapping[str, Any] = MappingProxyType(
    {"top_p": 0.8, "top_k": None, "temperature": 0.8, "repetition_penalty": 1.0}
)
