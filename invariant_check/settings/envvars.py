"""Every `INVARIANT_CHECK_*` environment variable: what it accepts, what each value means, its
default. One table, read by the code that parses the variables, by their error messages, and by
the documentation: the tables in docs/guards.md, docs/compaction.md and docs/cli.md are written
from it (`python -m invariant_check.settings.envvars`; `--check` exits 1 when a page is stale), so the
three cannot disagree.

Imports nothing beyond the standard library: the vLLM plugin parses the guards' variables in
every vLLM process, and the linter reads its own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNSET = ""  # the spelling of "empty or unset" in a `Value`


class EnvError(ValueError):
    """A variable holds a value not in its table; the message names the variable and lists
    what it accepts."""


@dataclass(frozen=True)
class Value:
    spellings: tuple[str, ...]  # lower case; UNSET: empty or unset
    meaning: str
    result: Any = None


@dataclass(frozen=True)
class Var:
    name: str
    part: str  # the page that documents it: "guards", "compaction" or "lint"
    values: tuple[Value, ...] = ()
    default: str = ""  # as shown in the docs
    names: tuple[str, ...] = ()  # a comma list of these is accepted too (lower case)
    names_meaning: str = ""
    free_form: str = ""  # a value that is not from a list (a folder): what it is
    note: str = ""  # appended in the docs only (links)

    def parse(self, raw: str | None) -> Any:
        """The value's meaning: a `Value.result`, a frozenset of `names`, or the free-form
        string (None when empty). Raises EnvError for anything the table does not list."""
        value = (raw or "").strip()
        if self.free_form:
            return value or None
        key = value.lower()
        for v in self.values:
            if key in v.spellings:
                return v.result
        if self.names:
            parts = [p.strip() for p in key.split(",") if p.strip()]
            unknown = [p for p in parts if p not in self.names]
            if parts and not unknown:
                return frozenset(parts)
            raise EnvError(self.error(raw, unknown))
        raise EnvError(self.error(raw))

    def error(self, raw: str | None, unknown: list[str] | None = None) -> str:
        what = ""
        if unknown:
            import difflib

            close = []
            for u in unknown:
                starts = [n for n in self.names if n.startswith(u)]
                close += starts[:1] or difflib.get_close_matches(u, self.names, n=1, cutoff=0.6)
            what = f" (unknown: {', '.join(unknown)}" + (f"; did you mean {', '.join(close)}?" if close else "") + ")"
        return f"{self.name}={raw!r} is not valid{what}; accepted values: {self.accepted()}"

    def accepted(self, code: bool = False) -> str:
        """What the variable accepts, in one line (`code`: spellings in Markdown backticks)."""
        q = (lambda s: f"`{s}`") if code else (lambda s: s)
        parts = []
        for v in self.values:
            shown = [q(s) for s in v.spellings if s != UNSET]
            if UNSET in v.spellings:
                shown.append("empty or unset")
            parts.append(f"{', '.join(shown)}: {v.meaning}")
        if self.names:
            parts.append(f"a comma list of {', '.join(q(n) for n in self.names)}: {self.names_meaning}")
        if self.free_form:
            parts.append(self.free_form)
        return "; ".join(parts)


def _on_off(on: str, off: str) -> tuple[Value, Value]:
    return (
        Value(("1", "on", "true", "yes"), on, True),
        Value(("0", "off", "false", "no", UNSET), off, False),
    )


# The guards' names and choices, here so that this table imports nothing: runtime_guards/config.py
# takes them from here.
GUARD_NAMES: tuple[str, ...] = ("topk-layout", "group-metadata", "metadata-coherence")
FAULTS: tuple[str, ...] = (
    "drop-compaction",
    "wrong-rows",
    "wrong-slot-ids",
    "double-compaction",
    "bad-group-metadata",
    "stale-max-seq-len",
)

VARS: tuple[Var, ...] = (
    Var(
        "INVARIANT_CHECK_GUARDS",
        "guards",
        (
            Value(("1", "all", "on", "true", "yes"), "every guard", frozenset(GUARD_NAMES)),
            Value(("0", "off", "false", "no", "none", UNSET), "off", frozenset()),
        ),
        default="off",
        names=GUARD_NAMES,
        names_meaning="those guards",
    ),
    Var(
        "INVARIANT_CHECK_GUARDS_MODE",
        "guards",
        (
            Value(("raise",), "raise `InvariantViolation` (a subclass of `AssertionError`)", "raise"),
            Value(("warn",), "log once per site and go on", "warn"),
            Value(("record",), "go on silently (with a report directory: write the record)", "record"),
            Value((UNSET,), "`raise`", "raise"),
        ),
        default="`raise`",
    ),
    Var(
        "INVARIANT_CHECK_REPORT_DIR",
        "guards",
        default="none",
        free_form="a directory; every process appends JSON lines to its own `invariant-check-<host>-<pid>.jsonl`",
    ),
    Var(
        "INVARIANT_CHECK_GUARDS_SYNC",
        "guards",
        (
            Value(
                ("deferred",),
                "device-side results are read back at the start of the next proposal, where vLLM "
                "has synchronised anyway",
                "deferred",
            ),
            Value(("eager",), "at once (one host sync per check; for debugging)", "eager"),
            Value((UNSET,), "`deferred`", "deferred"),
        ),
        default="`deferred`",
    ),
    Var(
        "INVARIANT_CHECK_COMPACTION",
        "guards",
        (
            Value(
                ("triton",),
                "replace every model's `compact_topk_indices` with "
                "`invariant_check.compaction.compact_topk_indices_` (works with the guards off, "
                "too; a model with no top-k buffer to compact raises `NoTopkBufferError`)",
                "triton",
            ),
            Value(("vllm", UNSET), "keep vLLM's", "vllm"),
        ),
        default="`vllm`",
    ),
    Var(
        "INVARIANT_CHECK_TEST_FAULT",
        "guards",
        (Value((UNSET,), "no fault", frozenset()),),
        default="none",
        names=FAULTS,
        names_meaning="inject those faults (for this project's own tests only)",
        note="**Test-only**, see [below](#fault-injection-tests-only)",
    ),
    Var(
        "INVARIANT_CHECK_COMPACTION_DEBUG",
        "compaction",
        _on_off("run the value checks (a device sync) on accelerators too", "only on CPU tensors"),
        default="off",
    ),
    Var(
        "INVARIANT_CHECK_COMPACTION_FAST_LAUNCH",
        "compaction",
        (
            Value(("1", "on", "true", "yes", UNSET), "reuse the compiled kernel directly after its first launch", True),
            Value(("0", "off", "false", "no"), "launch through `JITFunction.run` on every call", False),
        ),
        default="on",
    ),
    Var(
        "INVARIANT_CHECK_CACHE_DIR",
        "lint",
        default="`.invariant-check-cache` beside the configuration",
        free_form="a folder: the lint cache, as `--cache-dir`",
    ),
    Var(
        "INVARIANT_CHECK_DEBUG",
        "lint",
        _on_off(
            "show the traceback of an internal error instead of one line, and that of a rule that failed on a definition besides its error",
            "one line",
        ),
        default="off",
    ),
)

BY_NAME: dict[str, Var] = {v.name: v for v in VARS}


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The parsed value of a variable of the table (raises EnvError on a value it lacks)."""
    env = os.environ if environ is None else environ
    return BY_NAME[name].parse(env.get(name))


