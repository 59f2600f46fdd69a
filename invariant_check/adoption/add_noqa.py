"""`invariant-check lint --add-noqa`: a suppression comment for every finding, as ruff's
`--add-noqa` does, in this project's grammar and with a reason to fill in:

    md = builder.build(common)  # invariant-check: ignore[IC001] -- TODO: reason

- The comment goes on the finding's line. Findings of one line share one comment.
- A line that already holds one of our comments gets the codes added to it
  (`ignore[IC001]` -> `ignore[IC001, IC002]`, `# noqa: E501, IC001` -> `# noqa: E501, IC001, IC002`),
  keeping its reason; any other comment (a `# noqa: E501`, a note) stays and ours follows it.
- Findings about comments (IC900, IC901) and about baseline entries (IC902) get none: the fix is
  to the comment or the baseline, and a comment would only hide it.
- A line where a comment cannot go (one that ends inside a multi-line string or with a `\\`)
  is left alone and listed.

Running it again adds nothing: the findings are suppressed. Files are rewritten only when they
change, keeping their encoding marker and line endings.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import suppressions
from ..api.types import Finding

REASON = "-- TODO: reason"
NOT_HERE = frozenset({"IC900", "IC901", "IC902"})
_LINE = re.compile(r"([^\r\n]*)(\r\n|\r|\n|$)")


@dataclass
class Added:
    comments: int = 0  # comments written or extended
    findings: int = 0  # findings they suppress
    files: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # "path:line: why"
    left: int = 0  # findings about comments or baseline entries, left as they are


def _lines(text: str) -> list[tuple[str, str]]:
    out = [(m.group(1), m.group(2)) for m in _LINE.finditer(text)]
    if out and out[-1] == ("", ""):
        out.pop()
    return out


def _places(text: str) -> tuple[dict[int, int], set[int]]:
    """Comment columns per line, and the lines that end inside a string or with a `\\`."""
    comments: dict[int, int] = {}
    blocked: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.start[1]
            elif tok.start[0] != tok.end[0] and tok.type not in (tokenize.NL, tokenize.NEWLINE):
                blocked.update(range(tok.start[0], tok.end[0]))  # a string spanning lines
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return comments, blocked


def _extend(comment: str, line_no: int, codes: list[str]) -> str | None:
    """The comment with `codes` added to one of our well-formed suppressions in it, or None."""
    for start, d in suppressions._parse_comment(line_no, 0, comment):
        if d.problems or d.kind not in ("ignore", "noqa") or d.named is None:
            continue
        offset = comment.find(d.text, start)
        if offset < 0:
            continue
        new = [c for c in codes if not d.covers(c)]
        if not new:
            return comment
        end = offset + len(d.text)
        if d.kind == "ignore":  # `...ignore[IC001]` -> `...ignore[IC001, IC002]`
            return comment[: end - 1] + ", " + ", ".join(new) + comment[end - 1 :]
        return comment[:end] + ", " + ", ".join(new) + comment[end:]
    return None


def add_noqa(findings: Iterable[Finding], cwd: Path) -> Added:
    result = Added()
    by_file: dict[str, dict[int, list[str]]] = {}
    for f in findings:
        if f.rule in NOT_HERE:
            result.left += 1
            continue
        by_file.setdefault(f.path, {}).setdefault(f.line, []).append(f.rule)
    for shown, wanted in sorted(by_file.items()):
        path = Path(os.path.abspath(cwd / shown))
        try:
            data = path.read_bytes()
        except OSError as exc:
            result.skipped.append(f"{shown}: cannot read: {exc.strerror or exc}")
            continue
        bom = data.startswith(b"\xef\xbb\xbf")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            result.skipped.append(f"{shown}: not UTF-8: left as it is")
            continue
        lines = _lines(text)
        comments, blocked = _places(text.replace("\r\n", "\n").replace("\r", "\n"))
        changed = False
        for line_no, rules in sorted(wanted.items()):
            codes = sorted(set(rules))
            if not 0 < line_no <= len(lines):
                continue
            body, ending = lines[line_no - 1]
            col = comments.get(line_no)
            if col is None and (line_no in blocked or body.rstrip().endswith("\\")):
                result.skipped.append(f"{shown}:{line_no}: no comment can go on this line "
                                      f"(it ends inside a string or with a backslash); {', '.join(codes)} stays")
                continue
            if col is not None:
                comment = body[col:]
                extended = _extend(comment, line_no, codes)
                if extended == comment:
                    continue
                new_body = body[:col] + extended if extended is not None else (
                    body.rstrip() + f"  # invariant-check: ignore[{', '.join(codes)}] {REASON}")
            else:
                new_body = body.rstrip() + f"  # invariant-check: ignore[{', '.join(codes)}] {REASON}"
            lines[line_no - 1] = (new_body, ending)
            result.comments += 1
            result.findings += len(rules)
            changed = True
        if changed:
            out = "".join(b + e for b, e in lines)
            try:
                tmp = path.with_name(f".{path.name}.invariant-check-tmp")
                tmp.write_bytes((b"\xef\xbb\xbf" if bom else b"") + out.encode("utf-8"))
                shutil.copymode(path, tmp)
                os.replace(tmp, path)
            except OSError as exc:
                result.skipped.append(f"{shown}: cannot write: {exc.strerror or exc}")
                continue
            result.files.append(shown)
    return result
