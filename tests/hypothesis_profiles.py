"""Hypothesis' profiles, chosen by ``LMCHAT_HYPOTHESIS`` (docs/architecture.md, "how to work here"):

* ``ci``: each property test's own number of examples; the default of a run of every tier (the README's test
  command, .ci/run);
* ``dev``: a tenth of them (at least 5); the default of a run that leaves a tier out (``-m "not model ..."``, the
  quick tier: a developer's run while changing a parser or a template, which CI's full run checks again at ``ci``);
* ``nightly``: ten times as many, for a long run (``LMCHAT_HYPOTHESIS=nightly python -m pytest -n auto``).

pytest's header names the profile of the run. A property test says how many examples its ``ci`` run takes with
``max_examples=examples(N)``: its ``@settings`` wins over a profile's, so the profile scales that number rather
than replacing it.
"""
from __future__ import annotations

import os

from hypothesis import settings

#: profile name -> the factor on a test's own number of examples
SCALES = {"ci": 1.0, "dev": 0.1, "nightly": 10.0}
#: the loaded profile (:func:`load`)
PROFILE = "ci"


def load(quick: bool) -> str:
    """Loads ``$LMCHAT_HYPOTHESIS``, or ``dev`` for a ``quick`` run (one that leaves a tier out), else ``ci``."""
    global PROFILE
    PROFILE = os.environ.get("LMCHAT_HYPOTHESIS") or ("dev" if quick else "ci")
    if PROFILE not in SCALES:
        raise ValueError(f"LMCHAT_HYPOTHESIS={PROFILE!r}: one of {', '.join(SCALES)}")
    for name, scale in SCALES.items():
        settings.register_profile(name, max_examples=examples(100, scale), deadline=None)
    settings.load_profile(PROFILE)
    return PROFILE


def header() -> str:
    chosen = "LMCHAT_HYPOTHESIS" if os.environ.get("LMCHAT_HYPOTHESIS") else "the default for this run"
    return f"hypothesis profile: {PROFILE} ({SCALES[PROFILE]:g}x each test's examples; {chosen})"


def examples(n: int, scale: float | None = None) -> int:
    """The number of examples a test with ``n`` in the ``ci`` profile runs in the one loaded."""
    factor = SCALES.get(PROFILE, 1.0) if scale is None else scale
    return max(5, round(n * factor)) if factor < 1 else round(n * factor)
