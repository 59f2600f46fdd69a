"""Stages 2-4 for one file: pick the definitions each rule needs (from the outline, without
parsing), parse those, run the rules over the project model, turn reports into candidates.

Never raises: a file that cannot be decoded or parsed is an error of that file. A rule that
raises while checking a definition is an error of that rule at that definition's line (its
traceback on stderr with INVARIANT_CHECK_DEBUG=1); its findings on the file's other
definitions and the other rules' findings still count.
"""

from __future__ import annotations

import ast
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ..analysis import facts as F
from ..analysis.needs import Everything, Need, also_excluded
from ..analysis.outline import CLASS, Chunk
from ..analysis.project import Module
from ..analysis.views import MODULE_CODE, ClassView, Context, FunctionView
from .records import Outcome, ScanRecord
from ..api.rule import Report, Rule
from ..api.edits import overlapping, parses_whole, render_hint
from ..api.layout import restyled
from ..api.types import SAFE, UNSAFE, Candidate, FileError, Finding, Fix


@dataclass
class Plan:
    """The rules of a run, instantiated once, with their derived needs. A rule that cannot
    even be set up is left out and named in `broken` (the run goes on without it)."""

    rules: list[Rule]
    needs: dict[str, Need]
    prefilter: bool = True
    broken: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, rule_classes: Iterable[type[Rule]], options: dict[str, dict[str, Any]], prefilter: bool = True) -> Plan:
        rules, needs, broken = [], {}, {}
        for r in rule_classes:
            if r.EMITTED_BY_ENGINE:
                continue
            try:
                rule = r(options[r.CODE])
                need = rule.needs(rule.options)
            except Exception as exc:  # a bug in one rule must not stop the others
                broken[r.CODE] = f"internal error setting up the rule: {_one_line(exc)}"
                continue
            rules.append(rule)
            needs[r.CODE] = need if prefilter else Everything()
        return cls(rules, needs, prefilter, broken)

    def codes_for(self, data: bytes, lower: bytes | None = None) -> tuple[str, ...]:
        """Rules whose needs these bytes may meet (the scan's necessary condition)."""
        lower = data.lower() if lower is None else lower
        return tuple(r.CODE for r in self.rules if self.needs[r.CODE].quick(data, lower))


def lint_bytes(shown: str, data: bytes, plan: Plan, root=None) -> Outcome:
    """The outcome of the file `root/shown` from its bytes alone, in a throwaway project of
    that folder (tests, tools)."""
    import os
    from pathlib import Path

    from ..analysis.project import Project

    base = Path(os.path.abspath(root if root is not None else "."))
    path = base / shown
    project = Project(base, read=lambda p: data if p == path else p.read_bytes())
    module = project.module_at(path, data)
    rec = ScanRecord(path, shown, rules=plan.codes_for(data))
    return analyze(Context(project), module, rec, plan)


def analyze(ctx: Context, module: Module, rec: ScanRecord, plan: Plan) -> Outcome:
    out = Outcome()
    tracker = ctx.project.tracker
    with tracker.frame() as deps:
        try:
            _analyze(ctx, module, rec, plan, out)
        except RecursionError:
            out.errors.append(FileError(rec.shown, "cannot lint: nesting too deep"))
            out.parsed = False
    out.deps = _dep_records(ctx, module, deps)
    return out


def _analyze(ctx: Context, module: Module, rec: ScanRecord, plan: Plan, out: Outcome) -> None:
    rules = [r for r in plan.rules if r.CODE in rec.rules]
    if not rules:
        return
    module.source
    if module.error:
        out.errors.append(FileError(rec.shown, module.error))
        out.parsed = False
        return
    picks = _pick(module, rules, plan)
    # parse what was picked; a chunk that does not parse alone turns the file into one chunk
    for chunk in _chunks_of(picks):
        module.statements(chunk)
    if module._whole is not None:
        if module.error:
            out.errors.append(_syntax_error(rec.shown, module))
            out.parsed = False
            return
        picks = _pick(module, rules, plan)
    failed = _Failures(module, rec.shown)
    for rule in rules:
        if not picks.get(rule.CODE):
            continue  # nothing of this file can hold its finding
        for rep, root, view in _run(ctx, module, rule, picks.get(rule.CODE, ()), failed):
            fix = _fix_of(rule, rep, view, failed)
            out.candidates.append(_candidate(module, rule, rep, root, rec.shown, fix))
    out.errors.extend(failed.errors)


class _Failures:
    """The internal errors of the rules in one file: one per rule and definition, at the
    definition's line (a fix builder's at its finding's line), named by rule, file and line.
    With INVARIANT_CHECK_DEBUG set, each one's traceback goes to stderr as it happens."""

    def __init__(self, module: Module, shown: str) -> None:
        self.module = module
        self.shown = shown
        self.errors: list[FileError] = []

    def add(self, rule: Rule, node: ast.AST | None, what: str, exc: BaseException) -> None:
        line = getattr(node, "lineno", None) or 1
        try:
            column = self.module.source.column(line, getattr(node, "col_offset", 0) or 0)
        except Exception:  # a line the source does not have (a rule's odd node): its start
            column = 1
        why = "nesting too deep" if isinstance(exc, RecursionError) else _one_line(exc)
        message = f"internal error in {rule.CODE} ({rule.NAME}) {what}: {why}"
        self.errors.append(FileError(self.shown, message, line, column, rule.CODE))
        if _debug():
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            sys.stderr.write(f"invariant-check: {self.shown}:{line}:{column}: {message}\n{tb}")
            sys.stderr.flush()


