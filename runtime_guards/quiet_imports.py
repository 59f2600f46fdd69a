"""`invariant-check guards` imports some forty vLLM modules (tens of seconds on a CPU box): say
how far it got on stderr, and keep what vLLM prints meanwhile (its logger, C++ notices written
straight to the file descriptors) out of the table, unless asked for with `-v`.

    with ImportNoise(show=False) as noise:
        for i, name in enumerate(modules, 1):
            noise.progress(i, len(modules), name)
            importlib.import_module(name)
    noise.lines  # what was printed meanwhile (kept, not shown)

Progress is one rewritten line on a terminal, and a few plain lines (start, each quarter, end)
otherwise, so CI logs stay short. Nothing here imports vLLM or torch.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from typing import IO, Any


def _fileno(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


class ImportNoise:
    def __init__(self, show: bool = False, stream: IO[str] | None = None) -> None:
        self.show = show
        self.lines: list[str] = []
        self.started = time.monotonic()
        self.elapsed = 0.0
        self._given = stream
        self._out: IO[str] | None = None
        self._tty = False
        self._stack = contextlib.ExitStack()
        self._buffer = io.StringIO()
        self._tmp: Any = None
        self._saved: list[tuple[int, int]] = []
        self._last_quarter = -1

    # -- capture --------------------------------------------------------------------------------
    def __enter__(self) -> ImportNoise:
        err = self._given if self._given is not None else sys.stderr
        fd = _fileno(err)
        # progress goes where stderr went before the capture, through a descriptor of its own
        self._out = os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace") if fd is not None else err
        self._tty = bool(getattr(err, "isatty", lambda: False)())
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                s.flush()
        if self.show:
            # vLLM's output is wanted, but on stderr: stdout may carry our JSON
            self._stack.enter_context(contextlib.redirect_stdout(sys.stderr))
            self._redirect_fds(2)
        else:
            self._stack.enter_context(contextlib.redirect_stdout(self._buffer))
            self._stack.enter_context(contextlib.redirect_stderr(self._buffer))
            self._tmp = tempfile.TemporaryFile()
            self._redirect_fds(self._tmp.fileno())
        self.started = time.monotonic()
        return self

    def _redirect_fds(self, target: int) -> None:
        for fd in (1, 2):
            if fd == target:
                continue
            try:
                self._saved.append((fd, os.dup(fd)))
                os.dup2(target, fd)
            except OSError:
                pass

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.started
        for s in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                s.flush()
        for fd, saved in reversed(self._saved):
            with contextlib.suppress(OSError):
                os.dup2(saved, fd)
                os.close(saved)
        self._saved.clear()
        self._stack.close()
        text = self._buffer.getvalue()
        if self._tmp is not None:
            self._tmp.seek(0)
            text += self._tmp.read().decode("utf-8", errors="replace")
            self._tmp.close()
        self.lines = [line for line in text.splitlines() if line.strip()]
        if self._tty:
            self._write("\r\x1b[K")
        if self._out is not None and self._out is not self._given and self._out is not sys.stderr:
            with contextlib.suppress(Exception):
                self._out.close()

    # -- progress -------------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        if self._out is None:
            return
        with contextlib.suppress(Exception):
            self._out.write(text)
            self._out.flush()

    def progress(self, done: int, total: int, name: str) -> None:
        """Called before importing module number `done` (1-based) of `total`."""
        seconds = time.monotonic() - self.started
        if self._tty:
            line = f"importing vLLM modules: {done}/{total} ({seconds:.0f} s) {name}"
            width = shutil.get_terminal_size().columns
            self._write("\r\x1b[K" + line[: max(10, width - 1)])
            return
        if done == 1:
            self._write(f"invariant-check: importing {total} vLLM modules...\n")
            self._last_quarter = 0
            return
        quarter = (4 * (done - 1)) // total
        if quarter > self._last_quarter:
            self._last_quarter = quarter
            self._write(f"invariant-check: {done - 1}/{total} imported ({seconds:.0f} s)\n")

    def summary(self, total: int) -> str:
        kept = f"; vLLM printed {len(self.lines)} line(s) meanwhile (shown with -v)" if self.lines and not self.show else ""
        return f"imported {total} vLLM module(s) in {self.elapsed:.1f} s{kept}"
