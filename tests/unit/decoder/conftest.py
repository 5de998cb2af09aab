"""Hypothesis profiles for the decoder's property tests.

``ci`` (the default) keeps the decoder suite well under a minute; ``deep`` is for a
thorough run before a release: ``HYPOTHESIS_PROFILE=deep python -m pytest tests/unit/decoder``.
Hypothesis prints the seed of a failing example, and ``@reproduce_failure`` replays it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=50, deadline=None, print_blob=True)
settings.register_profile(
    "deep",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
