"""`lint --fix` and `lint --diff`: the fixes the findings carry, applied only once verified.

A finding carries its `Fix` from the lint itself (exact edits computed with the stdlib, see
`invariant_check.api.edits`; its hint is rendered from it). Fixing runs in passes, as ruff does:

1. lint (the files changed so far are given to the engine as sources, nothing is written yet);
2. take the findings whose fix is wanted (`safe`; `unsafe` too with `--unsafe-fixes`), per file
   in order of position; a fix whose edits overlap one taken before it waits for the next pass;
3. add them to the file one by one: the text must still parse with libcst, losslessly, with
   every edit on syntax-node boundaries of the file (libcst is imported here, and only here),
   and compile; a fix that fails is dropped with a note;
4. lint again: a fixed finding still reported where its fix moved it is a fix that does not
   fix; it is undone and dropped with a note.

Passes stop when no wanted fix is left (the result is then the last lint: fixed findings are
not reported as open), or after `MAX_PASSES`. Files are written only at the end, and only with
`--fix`; `--diff` prints what would be written.
"""

from __future__ import annotations

import codecs
import difflib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..api.edits import apply_to_text, fixes_overlap
from ..api.types import SAFE, UNSAFE, Edit, Finding, Fix

MAX_PASSES = 10

_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)
_NEWLINE = re.compile(rb"\r\n|\r|\n")


class FixError(Exception):
    """Fixing cannot run at all (libcst missing)."""


@dataclass
class FixOutcome:
    result: object  # the last lint (RunResult): what is left
    originals: dict[Path, bytes] = field(default_factory=dict)  # files as they were
    fixed: dict[Path, bytes] = field(default_factory=dict)  # what they become
    applied: list[Finding] = field(default_factory=list)  # findings fixed (as first reported)
    notes: list[str] = field(default_factory=list)  # fixes dropped, and why
    unsafe_left: int = 0  # findings left whose unsafe fix was not asked for
    passes: int = 0

    @property
    def changed(self) -> list[Path]:
        return [p for p in self.fixed if self.fixed[p] != self.originals.get(p)]


def wanted(fix: Fix | None, unsafe: bool) -> bool:
    return fix is not None and (fix.applicability == SAFE or (unsafe and fix.applicability == UNSAFE))


def run_fixes(
    first,
    relint: Callable[[dict[Path, bytes]], object],
    *,
    unsafe: bool,
    cwd: Path,
    read: Callable[[Path], bytes] | None = None,
    max_passes: int = MAX_PASSES,
) -> FixOutcome:
    """`first`: the lint as run (a RunResult); `relint(sources)` lints again with those
    files' bytes instead of the disk's. Returns what the files become; writes nothing."""
    _require_libcst()
    read = read or _read
    out = FixOutcome(first)
    current: dict[Path, bytes] = {}
    dropped: set[tuple] = set()
    result = first
    for _ in range(max_passes):
        todo = [f for f in result.findings if wanted(f.fix, unsafe) and _key(f) not in dropped]
        if not todo:
            break
        out.passes += 1
        by_file: dict[Path, list[Finding]] = {}
        for f in todo:
            by_file.setdefault(_absolute(f.path, cwd), []).append(f)
        before_pass = dict(current)
        taken: dict[Path, list[Finding]] = {}
        for path, findings in by_file.items():
            if path not in current:
                try:
                    current[path] = read(path)
                except OSError as exc:
                    out.notes.append(f"{findings[0].path}: cannot read for fixing: {exc.strerror or exc}")
                    continue
                out.originals.setdefault(path, current[path])
            data, kept = _apply_file(path, current[path], findings, out.notes, dropped)
            if kept:
                current[path] = data
                taken[path] = kept
        if not taken:
            break
        result = relint(dict(current))
        # a fix whose finding is still there did not fix it: undo it, note it, lint again
        failed = _not_fixed(result, taken, cwd)
        while failed:
            for path, bad in failed.items():
                for f in bad:
                    dropped.add(_key(f))
                    out.notes.append(f"{_where(f)}: {f.rule} fix dropped: the finding is still reported after it")
                keep = [f for f in taken[path] if f not in bad]
                base = before_pass.get(path) if path in before_pass else out.originals[path]
                current[path] = apply_edits(base, [e for f in keep for e in f.fix.edits]) if keep else base
                taken[path] = keep
            result = relint(dict(current))
            failed = _not_fixed(result, {p: fs for p, fs in taken.items() if fs}, cwd)
        for fs in taken.values():
            out.applied.extend(fs)
    else:
        if any(wanted(f.fix, unsafe) and _key(f) not in dropped for f in result.findings):
            out.notes.append(f"fixes did not converge after {max_passes} passes; what is left is reported")
    out.result = result
    out.fixed = current
    out.unsafe_left = 0 if unsafe else sum(1 for f in result.findings if f.fix is not None and f.fix.applicability == UNSAFE)
    return out