def _debug() -> bool:
    from ..settings.envvars import EnvError, get

    try:
        return bool(get("INVARIANT_CHECK_DEBUG"))
    except EnvError:  # the command line warns about the value once
        return False


# -- picking definitions ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Pick:
    kind: str  # 'chunk' (functions or classes in it), 'module' (top-level code)
    chunk: Chunk | None = None


def _pick(module: Module, rules: list[Rule], plan: Plan) -> dict[str, list[_Pick]]:
    picks: dict[str, list[_Pick]] = {}
    # the whole text first (docstrings included: a superset): a file that fails it is never
    # outlined, and most files fail it
    text = module.source.text
    rules = [r for r in rules if plan.needs[r.CODE].holds(text)]
    if not rules:
        return picks
    ol = module.outline
    ol.exclude_prose()
    code_span = None
    between: list[tuple[int, int]] = []
    for rule in rules:
        need = plan.needs[rule.CODE]
        chosen: list[_Pick] = []
        if rule.SCOPE == "class":
            for chunk in ol.top():
                if need.holds(text, chunk.start, max(chunk.end, chunk.span_end)):
                    chosen.append(_Pick("chunk", chunk))
                    chosen.extend(_Pick("chunk", c) for c in ol.children(chunk))
        else:
            chosen.extend(_Pick("chunk", c) for c in module.leaf_chunks(need))
            if code_span is None:
                code = sorted((c.start, c.end) for c in module.module_code_chunks())
                # one span from the first piece to the last (module code is read in order
                # across pieces), with the definitions between them left out
                code_span = (code[0][0], code[-1][1]) if code else ()
                between = [(a[1], b[0]) for a, b in zip(code, code[1:]) if b[0] > a[1]]
            if code_span:
                with also_excluded(text, between):
                    if need.holds(text, *code_span):
                        chosen.append(_Pick("module"))
        picks[rule.CODE] = chosen
    return picks


def _chunks_of(picks: dict[str, list[_Pick]]) -> list[Chunk]:
    seen: dict[int, Chunk] = {}
    for chosen in picks.values():
        for p in chosen:
            if p.chunk is not None:
                seen.setdefault(p.chunk.index, p.chunk)
    return [seen[k] for k in sorted(seen)]


def module_code(module: Module) -> ast.Module:
    """A module's top-level statements (not the bodies of its definitions), in order."""
    stmts: list[ast.stmt] = []
    for chunk in module.module_code_chunks():
        own, trailing = module.statements(chunk)
        stmts.extend(trailing if chunk.parent is not None else own)
    stmts.sort(key=lambda s: (s.lineno, s.col_offset))
    return ast.Module(body=stmts, type_ignores=[])


def _checked(rule: Rule, check, view: Any, node: ast.AST, what: str, failed: _Failures) -> list[Report]:
    """The reports of one rule on one definition; a rule that raises there reports nothing
    there, and its failure is noted at the definition's line."""
    try:
        return list(check(view))
    except (Exception, RecursionError) as exc:  # a bug in one rule must not silence the others
        failed.add(rule, node, what, exc)
        return []


def _run(ctx: Context, module: Module, rule: Rule, picks: Iterable[_Pick], failed: _Failures) -> Iterator[tuple[Report, ast.AST, Any]]:
    for pick in picks:
        if pick.kind == "module":
            if rule.SCOPE != "class":
                node = module_code(module)
                view = FunctionView(ctx, module, node, MODULE_CODE)
                at = node.body[0] if node.body else None
                for rep in _checked(rule, rule.check_function, view, at, "checking the module's top-level code", failed):
                    yield rep, node, view
            continue
        chunk = pick.chunk
        own, trailing = module.statements(chunk)
        # findings' statement lines are looked up from the chunk's statements (a report at a
        # definition's name belongs to the definition, decorators included)
        root = ast.Module(body=own + trailing, type_ignores=[])
        prefix, cls = "", None
        ol = module.outline
        if chunk.parent is not None and not ol.whole:
            cls = ol.chunks[chunk.parent].name
            prefix = f"{cls}."
        for stmts, pre, owner in ((own, prefix, cls), (trailing, "", None)):
            for qual, _, node in F.definitions(stmts, pre, owner):
                if isinstance(node, ast.ClassDef):
                    if rule.SCOPE != "class":
                        continue
                    if chunk.kind == CLASS and chunk.parent is None and qual != chunk.name and "." not in qual:
                        continue
                    info = module.klass(qual)
                    if info is None:
                        continue
                    cview = ClassView(ctx, module, node, info)
                    for rep in _checked(rule, rule.check_class, cview, node, f"checking class `{qual}`", failed):
                        yield rep, root, cview
                elif rule.SCOPE != "class":
                    view = FunctionView(ctx, module, node, qual)
                    for rep in _checked(rule, rule.check_function, view, node, f"checking `{qual}`", failed):
                        yield rep, root, view


