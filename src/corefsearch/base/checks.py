"""The checks of option values that many commands share, each with its one wording.

``at_least_one("--k", k)`` refuses 0, negatives, booleans and non-integers with
``--k must be at least 1, got 0``; ``not_negative`` the same for values that may be 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corefsearch.base.errors import InputError


def at_least_one(option: str, value: Any, error: type[Exception] = InputError) -> None:
    """``value`` is an integer ≥ 1 (``option`` names it in the message; ``error``: the exception raised)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{option} must be at least 1, got {value}")


def all_at_least_one(options: Mapping[str, int | None]) -> None:
    """``{option: value}``: each value at least 1 (``None``, an option not given, passes)."""
    for option, value in options.items():
        if value is not None:
            at_least_one(option, value)


def not_negative(options: Mapping[str, float | None]) -> None:
    """``{option: value}``: each value ≥ 0 (NaN refused; ``None``, an option not given, passes)."""
    for option, value in options.items():
        if value is not None and not value >= 0:
            raise InputError(f"{option} must not be negative, got {value}")
