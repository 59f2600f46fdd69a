"""What a run reports once the rules have spoken: per-file-ignores, suppression comments, and
the findings about the comments themselves (IC900 unused, IC901 invalid).

    finalize(candidates, files, *, enabled, per_file_ignores=None, root=None) -> Finalized

- `candidates`: the `(shown path, Candidate)` pairs the rules kept after their cross-file pass.
  `Candidate.statement_line` is the other line (besides the finding's own) where a comment
  suppresses it.
- `files`: one `SourceFile` for every file of the run that was read, parsed or not: a file the
  prefilter never parsed can still hold an unused or invalid comment.
- `enabled`: the codes on in this run, the analysis rules and the engine-emitted ones. IC900
  in it reports unused suppressions, IC901 invalid ones; a comment naming a rule that is not
  enabled is never "unused" (a full run may need it).
- `per_file_ignores`: `{glob: [codes]}`, globs relative to `root` (the configuration's
  folder), in the dialect of `globs.py`. They apply to every finding, IC900/IC901 included.

Returns `Finalized(findings, suppression_findings)`, each sorted by `Finding.sort_key`. Reads a
file only when `has_marker` is set and `source` is None; an unreadable file suppresses nothing
and reports nothing. Never raises on file contents.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

from ..adoption import suppressions
from ..globs import PathGlobs
from ..api.types import Candidate, Finding

UNUSED = ("IC900", "unused-suppression")
INVALID = ("IC901", "invalid-suppression")
SUPPRESSION_CODES = frozenset({UNUSED[0], INVALID[0]})



@dataclass(frozen=True)
class SourceFile:
    path: Path  # absolute
    shown: str  # the path findings carry
    has_marker: bool  # suppressions.has_marker(bytes): False means no comment to read
    parsed: bool = True  # False: the file could not be parsed; its comments had no chance
    source: bytes | None = None  # the bytes linted, when they are not the file's (stdin)


@dataclass
class Finalized:
    findings: list[Finding] = field(default_factory=list)
    suppression_findings: list[Finding] = field(default_factory=list)


class PerFileIgnores:
    """`per-file-ignores`: glob -> codes, the globs relative to the configuration's folder."""

    def __init__(self, table: Mapping[str, Sequence[str]], root: Path | str) -> None:
        self._rules = [(PathGlobs([glob], root), frozenset(codes)) for glob, codes in table.items()]
        self._memo: dict[str, frozenset[str]] = {}

    def __bool__(self) -> bool:
        return bool(self._rules)

    def codes_for(self, path: Path | str) -> frozenset[str]:
        key = str(path)
        if key not in self._memo:
            out: set[str] = set()
            for globs, codes in self._rules:
                if globs.match_tree(key, False):
                    out |= codes
            self._memo[key] = frozenset(out)
        return self._memo[key]


