"""Process-wide state of the guards: the active configuration, the reporter, and the helper
that runs a check so that a bug in the guard cannot take vLLM down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .config import GuardConfig
from .errors import InvariantViolation
from .reporting import Reporter

T = TypeVar("T")

_reporter: Reporter | None = None


def activate(config: GuardConfig) -> Reporter:
    global _reporter
    _reporter = Reporter(config)
    return _reporter


def deactivate() -> None:
    global _reporter
    _reporter = None


def reporter() -> Reporter | None:
    return _reporter


def config() -> GuardConfig | None:
    return _reporter.config if _reporter is not None else None


def violation(guard: str, invariant: str, message: str, values: dict[str, Any] | None = None, *, site: str = "") -> None:
    rep = _reporter
    if rep is not None:
        rep.violation(guard, invariant, message, values, site=site)


def run_check(guard: str, site: str, fn: Callable[..., T], *args: Any) -> T | None:
    """Run one check. Violations propagate (raise mode); anything else is a guard error.

    In `raise` mode a guard error is re-raised too, after being recorded: the strict mode is what
    CI uses, and a silently broken guard would pass every run. In `warn`/`record` mode the
    wrapped vLLM call always goes on.
    """
    try:
        return fn(*args)
    except InvariantViolation:
        raise
    except Exception as exc:
        rep = _reporter
        if rep is None:
            return None
        rep.guard_error(guard, site, exc)
        if rep.config.mode == "raise":
            raise
        return None
