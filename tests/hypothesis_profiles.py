"""Hypothesis' profiles, chosen by ``LMCHAT_HYPOTHESIS`` (docs/architecture.md, "how to work here"):

* ``ci`` (the default: the README's test command and .ci/run): each property test's own number of examples;
* ``dev``: a tenth of them (at least 5), for a quick run while changing a parser or a template;
* ``nightly``: ten times as many, for a long run (``LMCHAT_HYPOTHESIS=nightly python -m pytest -n auto``).

A property test says how many examples its ``ci`` run takes with ``max_examples=examples(N)``: its
``@settings`` wins over a profile's, so the profile scales that number rather than replacing it.
"""
from __future__ import annotations

import os

from hypothesis import settings

#: profile name -> the factor on a test's own number of examples
SCALES = {"ci": 1.0, "dev": 0.1, "nightly": 10.0}
PROFILE = os.environ.get("LMCHAT_HYPOTHESIS", "ci")


def load() -> None:
    if PROFILE not in SCALES:
        raise ValueError(f"LMCHAT_HYPOTHESIS={PROFILE!r}: one of {', '.join(SCALES)}")
    for name, scale in SCALES.items():
        settings.register_profile(name, max_examples=examples(100, scale), deadline=None)
    settings.load_profile(PROFILE)


def examples(n: int, scale: float | None = None) -> int:
    """The number of examples a test with ``n`` in the ``ci`` profile runs in the one loaded."""
    factor = SCALES.get(PROFILE, 1.0) if scale is None else scale
    return max(5, round(n * factor)) if factor < 1 else round(n * factor)
