"""The base class every rule in `invariant_check.rules` derives from.

A rule is a query over the project model (`invariant_check.analysis`). It declares:

- `SCOPE`: what it is asked about: each `"function"` (methods, nested functions, and a
  module's top-level code as `<module>`) or each `"class"` of the linted files;
- `needs(options)`: what the text of such a definition must contain for the rule to report
  there (see `analysis.needs`); the engine's prefilter is derived from it, and the rule's
  query uses the same `Names`/`Words` objects to match names, so they cannot disagree;
- `check_function(view)` / `check_class(view)`: yields `Report`s. The view gives the parsed
  definition and the project: its classes, names resolved through imports, summaries of the
  functions it calls, control and value facts.

A rule that knows the repair of what it found also defines `fix(report, view)`, kept apart
from the detection: it returns the `Fix` (exact edits of the file, and whether they are safe)
or None. The engine asks it for every report; the finding's hint is then rendered from the
fix, so the two never disagree (see `invariant_check.fixing.fixes`).

Everything else (parsing only what is needed, positions of reported nodes, caching,
suppressions, output) is the engine's. A rule that raises is reported as an error of that
rule in that file; the other rules still report.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterator

from .types import Fix, Invalid, Option, Valid

if TYPE_CHECKING:
    from ..analysis.needs import Need
    from ..analysis.views import ClassView, FunctionView


@dataclass
class Report:
    node: ast.AST  # where the finding is: its position is the finding's
    message: str
    hint: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


class Rule:
    CODE: ClassVar[str] = ""
    NAME: ClassVar[str] = ""
    SUMMARY: ClassVar[str] = ""
    HINT: ClassVar[str] = ""
    SCOPE: ClassVar[str] = "function"  # or "class"
    OPTIONS: ClassVar[dict[str, Option]] = {}
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []
    # IC900/IC901: reported while suppressions are applied, never run on definitions
    EMITTED_BY_ENGINE: ClassVar[bool] = False

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options

    @classmethod
    def needs(cls, options: dict[str, Any]) -> "Need":
        """What a definition's text must contain for this rule to report there."""
        from ..analysis.needs import Everything

        return Everything()

    def check_function(self, view: "FunctionView") -> Iterator[Report]:
        return iter(())

    def check_class(self, view: "ClassView") -> Iterator[Report]:
        return iter(())

    def fix(self, report: Report, view: "FunctionView | ClassView") -> Fix | None:
        """The repair of a finding this rule just reported in `view`, or None when the rule
        offers none there (the hint then stays `report.hint`)."""
        return None

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
