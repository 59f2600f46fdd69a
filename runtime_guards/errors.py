"""The exception a guard raises in `raise` mode."""

from __future__ import annotations

from typing import Any


class InvariantViolation(AssertionError):
    """An attention-metadata invariant of speculative decoding does not hold.

    A subclass of AssertionError so that test runners and `python -O`-agnostic callers treat
    it as a failed check, not as an I/O or configuration error.
    """

    def __init__(self, guard: str, invariant: str, message: str, values: dict[str, Any] | None = None):
        self.guard = guard
        self.invariant = invariant
        self.values = dict(values or {})
        super().__init__(f"[invariant-check {guard}/{invariant}] {message}")
