"""Device-side checks, read back where vLLM has synchronised anyway.

A check computes its conditions as a bool tensor on the tensors' own device (no host sync). On
CPU, or with INVARIANT_CHECK_GUARDS_SYNC=eager, the flags are read at once; otherwise they wait in
a queue until the guard flushes it at the start of the next proposal. Nothing is computed while a
CUDA graph is being captured: the callers ask `capturing()` first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import runtime


def capturing() -> bool:
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_available() and cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001
        return False


def compiling() -> bool:
    try:
        return bool(torch.compiler.is_compiling())
    except Exception:  # noqa: BLE001
        return False


def immediate(t: torch.Tensor) -> bool:
    cfg = runtime.config()
    return t.device.type == "cpu" or (cfg is not None and cfg.sync == "eager")


@dataclass
class _Pending:
    flags: torch.Tensor
    on_failed: Callable[[list[int]], None]


class Queue:
    """Checks waiting for their read-back; one per thing that has a natural flush point."""

    def __init__(self) -> None:
        self._items: list[_Pending] = []

    def __len__(self) -> int:
        return len(self._items)

    def submit(self, flags: torch.Tensor, on_failed: Callable[[list[int]], None]) -> None:
        """flags: 1-D bool, one per condition. on_failed(indices) reports the ones that fail."""
        item = _Pending(flags.reshape(-1), on_failed)
        if immediate(item.flags):
            _run(item)
        else:
            self._items.append(item)

    def flush(self) -> None:
        items, self._items = self._items, []
        for item in items:
            _run(item)

    def clear(self) -> None:
        self._items = []


def _run(item: _Pending) -> None:
    ok = item.flags.detach().to("cpu").tolist()
    failed = [i for i, good in enumerate(ok) if not good]
    if failed:
        item.on_failed(failed)
