"""Plain data passed between the engine, the rules, the cache and the output formats."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One problem at one place. Lines and columns are 1-based."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    rule: str
    name: str
    message: str
    hint: str = ""
    # machine-readable details (JSON); e.g. `resolved_by: "short-name"` where a name was
    # matched by its spelling because nothing else resolved it
    data: Any = field(default=None, compare=False, hash=False)
    # the repair the rule knows for this finding (see `fixes`); the hint is rendered from it
    fix: Fix | None = field(default=None, compare=False, hash=False)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out.get("data") is None:
            out.pop("data", None)
        if self.fix is None:
            out.pop("fix", None)
        else:
            out["fix"] = self.fix.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        raw = dict(data)
        fix = raw.pop("fix", None)
        return cls(**raw, fix=Fix.from_dict(fix) if fix is not None else None)

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.rule, self.message)


SAFE = "safe"  # the meaning is certainly preserved or restored: `--fix` applies it
UNSAFE = "unsafe"  # a person must look: only `--fix --unsafe-fixes` applies it


@dataclass(frozen=True)
class Edit:
    """Replace the text from (line, column) up to (end_line, end_column), exclusive, by
    `content`. Lines and columns are 1-based, columns in characters, as findings count them;
    `content` ends its lines with `\n` (written with the file's own line ending)."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "location": {"line": self.line, "column": self.column},
            "end_location": {"line": self.end_line, "column": self.end_column},
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Edit:
        start, end = raw["location"], raw["end_location"]
        return cls(start["line"], start["column"], end["line"], end["column"], raw["content"])

    @property
    def start(self) -> tuple[int, int]:
        return (self.line, self.column)

    @property
    def end(self) -> tuple[int, int]:
        return (self.end_line, self.end_column)


@dataclass(frozen=True)
class Fix:
    """The repair of one finding: edits of the finding's file, applied together or not at all."""

    applicability: str  # SAFE or UNSAFE
    message: str  # what it does, one line: "Call `m.compact_topk_indices(rows)` after the switch"
    edits: tuple[Edit, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "applicability": self.applicability,
            "message": self.message,
            "edits": [e.to_dict() for e in self.edits],
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Fix:
        return cls(raw["applicability"], raw["message"], tuple(Edit.from_dict(e) for e in raw["edits"]))


@dataclass(frozen=True)
class FileError:
    """A file the tool could not lint, or not wholly. `line`/`column` are set for syntax
    errors and for a rule's internal error (the line of the definition it was checking);
    `rule` is the code of the rule that failed there, None for the file's own problems."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None
    rule: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Candidate:
    """A finding a rule produced during the per-file pass.

    `data` is JSON-serialisable and read by the rule's `finalize` after every file's facts
    are known (cross-file rules drop candidates there); `line` is the first line of the
    statement holding the node, where a suppression comment may also sit.
    """

    finding: Finding
    statement_line: int
    data: Any = None

    def to_json(self) -> list:
        return [self.finding.to_dict(), self.statement_line, self.data]

    @classmethod
    def from_json(cls, raw: list) -> Candidate:
        return cls(Finding.from_dict(raw[0]), raw[1], raw[2])


@dataclass(frozen=True)
class Option:
    """A rule option settable under `[tool.invariant-check.options.<CODE>]`.

    `minimum` bounds an int option; unset, an int option is a count (at least 0).
    """

    default: Any
    help: str
    kind: type = list  # list (of str), str, bool or int
    minimum: int | None = None

    def validate(self, key: str, value: Any) -> Any:
        got = f", got {value!r}"
        if self.kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"option {key!r} must be a list of strings{got}")
        elif self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"option {key!r} must be true or false{got}")
        elif self.kind is int:
            lowest = 0 if self.minimum is None else self.minimum
            if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
                raise ValueError(f"option {key!r} must be an integer >= {lowest}{got}")
        elif self.kind is str:
            if not isinstance(value, str):
                raise ValueError(f"option {key!r} must be a string{got}")
        elif not isinstance(value, self.kind) or isinstance(value, bool):
            raise ValueError(f"option {key!r} must be of type {self.kind.__name__}{got}")
        return value


@dataclass(frozen=True)
class Valid:
    """Code a rule must stay silent on. `files` adds other modules beside it (cross-file)."""

    code: str
    files: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Invalid:
    """Code a rule must report, at `line` (1-based, in `code`) and `column` if given."""

    code: str
    line: int
    column: int | None = None
    message_contains: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
