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

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out.get("data") is None:
            out.pop("data", None)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(**data)

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.rule, self.message)


@dataclass(frozen=True)
class FileError:
    """A file the tool could not lint. `line`/`column` are set for syntax errors."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None

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