# -- reports to candidates ------------------------------------------------------------------


def _fix_of(rule: Rule, rep: Report, view: Any, failed: _Failures) -> Fix | None:
    """The rule's repair of what it reported, checked for shape; a fix builder that fails
    costs the finding its fix, never the finding. A file that does not parse as a whole (the
    engine parses only the definitions the rules need) gets no fix: a fix must leave a file
    that compiles."""
    if not parses_whole(view.source.text):
        return None
    try:
        fix = rule.fix(rep, view)
    except RecursionError:
        return None
    except Exception as exc:
        failed.add(rule, rep.node, "building the fix of its finding", exc)
        return None
    if fix is None:
        return None
    lines = len(view.source.line_starts)
    if (
        fix.applicability not in (SAFE, UNSAFE)
        or not fix.edits
        or any(e.end < e.start or e.line < 1 or e.end_line > lines + 1 for e in fix.edits)
        or any(overlapping(a, b) for i, a in enumerate(fix.edits) for b in fix.edits[i + 1 :])
    ):
        failed.add(rule, rep.node, "building the fix of its finding", ValueError("malformed edits"))
        return None
    # the statements it writes, laid out as the project's formatter would
    return restyled(fix, view.source)


def _candidate(module: Module, rule: Rule, rep: Report, root: ast.AST, shown: str, fix: Fix | None = None) -> Candidate:
    src = module.source
    node = rep.node
    line = node.lineno
    end_line = getattr(node, "end_lineno", None) or line
    col = src.column(line, node.col_offset)
    end_col = src.column(end_line, getattr(node, "end_col_offset", None) or node.col_offset)
    hint = rep.hint if rep.hint is not None else rule.HINT
    if fix is not None:
        hint = render_hint(fix, src)  # the hint is the fix, in words and lines
    finding = Finding(
        shown, line, col, end_line, end_col, rule.CODE, rule.NAME, rep.message,
        hint, rep.data or None, fix,
    )
    return Candidate(finding, statement_line(root, node))


def statement_line(root: ast.AST, node: ast.AST) -> int:
    """First line of the innermost statement holding `node` (its first decorator for a
    decorated definition): where a suppression comment may also sit."""
    best = node.lineno
    pos = (node.lineno, node.col_offset)
    stack = [root]
    while stack:
        cur = stack.pop()
        for child in ast.iter_child_nodes(cur):
            if not isinstance(child, ast.stmt):
                if isinstance(child, (ast.excepthandler,)) or type(child).__name__ == "match_case":
                    stack.append(child)
                continue
            start = (child.lineno, child.col_offset)
            end = (getattr(child, "end_lineno", child.lineno), getattr(child, "end_col_offset", child.col_offset))
            if start <= pos <= end:
                decorators = getattr(child, "decorator_list", None)
                best = decorators[0].lineno if decorators else child.lineno
                stack.append(child)
    return best


def _syntax_error(shown: str, module: Module) -> FileError:
    try:
        compile(module.source.text, shown, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        msg = " ".join(str(exc.msg).split()) or "invalid syntax"
        if any(m in msg for m in ("too many nested", "too complex", "nested too deeply", "too many levels")):
            return FileError(shown, f"cannot parse: nesting too deep ({msg})")
        return FileError(shown, f"syntax error: {msg}", exc.lineno, max(1, exc.offset or 1) if exc.lineno else None)
    except (RecursionError, MemoryError):
        return FileError(shown, "cannot parse: nesting too deep")
    except Exception as exc:
        return FileError(shown, f"cannot parse: {_one_line(exc)}")
    return FileError(shown, module.error or "cannot parse")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _dep_key(dep: tuple) -> tuple:
    # a file or a word is noted once (its digest and the files holding a word do not change
    # within a run): ordered by its name, without spelling out the long list of a word's files
    if dep[0] in ("file", "word"):
        return dep[0], dep[1]
    return dep[0], dep[1], repr(dep[2:])


def _dep_records(ctx: Context, module: Module, deps: set) -> list[list[Any]]:
    out = []
    own = str(module.path)
    for dep in sorted(deps, key=_dep_key):
        kind = dep[0]
        if kind == "file":
            if dep[1] == own:
                continue
            other = ctx.project.loaded(dep[1])
            digest = ctx.project.digest_of(other) if other is not None else None
            out.append(["file", dep[1], digest])
        elif kind == "exists":
            out.append(["exists", dep[1], dep[2]])
        elif kind == "word":
            out.append(["word", dep[1], list(dep[2])])
        elif kind == "module":
            out.append(["module", dep[1], dep[2], dep[3]])
    return out
