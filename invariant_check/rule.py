"""The base class every rule in `invariant_check.rules` derives from.

A rule is a libcst `BatchableCSTVisitor`: the engine parses a file once and runs every enabled
rule in one batched traversal. Rules call `report()`; positions are computed by the engine
afterwards, and only for files where something was reported (position metadata costs about as
much as parsing).

Cross-file rules work in two passes. While visiting, a rule writes JSON-serialisable facts
into `self.facts` and attaches `data` to its reports. After every file is visited, the engine
calls `finalize()` once per rule with all candidates and all files' facts, in the main process
and without re-parsing anything. `expand_triggers()` lets a rule ask for more files to be
parsed when the facts name functions defined elsewhere (the engine iterates to a fixed point).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from .types import Candidate, Invalid, Option, Valid


@dataclass
class Report:
    node: cst.CSTNode
    message: str
    hint: str | None
    data: Any


@dataclass(frozen=True)
class RuleContext:
    path: str
    options: dict[str, Any]


class Rule(cst.BatchableCSTVisitor):
    CODE: ClassVar[str] = ""
    NAME: ClassVar[str] = ""
    SUMMARY: ClassVar[str] = ""
    HINT: ClassVar[str] = ""
    # A file that contains none of these substrings cannot hold a finding of this rule and is
    # never parsed for it. Keep them conservative: tests prove prefiltering changes nothing.
    TRIGGERS: ClassVar[tuple[str, ...]] = ()
    OPTIONS: ClassVar[dict[str, Option]] = {}
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def __init__(self, context: RuleContext) -> None:
        super().__init__()
        self.context = context
        self.options = context.options
        self.reports: list[Report] = []
        self.facts: Any = None

    # -- per-file pass -------------------------------------------------------------------
    def report(
        self, node: cst.CSTNode, message: str, *, hint: str | None = None, data: Any = None
    ) -> None:
        self.reports.append(Report(node, message, hint, data))

    # -- prefilter -----------------------------------------------------------------------
    @classmethod
    def triggers(cls, options: dict[str, Any]) -> tuple[str, ...]:
        return cls.TRIGGERS

    @classmethod
    def may_apply(cls, source: bytes, options: dict[str, Any]) -> bool:
        """A cheaper-than-parsing second look at a file that passed `triggers` (bytes, with
        every line ending turned into `\\n`)."""
        return True

    @classmethod
    def fact_triggers(cls, options: dict[str, Any]) -> tuple[str, ...]:
        """Substrings of files that must be parsed for this rule's facts, not for findings."""
        return ()

    @classmethod
    def may_collect(cls, source: bytes, options: dict[str, Any]) -> bool:
        """A second look at a file that holds a fact trigger, like `may_apply`."""
        return True

    # -- cross-file pass -----------------------------------------------------------------
    @classmethod
    def expand_triggers(cls, facts: dict[str, Any], options: dict[str, Any]) -> set[str]:
        """Names whose files must also be parsed, given the facts known so far."""
        return set()

    @classmethod
    def finalize(
        cls,
        candidates: list[tuple[str, Candidate]],
        facts: dict[str, Any],
        options: dict[str, Any],
    ) -> list[tuple[str, Candidate]]:
        """Keep, drop or reword candidates now that `facts` (path -> facts) are complete."""
        return candidates

    # -- helpers ---------------------------------------------------------------------------
    @classmethod
    def default_options(cls) -> dict[str, Any]:
        return {key: opt.default for key, opt in cls.OPTIONS.items()}

    @classmethod
    def documentation(cls) -> str:
        return _dedent_doc(cls.__doc__ or "")


def _dedent_doc(doc: str) -> str:
    lines = doc.expandtabs().splitlines()
    if not lines:
        return ""
    indents = [len(l) - len(l.lstrip()) for l in lines[1:] if l.strip()]
    margin = min(indents) if indents else 0
    out = [lines[0].strip()] + [l[margin:] for l in lines[1:]]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out).strip()) + "\n"