# -- one file -------------------------------------------------------------------------------------


def _apply_file(path: Path, data: bytes, findings: list[Finding], notes: list[str], dropped: set) -> tuple[bytes, list[Finding]]:
    """The file with as many of the findings' fixes as verify, in order of position."""
    boundaries = Boundaries.of(data)
    if boundaries is None:
        for f in findings:
            notes.append(f"{_where(f)}: {f.rule} fix dropped: libcst cannot parse the file")
            dropped.add(_key(f))
        return data, []
    kept: list[Finding] = []
    text_now = data
    for f in sorted(findings, key=lambda f: (min(e.start for e in f.fix.edits), f.rule)):
        if any(fixes_overlap(f.fix, k.fix) for k in kept):
            continue  # ruff's rule: the later one waits for the next pass
        bad = boundaries.off(f.fix.edits)
        if bad is not None:
            notes.append(f"{_where(f)}: {f.rule} fix dropped: an edit at {bad[0]}:{bad[1]} is not on a syntax boundary")
            dropped.add(_key(f))
            continue
        trial = apply_edits(data, [e for k in kept + [f] for e in k.fix.edits])
        why = check_source(trial, f.path)
        if why is not None:
            notes.append(f"{_where(f)}: {f.rule} fix dropped: the fixed file {why}")
            dropped.add(_key(f))
            continue
        kept.append(f)
        text_now = trial
    return text_now, kept