def finalize(
    candidates: Iterable[tuple[str, Candidate]],
    files: Iterable[SourceFile],
    *,
    enabled: Collection[str],
    per_file_ignores: Mapping[str, Sequence[str]] | PerFileIgnores | None = None,
    root: Path | str | None = None,
) -> Finalized:
    by_shown = {f.shown: f for f in files}
    enabled = frozenset(enabled)
    if per_file_ignores is None or isinstance(per_file_ignores, PerFileIgnores):
        pfi = per_file_ignores
    else:
        pfi = PerFileIgnores(per_file_ignores, root if root is not None else os.getcwd())
    parsed: dict[str, suppressions.FileSuppressions] = {}

    raw: dict[str, bytes] = {}  # the bytes read, for the fixes of IC900

    def comments(shown: str) -> suppressions.FileSuppressions:
        if shown not in parsed:
            f = by_shown.get(shown)
            data = None
            if f is not None and f.has_marker:
                data = f.source if f.source is not None else _read(f.path)
            raw[shown] = data or b""
            parsed[shown] = suppressions.parse(data or b"")
        return parsed[shown]

    def ignored(shown: str, code: str) -> bool:
        f = by_shown.get(shown)
        return bool(pfi) and f is not None and code in pfi.codes_for(f.path)

    out = Finalized()
    for shown, cand in candidates:
        f = cand.finding
        if ignored(shown, f.rule):
            continue
        source = by_shown.get(shown)
        if source is not None and source.has_marker and comments(shown).match(f.rule, (f.line, cand.statement_line)):
            continue
        out.findings.append(f)

    want_unused, want_invalid = UNUSED[0] in enabled, INVALID[0] in enabled
    if want_unused or want_invalid:
        analysis = enabled - SUPPRESSION_CODES
        for source in by_shown.values():
            if not source.has_marker:
                continue
            sups = comments(source.shown)
            if sups.skip_file:
                continue  # a skipped file reports nothing, not even about its comments
            for found in _about_comments(source, sups, analysis, want_unused and source.parsed, want_invalid, raw.get(source.shown, b"")):
                if ignored(source.shown, found.rule):
                    continue
                # only a comment that names IC900/IC901 itself quiets them: a bare `ignore`
                # would otherwise silence its own "unused" report
                if any(d.names_explicitly(found.rule) for d in sups.by_line.get(found.line, ())):
                    continue
                out.suppression_findings.append(found)
    out.findings.sort(key=Finding.sort_key)
    out.suppression_findings.sort(key=Finding.sort_key)
    return out


def _about_comments(source: SourceFile, sups, analysis: frozenset[str], unused: bool, invalid: bool, data: bytes = b""):
    text: list[str] = []  # decoded once, for the fixes

    def unused_fix(d, idle):
        if not text:
            text.append(_text(data))
        return _unused_fix(d, idle, text[0])

    for d in sups.all():
        if invalid and d.problems:
            scope = "that part suppresses nothing" if d.named else "the comment suppresses nothing"
            problems = "; ".join(_capital(p) for p in d.problems)
            # the hint is the comment as it should be written, when that can be told
            spelt = f"Write `{d.spelling}`." if d.spelling else None
            yield _finding(source.shown, d, INVALID, f"{problems} in `{d.text}`: {scope}", spelt)
        if not unused or d.kind not in ("ignore", "noqa"):
            continue
        if d.named is None:
            if not d.used:
                fix = unused_fix(d, None)
                yield _finding(source.shown, d, UNUSED, f"Unused suppression: `{d.text}` suppresses nothing on this line", fix=fix, text=text)
            continue
        idle = [(token, code) for token, code in d.named if code in analysis and code not in d.used_codes]
        if idle:
            names = ", ".join(f"`{t}`" if t.upper() == c else f"`{t}` ({c})" for t, c in idle)
            verb = "suppresses" if len(idle) == 1 else "suppress"
            fix = unused_fix(d, {code for _, code in idle})
            yield _finding(source.shown, d, UNUSED, f"Unused suppression: {names} in `{d.text}` {verb} nothing on this line", fix=fix, text=text)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _finding(shown: str, d, rule: tuple[str, str], message: str, hint: str | None = None, fix=None, text: list[str] | None = None) -> Finding:
    from ..api.registry import (
        all_rules,  # the rule modules hold the one wording of the hints
    )

    hint = hint or all_rules()[rule[0]].HINT
    if fix is not None:
        from ..analysis.source import Source
        from ..api.edits import render_hint

        hint = render_hint(fix, Source(shown, text[0]))  # the hint is the fix
    return Finding(shown, d.line, d.column, d.line, d.column + len(d.text), rule[0], rule[1], message, hint, fix=fix)


def _text(data: bytes) -> str:
    from ..analysis.source import DecodeError, decode

    try:
        return decode(data)
    except DecodeError:
        return ""


def _unused_fix(d, idle, text: str):
    """IC900's fix (safe): the unused suppression, or its unused codes, removed."""
    if not text:
        return None
    from ..rules._fixes import ic900

    try:
        fix = ic900.build(d, idle, text)
    except Exception:  # a fix that cannot be built leaves the finding as it is
        return None
    return fix


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None
