"""Baseline files: the findings a tree already had when it adopted invariant-check.

    invariant-check lint --write-baseline ic-baseline.json .   # record today's findings
    invariant-check lint --baseline ic-baseline.json .         # report only the others

A finding is matched by its fingerprint, not its line: the file (relative to the baseline's
folder), the rule, the qualified name of the function or class it is in (`<module>` for top-level
code), and the text of the flagged statement with comments and layout taken out (for a `def`,
`class`, `for`, `if`... flagged on its header, the header only). Edits above a finding, a
reformat, or a suppression comment added elsewhere keep it matched; renaming the function or
changing the statement does not. An entry has a count: the same fingerprint twice needs two
entries' worth, and a third occurrence is reported.

An entry that matches nothing any more is reported as IC902 (`unused-baseline-entry`) at its line
in the baseline file, the way IC900 reports an unused suppression, but only for entries within
the run's reach: their file was linted (or lies, missing, under a folder that was) and their rule
was on. So a pre-commit batch reports nothing about the entries of other files.

The file is JSON, `{"version": 1, ..., "entries": [...]}`, one entry per line, sorted by path,
rule, function and statement, so that a change to it reads well in review. Writing a baseline
over an existing one keeps the entries outside the run's reach.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..api.types import Finding

VERSION = 1
UNUSED = ("IC902", "unused-baseline-entry")
MODULE = "<module>"
ABOUT = (
    "Findings accepted when this file was written. `invariant-check lint --baseline FILE` reports "
    "only the others; `invariant-check lint --write-baseline FILE` rewrites it."
)


class BaselineError(Exception):
    """A baseline file that cannot be read; the message is one line naming the file."""


@dataclass(frozen=True, order=True)
class Key:
    path: str  # relative to the baseline's folder, with `/`
    rule: str
    function: str
    statement: str

    def to_json(self, count: int) -> dict:
        return {"path": self.path, "rule": self.rule, "function": self.function,
                "statement": self.statement, "count": count}


@dataclass
class Baseline:
    path: Path  # absolute
    counts: Counter = field(default_factory=Counter)  # Key -> count
    lines: dict = field(default_factory=dict)  # Key -> its line in the file

    @property
    def folder(self) -> Path:
        return self.path.parent


# -- fingerprints ----------------------------------------------------------------------------------

_LINE_END = re.compile(r"\r\n|\r|\n")
_PUNCT = re.compile(r" ?([()\[\]{},:.;=+\-*/%<>!&|^~@]) ?")


def normalize(text: str) -> str:
    """Layout out of a statement's text: line continuations, runs of spaces, spaces around
    punctuation, trailing commas before a closing bracket."""
    text = re.sub(r"\\\n", " ", text)
    text = re.sub(r"\s+", " ", text).strip()
    text = _PUNCT.sub(r"\1", text)
    return re.sub(r",([)\]}])", r"\1", text)


class SourceFacts:
    """What fingerprints need of one file: its lines, comments and statements (parsed once)."""

    def __init__(self, text: str) -> None:
        text = text.lstrip("\ufeff")
        self.lines = _LINE_END.split(text)
        joined = "\n".join(self.lines)
        self.comments: dict[int, int] = {}  # line -> column (0-based, characters) of its comment
        try:
            for tok in tokenize.generate_tokens(io.StringIO(joined).readline):
                if tok.type == tokenize.COMMENT:
                    self.comments[tok.start[0]] = tok.start[1]
        except (tokenize.TokenError, IndentationError, SyntaxError):
            pass
        try:
            self.tree: ast.Module | None = ast.parse(joined)
        except (SyntaxError, ValueError):
            self.tree = None
        self.defs: list[tuple[int, int, str]] = []  # (first line, last line, qualified name)
        self.stmts: list[tuple[tuple[int, int], tuple[int, int], ast.stmt]] = []
        if self.tree is not None:
            self._walk(self.tree, [])

    def _col(self, line: int, byte_col: int) -> int:
        raw = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return len(raw.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))

    def _walk(self, node: ast.AST, names: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                first = min([child.lineno, *(d.lineno for d in getattr(child, "decorator_list", []))])
                start = (child.lineno, self._col(child.lineno, child.col_offset))
                if first != child.lineno:
                    start = (first, 0)
                end = (child.end_lineno or child.lineno, self._col(child.end_lineno or child.lineno, child.end_col_offset or 0))
                self.stmts.append((start, end, child))
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qual = [*names, child.name]
                    self.defs.append((first, end[0], ".".join(qual)))
                    self._walk(child, qual)
                    continue
            self._walk(child, names)

    def function(self, line: int) -> str:
        best = None
        for first, last, qual in self.defs:
            if first <= line <= last and (best is None or first >= best[0]):
                best = (first, qual)
        return best[1] if best else MODULE

    def _segment(self, start: tuple[int, int], end: tuple[int, int]) -> str:
        parts = []
        for line in range(start[0], end[0] + 1):
            raw = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
            lo = start[1] if line == start[0] else 0
            hi = end[1] if line == end[0] else len(raw)
            comment = self.comments.get(line)
            if comment is not None and comment >= lo:
                hi = min(hi, comment)
            parts.append(raw[lo:hi])
        return "\n".join(parts)

    def statement(self, line: int, column: int) -> str:
        """The normalized text of the innermost statement at (line, 1-based column); its header
        for a compound statement flagged on its header; the comment for a finding on a comment."""
        col = column - 1
        comment = self.comments.get(line)
        if comment is not None and col >= comment:
            raw = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
            return " ".join(raw[comment:].split())
        pos = (line, col)
        best = None
        for start, end, node in self.stmts:
            if start <= pos <= end and (best is None or start >= best[0]):
                best = (start, end, node)
        if best is None:  # past the end of a statement on its line, or not parsed
            for start, end, node in self.stmts:
                if start[0] <= line <= end[0] and (best is None or start >= best[0]):
                    best = (start, end, node)
        if best is None:
            raw = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
            return normalize(raw[:comment] if comment is not None else raw)
        start, end, node = best
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            head_start = (node.lineno, self._col(node.lineno, node.col_offset))
            first = body[0]
            body_start = (first.lineno, self._col(first.lineno, first.col_offset))
            if pos < body_start:
                return normalize(self._segment(head_start, body_start))
        return normalize(self._segment(start, end))


class Fingerprints:
    """Keys of findings, reading each file once (`sources`: shown path -> bytes linted instead
    of the file, for standard input)."""

    def __init__(self, cwd: Path, sources: dict[str, bytes] | None = None) -> None:
        self.cwd = cwd
        self.sources = sources or {}
        self._facts: dict[str, SourceFacts | None] = {}

    def absolute(self, shown: str) -> Path:
        return Path(os.path.abspath(self.cwd / shown))

    def facts(self, shown: str) -> SourceFacts | None:
        if shown not in self._facts:
            data = self.sources.get(shown)
            if data is None:
                try:
                    data = self.absolute(shown).read_bytes()
                except OSError:
                    data = None
            self._facts[shown] = SourceFacts(data.decode("utf-8", errors="replace")) if data is not None else None
        return self._facts[shown]

    def key(self, finding: Finding, folder: Path) -> Key:
        rel = Path(os.path.relpath(self.absolute(finding.path), folder)).as_posix()
        facts = self.facts(finding.path)
        if facts is None:
            return Key(rel, finding.rule, MODULE, "")
        return Key(rel, finding.rule, facts.function(finding.line), facts.statement(finding.line, finding.column))


# -- the file ---------------------------------------------------------------------------------------


def load(path: Path, shown: str | None = None) -> Baseline:
    """`shown`: how messages name the file (relative to the current folder when under it)."""
    shown = shown or str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BaselineError(f"{shown}: baseline file not found (write one with `invariant-check lint --write-baseline {shown}`)") from None
    except OSError as exc:
        raise BaselineError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BaselineError(f"{shown}: not a baseline file: invalid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise BaselineError(f"{shown}: not a baseline file: expected an object with \"version\" and \"entries\"")
    if doc.get("version") != VERSION:
        raise BaselineError(f"{shown}: baseline version {doc.get('version')!r} is not supported (this invariant-check writes version {VERSION})")
    base = Baseline(Path(os.path.abspath(path)))
    for i, entry in enumerate(doc["entries"]):
        fields = ("path", "rule", "function", "statement")
        if (not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in fields)
                or not isinstance(entry.get("count", 1), int) or isinstance(entry.get("count", 1), bool)
                or entry.get("count", 1) < 1):
            raise BaselineError(f"{shown}: entry {i + 1} is not {{\"path\", \"rule\", \"function\", \"statement\": strings, \"count\": an integer >= 1}}")
        base.counts[Key(*(entry[k] for k in fields))] += entry.get("count", 1)
    base.lines = _entry_lines(raw.decode("utf-8-sig"))
    return base


def _entry_lines(text: str) -> dict[Key, int]:
    """The line of each entry, for the entries written one per line (as `write` does)."""
    found: dict[Key, int] = {}
    for number, line in enumerate(_LINE_END.split(text), 1):
        body = line.strip().rstrip(",")
        if not body.startswith("{") or '"statement"' not in body:
            continue
        try:
            entry = json.loads(body)
            key = Key(entry["path"], entry["rule"], entry["function"], entry["statement"])
        except (ValueError, KeyError, TypeError):
            continue
        found.setdefault(key, number)
    return found


def render(counts: Counter) -> str:
    lines = ["{", f'  "version": {VERSION},', '  "tool": "invariant-check",', f"  \"about\": {json.dumps(ABOUT)},"]
    keys = sorted(k for k, n in counts.items() if n > 0)
    if not keys:
        lines.append('  "entries": []')
    else:
        lines.append('  "entries": [')
        for i, key in enumerate(keys):
            comma = "," if i < len(keys) - 1 else ""
            lines.append(f"    {json.dumps(key.to_json(counts[key]), ensure_ascii=False)}{comma}")
        lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- what a run reaches -------------------------------------------------------------------------------


@dataclass
class Scope:
    """The files a run linted, the folders it walked, and the rules it ran: what a baseline entry
    must fall within to be reported as unused (or replaced when writing)."""

    files: set  # absolute paths (str)
    folders: list  # absolute folder paths (str) given on the command line
    rules: set  # codes enabled in the run

    def reaches(self, key: Key, folder: Path) -> bool:
        if key.rule not in self.rules:
            return False
        path = os.path.abspath(folder / key.path)
        if path in self.files:
            return True
        if os.path.exists(path):
            return False  # a file of the tree this run did not lint (a pre-commit batch)
        return any(path.startswith(f.rstrip(os.sep) + os.sep) for f in self.folders)


# -- applying ---------------------------------------------------------------------------------------------


@dataclass
class Applied:
    findings: list  # the findings not in the baseline, and the unused entries (IC902)
    matched: int  # findings the baseline absorbed


def apply(findings: Iterable[Finding], baseline: Baseline, prints: Fingerprints, scope: Scope,
          shown_baseline: str, report_unused: bool) -> Applied:
    by_key: dict[Key, list[Finding]] = {}
    for f in findings:
        by_key.setdefault(prints.key(f, baseline.folder), []).append(f)
    kept: list[Finding] = []
    matched = 0
    for key, group in by_key.items():
        allowed = baseline.counts.get(key, 0)
        group.sort(key=Finding.sort_key)
        matched += min(allowed, len(group))
        kept.extend(group[allowed:])
    if report_unused:
        for key, count in sorted(baseline.counts.items()):
            found = len(by_key.get(key, ()))
            if found >= count or not scope.reaches(key, baseline.folder):
                continue
            kept.append(_unused(key, count, found, baseline, shown_baseline))
    kept.sort(key=Finding.sort_key)
    return Applied(kept, matched)


def _unused(key: Key, count: int, found: int, baseline: Baseline, shown: str) -> Finding:
    from ..api.registry import all_rules

    line = baseline.lines.get(key, 1)
    how_many = "" if count == 1 else f" ({count - found} of {count} no longer found)"
    where = key.function if key.function != MODULE else "top-level code"
    message = (f"Unused baseline entry: {key.rule} in `{where}` of {key.path} at "
               f"`{key.statement}` matches no finding{how_many}")
    width = 1
    try:
        text = _LINE_END.split(baseline.path.read_text(encoding="utf-8-sig"))
        width = len(text[line - 1].rstrip()) + 1 if 0 < line <= len(text) else 1
    except OSError:
        pass
    return Finding(shown, line, 1, line, max(width, 2), UNUSED[0], UNUSED[1], message,
                   all_rules()[UNUSED[0]].HINT.format(baseline=_shell_word(shown)),
                   data={"entry": key.to_json(count), "found": found})


def _shell_word(text: str) -> str:
    """`text` as one word of a shell command (quoted only when it needs it)."""
    import shlex

    return shlex.quote(text)


def keys_of(findings: Iterable[Finding], prints: Fingerprints, folder: Path) -> Counter:
    counts: Counter = Counter()
    for f in findings:
        if f.rule != UNUSED[0]:
            counts[prints.key(f, folder)] += 1
    return counts


def merged_for_writing(new: Counter, old: Baseline | None, scope: Scope) -> Counter:
    """The entries to write: this run's, and the old file's entries outside the run's reach."""
    out = Counter(new)
    if old is not None:
        for key, count in old.counts.items():
            if not scope.reaches(key, old.folder):
                out[key] += count
    return out