def check_source(data: bytes, name: str) -> str | None:
    """Why fixed bytes may not be written (None: they may): they must compile, and libcst must
    parse them and give them back byte for byte."""
    try:
        compile(data, name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"would not compile ({exc.msg}, line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"would not compile ({type(exc).__name__})"
    import libcst

    try:
        module = libcst.parse_module(data)
    except Exception as exc:  # libcst's ParserSyntaxError, or an encoding it does not know
        return f"would not parse with libcst ({type(exc).__name__})"
    if module.bytes != data:
        return "would not round-trip through libcst"
    return None


class Boundaries:
    """Where an edit of a file may start or end: where some libcst node of the file starts
    or ends, or at the start of a line that no string or comment spans."""

    def __init__(self, points: set[tuple[int, int]], opaque: list[tuple[tuple[int, int], tuple[int, int]]]) -> None:
        self.points = points
        self.opaque = opaque

    @classmethod
    def of(cls, data: bytes) -> "Boundaries | None":
        import libcst
        from libcst.metadata import MetadataWrapper, PositionProvider, WhitespaceInclusivePositionProvider

        try:
            wrapper = MetadataWrapper(libcst.parse_module(data), unsafe_skip_copy=True)
            tight = wrapper.resolve(PositionProvider)
            wide = wrapper.resolve(WhitespaceInclusivePositionProvider)
        except Exception:
            return None
        points: set[tuple[int, int]] = set()
        opaque = []
        for positions in (tight, wide):
            for node, rng in positions.items():
                points.add((rng.start.line, rng.start.column))
                points.add((rng.end.line, rng.end.column))
                if positions is tight and isinstance(node, (libcst.SimpleString, libcst.FormattedString, libcst.Comment, libcst.ConcatenatedString)):
                    opaque.append(((rng.start.line, rng.start.column), (rng.end.line, rng.end.column)))
        return cls(points, opaque)

    def ok(self, line: int, column: int) -> bool:
        at = (line, column - 1)  # libcst columns are 0-based
        if at in self.points:
            return True
        if column != 1:
            return False
        return not any(a < at < b for a, b in self.opaque)

    def off(self, edits) -> tuple[int, int] | None:
        """The first edit position that is not a boundary, or None."""
        for e in edits:
            for line, col in (e.start, e.end):
                if not self.ok(line, col):
                    return line, col
        return None


# -- bytes ----------------------------------------------------------------------------------------


def apply_edits(data: bytes, edits: list[Edit]) -> bytes:
    """The bytes with the edits made, in the file's encoding and with its line ending."""
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[3:] if bom else data
    encoding = "utf-8"
    if not bom:
        for line in body.split(b"\n", 2)[:2]:
            m = _COOKIE.match(line)
            if m:
                encoding = m.group(1).decode("ascii", "replace")
                break
            if line.strip() and not line.lstrip().startswith(b"#"):
                break
    text = body.decode(encoding)
    m = _NEWLINE.search(body)
    newline = m.group(0).decode("ascii") if m else "\n"
    out = apply_to_text(text, edits, newline).encode(encoding)
    return (codecs.BOM_UTF8 if bom else b"") + out


def _not_fixed(result, taken: dict[Path, list[Finding]], cwd: Path) -> dict[Path, list[Finding]]:
    """The fixes of this pass whose finding the new lint still reports where it moved."""
    now: dict[Path, set[tuple[str, int, str]]] = {}
    for f in result.findings:
        now.setdefault(_absolute(f.path, cwd), set()).add((f.rule, f.line, _gist(f.message)))
    failed: dict[Path, list[Finding]] = {}
    for path, fs in taken.items():
        edits = [e for f in fs for e in f.fix.edits]
        for f in fs:
            if (f.rule, moved_line(f.line, f.column, edits), _gist(f.message)) in now.get(path, ()):
                failed.setdefault(path, []).append(f)
    return failed


def _gist(message: str) -> str:
    """A finding's message without its numbers (line numbers in it move with the edits): two
    findings of one rule on one line are told apart by what they say."""
    return re.sub(r"\d+", "#", message)


def moved_line(line: int, column: int, edits: list[Edit]) -> int:
    """Where a position's line is after the edits (edits after it do not move it)."""
    delta = 0
    for e in edits:
        if e.end <= (line, column) and e.start != (line, column):
            delta += e.content.count("\n") - (e.end_line - e.line)
    return line + delta


# -- output ----------------------------------------------------------------------------------------


def report_fixes(out: FixOutcome, *, diff: bool, stdin: Path | None, cwd: Path) -> None:
    """`--diff`: the diff of every changed file on stdout. `--fix`: the changed files written
    (standard input's buffer is printed instead, by the caller); a file that cannot be written
    is an error of that file."""
    import click

    from ..lint.discovery import display_path
    from ..api.types import FileError

    for path in sorted(out.changed):
        shown = display_path(path, cwd)
        if diff:
            click.echo(unified_diff(shown, out.originals[path], out.fixed[path]), nl=False)
        elif path != stdin:
            try:
                write_atomically(path, out.fixed[path])
            except OSError as exc:
                out.result.errors.append(FileError(shown, f"cannot write the fixed file: {exc.strerror or exc}"))


def unified_diff(shown: str, before: bytes, after: bytes) -> str:
    a = before.decode("utf-8", "replace").splitlines(keepends=True)
    b = after.decode("utf-8", "replace").splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, fromfile=f"a/{shown}", tofile=f"b/{shown}")
    out = []
    for line in lines:
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace the file's bytes in one step, keeping its permissions."""
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".ic-fix", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def example_fix(rule) -> str | None:
    """The diff a rule's fix makes on the first of its INVALID examples that gets one (for
    `explain`), or None. Runs the real engine on the example; imports no libcst."""
    import tempfile as tf

    from ..testing import EXAMPLE_FILE, run_example

    for example in rule.INVALID:
        with tf.TemporaryDirectory(prefix="ic-explain-") as tmp:
            try:
                findings = run_example(rule, example, Path(tmp))
            except Exception:
                continue
            for f in findings:
                if f.fix is None:
                    continue
                before = (Path(tmp) / EXAMPLE_FILE).read_bytes()
                after = apply_edits(before, list(f.fix.edits))
                how = "Safe: `--fix`" if f.fix.applicability == SAFE else "Unsafe: `--fix --unsafe-fixes`"
                # the message first in the block: it quotes code, which a terminal cannot wrap
                return f"{how} writes it.\n\n```diff\n{f.fix.message}\n\n" + unified_diff(EXAMPLE_FILE, before, after) + "```\n"
    return None


# -- small helpers ------------------------------------------------------------------------------


def _require_libcst() -> None:
    try:
        import libcst  # noqa: F401
    except ImportError as exc:
        raise FixError(f"--fix and --diff need libcst ({exc}); install it: pip install libcst") from None


def _read(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _absolute(shown: str, cwd: Path) -> Path:
    return Path(os.path.abspath(cwd / shown))


def _key(f: Finding) -> tuple:
    return (f.path, f.rule, f.message, f.fix.message if f.fix else None)


def _where(f: Finding) -> str:
    return f"{f.path}:{f.line}:{f.column}"
