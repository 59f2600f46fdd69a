"""The one way the runtime guards write to the console: one line on stderr per message.

vLLM configures its own loggers only, so without a handler of our own a warning from a worker
would be invisible. A host application that configured the root logger gets the records instead.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("invariant_check.guards")


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"invariant-check: {record.levelname.lower()}: {record.getMessage()}"


def _ensure_handler() -> None:
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def error(message: str) -> None:
    _emit(logging.ERROR, message)


def warning(message: str) -> None:
    _emit(logging.WARNING, message)


def _emit(level: int, message: str) -> None:
    try:
        _ensure_handler()
        logger.log(level, message)
    except Exception:  # noqa: BLE001 - a closed stderr must not take vLLM down
        pass
