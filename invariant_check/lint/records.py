"""The typed records the engine's stages pass on: scan -> analyse (parse, facts, rules) ->
finalize -> report. Each is plain data; the cache stores their JSON form (see `cache`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..api.types import Candidate, FileError


@dataclass
class ScanRecord:
    """Stage 1, per file: what its bytes are and which rules could report in it."""

    path: Path  # absolute
    shown: str  # as findings name it
    digest: str | None = None
    has_marker: bool = False  # holds `invariant-check:` or `noqa`: comments to read later
    skip: bool = False  # `# invariant-check: skip-file`
    rules: tuple[str, ...] = ()  # rules whose needs the file's bytes may meet
    given: bool = False  # the bytes came with the call (stdin): nothing cached for it
    error: FileError | None = None


@dataclass
class Outcome:
    """Stages 2-4, per file: the rules' findings, the errors, and what the answer depended on."""

    candidates: list[Candidate] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    deps: list[list[Any]] = field(default_factory=list)  # ["file", path, digest] | ["exists", path, bool] | ["word", w, paths]
    parsed: bool = True  # False when the file could not be parsed (its comments had no chance)

    def to_json(self) -> dict[str, Any]:
        return {
            "candidates": [c.to_json() for c in self.candidates],
            "errors": [e.to_dict() for e in self.errors],
            "deps": self.deps,
            "parsed": self.parsed,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Outcome:
        return cls(
            [Candidate.from_json(c) for c in raw["candidates"]],
            [FileError(**e) for e in raw["errors"]],
            [list(d) for d in raw["deps"]],
            bool(raw["parsed"]),
        )