# -- the documentation ----------------------------------------------------------------------------

PAGES = {"guards": "docs/guards.md", "compaction": "docs/compaction.md", "lint": "docs/cli.md"}
END = "<!-- env:end -->"


def begin(part: str) -> str:
    return f"<!-- env:begin {part} (generated from invariant_check/settings/envvars.py by `python -m invariant_check.settings.envvars`) -->"


def markdown_table(part: str) -> str:
    rows = ["| Variable | Accepted values | Default |", "|---|---|---|"]
    for var in VARS:
        if var.part == part:
            accepted = var.accepted(code=True) + (f". {var.note}" if var.note else "")
            accepted = accepted.replace("|", "\\|")
            rows.append(f"| `{var.name}` | {accepted} | {var.default} |")
    return "\n".join(rows)


def update_page(text: str, part: str) -> str:
    start = begin(part)
    if start not in text or END not in text.split(start, 1)[1]:
        raise ValueError(f"no generated block ({start!r} ... {END!r}) to replace")
    head, rest = text.split(start, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{start}\n\n{markdown_table(part)}\n\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """Writes the tables into the pages (paths relative to the current folder, the repository
    root); `--check`: exit 1 naming each stale page, write nothing."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    stale = []
    for part, page in PAGES.items():
        path = Path(page)
        try:
            text = path.read_text(encoding="utf-8")
            new = update_page(text, part)
        except (OSError, ValueError) as exc:
            print(f"invariant-check: error: {path}: {exc}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(page)
            if not check:
                path.write_text(new, encoding="utf-8")
    if check and stale:
        for page in stale:
            print(f"{page} is stale: run python -m invariant_check.settings.envvars", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
