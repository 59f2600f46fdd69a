"""Mutation harness for IC004 and IC005: rewrite fixtures, lint them with the real engine.

Like `mutations.py` (IC001/IC002): fixtures are small packages of this project's own code
(`ic004_*.py.txt`, `ic005_*.py.txt` beside this module, with `draft_metadata.py.txt` as their
support module), each *buggy* or *fixed* for one rule. Meaning-preserving rewrites must keep a
buggy fixture reported (at the advance for IC004, at the draft loop for IC005) and a fixed one
silent; bug-injecting rewrites turn a fixed fixture into a buggy one, also after any
meaning-preserving rewrite. `tests/test_draft_mutations.py` asserts the rates.
"""

from __future__ import annotations

import ast
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
import libcst.matchers as m

import mutations as M  # the IC001/IC002 harness: shared libcst helpers
from invariant_check.lint.engine import Engine
from invariant_check.api.registry import all_rules

HERE = Path(__file__).resolve().parent
MAIN = M.MAIN
SUPPORT = "draft_metadata.py"
DERIVED = ("max_seq_len", "_seq_lens_cpu", "seq_lens_cpu", "seq_lens_cpu_upper_bound")
METADATA_NAMES = ("attn_metadata", "per_layer_attn_metadata")

Files = dict[str, str]


@dataclass(frozen=True)
class Fixture:
    name: str
    rule: str
    buggy: bool
    files: Files


def fixtures() -> list[Fixture]:
    support = (HERE / "draft_metadata.py.txt").read_text()
    out = []
    for rule, shapes in (("IC004", ("loop", "copy")), ("IC005", ("v2", "groups"))):
        for shape in shapes:
            for buggy in (True, False):
                name = f"{rule.lower()}_{shape}_{'buggy' if buggy else 'fixed'}"
                text = (HERE / f"{name}.py.txt").read_text()
                out.append(Fixture(name, rule, buggy, {MAIN: text, SUPPORT: support}))
    return out


# -- libcst helpers ---------------------------------------------------------------------------


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _apply(source: str, *transformers: cst.CSTTransformer) -> str:
    return M._apply(source, *transformers)


def _changed(files: Files, source: str) -> Files | None:
    return M._changed(files, source)


def _writes_derived(stmt: cst.CSTNode) -> bool:
    """A statement (or an `if` holding only such statements) that writes a derived field."""
    if isinstance(stmt, cst.If):
        return all(_writes_derived(s) for s in stmt.body.body) and stmt.orelse is None
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        targets = []
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            targets = [small.target]
        for t in targets:
            if isinstance(t, cst.Attribute) and t.attr.value in DERIVED:
                return True
    return False


def _writes_max(stmt: cst.CSTNode) -> bool:
    return _writes_derived(stmt) and ".max_seq_len" in _code(stmt)


def _is_advance(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and bool(re.search(r"\.seq_lens \+=", _code(stmt)))


def _is_rebuild(stmt: cst.CSTNode) -> bool:
    """`attn_metadata = <call>` or a `for` over the groups that refills the per-layer dict."""
    code = _code(stmt)
    if isinstance(stmt, cst.SimpleStatementLine):
        return any(
            isinstance(s, cst.Assign) and any(m.matches(t.target, m.Name("attn_metadata")) for t in s.targets)
            and isinstance(s.value, cst.Call)
            for s in stmt.body
        )
    return isinstance(stmt, cst.For) and "per_layer_attn_metadata[" in code


def _draft_loop(node: cst.CSTNode) -> bool:
    """The loop that runs the draft steps: it holds a forward."""
    code = _code(node)
    return isinstance(node, (cst.For, cst.While)) and bool(
        re.search(r"\bself\.(run_model|model)\(|set_forward_context\(", code)
    )


class _InDraftLoop(cst.CSTTransformer):
    """Rewrites the statement lists of the draft loop's blocks (its body and nested `if`s;
    not the bodies of loops nested in it, whose statements move with their loop)."""

    def __init__(self) -> None:
        self.depth = 0
        self.nested = 0
        self.hits = 0

    def _enter(self, node) -> None:
        if _draft_loop(node):
            self.depth += 1
        elif self.depth:
            self.nested += 1

    def _leave(self, node) -> None:
        if _draft_loop(node):
            self.depth -= 1
        elif self.depth:
            self.nested -= 1

    def visit_For(self, node):
        self._enter(node)

    def leave_For(self, original_node, updated_node):
        self._leave(original_node)
        return updated_node

    def visit_While(self, node):
        self._enter(node)

    def leave_While(self, original_node, updated_node):
        self._leave(original_node)
        return updated_node

    def leave_IndentedBlock(self, original_node, updated_node):
        if not self.depth or self.nested:
            return updated_node
        body = self.block(list(updated_node.body))
        if body is None:
            return updated_node
        self.hits += 1
        return updated_node.with_changes(body=body)

    def block(self, body: list) -> list | None:
        raise NotImplementedError


# -- meaning-preserving rewrites --------------------------------------------------------------------

RENAMES = {
    "common_attn_metadata": "cad_state",
    "attn_metadata": "draft_md",
    "per_layer_attn_metadata": "layer_attn_metadata",
    "token_index": "k",
    "step": "i",
    "hidden": "h",
    "last_hidden": "h_last",
    "draft_tokens": "toks",
    "num_tokens": "n_tok",
    "positions": "pos_ids",
    "new_cad": "extended",
    "cad": "md",
}


class _Rename(cst.CSTTransformer):
    """Renames variables and parameters; attributes and keywords keep their names."""

    def leave_Name(self, original_node, updated_node):
        new = RENAMES.get(updated_node.value)
        return updated_node.with_changes(value=new) if new else updated_node

    def leave_Attribute(self, original_node, updated_node):
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node, updated_node):
        return updated_node.with_changes(keyword=original_node.keyword)


def rename_locals(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _Rename()))


class _AliasParam(cst.CSTTransformer):
    """In each function with parameter `name` that never rebinds it, read it through a local
    alias bound first."""

    def __init__(self, name: str, alias: str) -> None:
        self.name, self.alias = name, alias
        self.inside: list[bool] = []

    def visit_FunctionDef(self, node):
        params = [p.name.value for p in node.params.params]
        rebinds = any(
            m.matches(t.target, m.Name(self.name)) for a in m.findall(node, m.Assign()) for t in a.targets
        )
        self.inside.append(self.name in params and not rebinds)

    def leave_Name(self, original_node, updated_node):
        if self.inside and self.inside[-1] and updated_node.value == self.name:
            return updated_node.with_changes(value=self.alias)
        return updated_node

    def leave_Param(self, original_node, updated_node):
        return updated_node.with_changes(name=original_node.name)

    def leave_Arg(self, original_node, updated_node):
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_FunctionDef(self, original_node, updated_node):
        active = self.inside.pop()
        if not active:
            return updated_node
        bind = cst.parse_statement(f"{self.alias} = {self.name}\n")
        body = list(updated_node.body.body)
        at = 1 if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])) else 0
        body.insert(at, bind)
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))


def alias_object(files: Files) -> Files | None:
    source = _apply(files[MAIN], _AliasParam("common_attn_metadata", "meta"), _AliasParam("attn_metadata", "md_view"))
    return _changed(files, source)


def _with_import(source: str, line: str) -> str:
    return M._with_import(source, line)


def _object_of(code: str, fields: tuple[str, ...]) -> str | None:
    found = re.search(r"(\w+)\.(?:%s)\b" % "|".join(fields), code)
    return found.group(1) if found else None


def helper_module_fix(files: Files) -> Files | None:
    """The updates of the derived fields move into a function of another module."""
    moved: list[str] = []
    objs: list[str] = []

    class T(_InDraftLoop):
        def block(self, body):
            idx = [i for i, s in enumerate(body) if _writes_derived(s)]
            if not idx or len(idx) == len(body):
                return None  # a block of updates only (a guarded one) moves with its `if`
            code = [_code(body[i]) for i in idx]
            obj = _object_of("".join(code), DERIVED)
            if obj is None:
                return None
            moved.extend(code)
            objs.append(obj)
            out = [s for i, s in enumerate(body) if i not in idx]
            out.insert(idx[0], cst.parse_statement(f"sync_derived(self, {obj})\n"))
            return out

    source = _apply(files[MAIN], T())
    if not moved or len(set(objs)) != 1:
        return None
    source = _with_import(source, "from .derived_sync import sync_derived\n")
    out = _changed(files, source)
    body = "".join("    " + line + "\n" for chunk in moved for line in chunk.strip("\n").splitlines())
    out["derived_sync.py"] = f"def sync_derived(self, {objs[0]}):\n" + body
    return out


def helper_module_advance(files: Files) -> Files | None:
    """The advance of the lengths moves into a function of another module."""

    class T(_InDraftLoop):
        def block(self, body):
            if not any(_is_advance(s) for s in body):
                return None
            out = []
            for s in body:
                obj = _object_of(_code(s), ("seq_lens",)) if _is_advance(s) else None
                out.append(cst.parse_statement(f"advance_lengths({obj}, 1)\n") if obj else s)
            return out

    t = T()
    source = _apply(files[MAIN], t)
    if not t.hits:
        return None
    source = _with_import(source, "from .lengths import advance_lengths\n")
    out = _changed(files, source)
    out["lengths.py"] = (
        "def advance_lengths(md, n):\n"
        "    # the caller keeps the derived fields in step\n"
        "    md.seq_lens += n\n"
    )
    return out


def swap_order(files: Files) -> Files | None:
    """The derived fields are updated just before the advance instead of after it."""

    class T(_InDraftLoop):
        def block(self, body):
            adv = [i for i, s in enumerate(body) if _is_advance(s)]
            upd = [i for i, s in enumerate(body) if _writes_derived(s)]
            if len(adv) != 1 or not upd:
                return None
            moving = [body[i] for i in upd]
            rest = [s for i, s in enumerate(body) if i not in upd]
            at = rest.index(body[adv[0]])
            return rest[:at] + moving + rest[at:]

    return _changed(files, _apply(files[MAIN], T()))


def refresh_helper(files: Files) -> Files | None:
    """The rebuild becomes a refresh through a helper of another module: in place for the
    v2 metadata, a refill of the per-layer dict for the group loop."""
    kind: list[str] = []

    class T(_InDraftLoop):
        def block(self, body):
            out, hit = [], False
            for s in body:
                if _is_rebuild(s):
                    hit = True
                    if isinstance(s, cst.For):
                        kind.append("groups")
                        out.append(cst.parse_statement(
                            "fill_layer_metadata(self.draft_attn_groups, per_layer_attn_metadata, common_attn_metadata, token_index + 1)\n"
                        ))
                    else:
                        kind.append("v2")
                        out.append(cst.parse_statement("refresh_draft_metadata(self.attn_groups, attn_metadata)\n"))
                else:
                    out.append(s)
            return out if hit else None

    source = _apply(files[MAIN], T())
    if not kind:
        return None
    name = "fill_layer_metadata" if kind[0] == "groups" else "refresh_draft_metadata"
    source = _with_import(source, f"from .refresh import {name}\n")
    out = _changed(files, source)
    out["refresh.py"] = (
        "def refresh_draft_metadata(groups, md):\n"
        "    for group in groups:\n"
        "        group.update_draft_decode_metadata(md)\n"
        "\n\n"
        "def fill_layer_metadata(groups, per_layer, cad, index):\n"
        "    for group in groups:\n"
        "        md = group.get_metadata_builder().build_for_drafting(common_attn_metadata=cad, draft_index=index)\n"
        "        for layer_name in group.layer_names:\n"
        "            per_layer[layer_name] = md\n"
    )
    return out


class _WrapBody(cst.CSTTransformer):
    """Wraps the whole body of the draft loop in `if self.drafting:`."""

    def leave_For(self, original_node, updated_node):
        return self._wrap(original_node, updated_node)

    def leave_While(self, original_node, updated_node):
        return self._wrap(original_node, updated_node)

    def _wrap(self, original_node, updated_node):
        if not _draft_loop(original_node):
            return updated_node
        inner = cst.If(cst.parse_expression("self.drafting"), cst.IndentedBlock(list(updated_node.body.body)))
        return updated_node.with_changes(body=updated_node.body.with_changes(body=[inner]))


def wrap_in_if(files: Files) -> Files | None:
    """IC004: the whole step under one condition; IC005: the rebuild under a backend flag."""
    if "seq_lens +=" in files[MAIN] and "set_forward_context" not in files[MAIN]:
        return _changed(files, _apply(files[MAIN], _WrapBody()))

    class T(_InDraftLoop):
        def block(self, body):
            if not any(_is_rebuild(s) for s in body):
                return None
            return [
                cst.If(cst.parse_expression("self.backend_needs_rebuild"), cst.IndentedBlock([s])) if _is_rebuild(s) else s
                for s in body
            ]

    return _changed(files, _apply(files[MAIN], T()))


class _ForToWhile(cst.CSTTransformer):
    """`for v in range(a, b):` (the draft loop) -> `v = a` / `while v < b:` ... `v += 1`."""

    def __init__(self) -> None:
        self.hits = 0

    def leave_For(self, original_node, updated_node):
        if not _draft_loop(original_node) or not isinstance(updated_node.target, cst.Name):
            return updated_node
        it = updated_node.iter
        if not (isinstance(it, cst.Call) and m.matches(it.func, m.Name("range")) and 1 <= len(it.args) <= 2):
            return updated_node
        if m.findall(updated_node.body, m.Continue()):
            return updated_node
        start = _code(it.args[0].value) if len(it.args) == 2 else "0"
        stop = _code(it.args[-1].value)
        var = updated_node.target.value
        self.hits += 1
        body = list(updated_node.body.body) + [cst.parse_statement(f"{var} += 1\n")]
        loop = cst.While(cst.parse_expression(f"{var} < {stop}"), updated_node.body.with_changes(body=body))
        return cst.FlattenSentinel([cst.parse_statement(f"{var} = {start}\n"), loop])


def for_to_while(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _ForToWhile()))


def combined(files: Files) -> Files | None:
    out, steps = dict(files), 0
    for step in (rename_locals, alias_object, swap_order, helper_module_fix, refresh_helper, for_to_while,
                 M.split_lines, M.add_comments):
        new = step(out)
        if new is not None:
            out, steps = new, steps + 1
    return out if steps > 1 else None


# -- bug-injecting rewrites ----------------------------------------------------------------------------


def delete_fix(files: Files) -> Files | None:
    """IC004: the update of the maximum (or of the upper bound in a copy) is deleted.
    IC005: the rebuild in the draft loop is deleted."""
    source = files[MAIN]
    if "seq_lens_cpu_upper_bound=" in source:
        class Drop(cst.CSTTransformer):
            def leave_Call(self, original_node, updated_node):
                args = [a for a in updated_node.args if not (a.keyword and a.keyword.value == "seq_lens_cpu_upper_bound")]
                return updated_node.with_changes(args=args)

        return _changed(files, _apply(source, Drop()))

    class T(_InDraftLoop):
        def block(self, body):
            keep = [s for s in body if not (_writes_max(s) or _is_rebuild(s))]
            return keep if len(keep) != len(body) else None

    return _changed(files, _apply(source, T()))


def fix_out_of_loop(files: Files) -> Files | None:
    """IC004: the update of the maximum moves after the loop. IC005: the rebuild moves before it."""
    moved: list[cst.CSTNode] = []

    class Take(_InDraftLoop):
        def block(self, body):
            hits = [s for s in body if _writes_max(s) or _is_rebuild(s)]
            if not hits:
                return None
            moved.extend(hits)
            return [s for s in body if s not in hits]

    class Put(cst.CSTTransformer):
        def leave_IndentedBlock(self, original_node, updated_node):
            body = list(updated_node.body)
            for i, s in enumerate(body):
                if isinstance(s, (cst.For, cst.While)) and _draft_loop(s):
                    if any(_is_rebuild(x) for x in moved):
                        body[i:i] = moved
                    else:
                        body[i + 1 : i + 1] = moved
                    return updated_node.with_changes(body=body)
            return updated_node

    source = _apply(files[MAIN], Take())
    if not moved:
        return None
    return _changed(files, _apply(source, Put()))


def fix_on_first_step(files: Files) -> Files | None:
    """IC005: the rebuild runs only when the loop counter says it is the first step."""

    class T(_InDraftLoop):
        def block(self, body):
            if not any(_is_rebuild(s) for s in body):
                return None
            return [
                cst.If(cst.parse_expression("step == 1"), cst.IndentedBlock([s])) if _is_rebuild(s) else s
                for s in body
            ]

    if "for step in" not in files[MAIN]:
        return None
    return _changed(files, _apply(files[MAIN], T()))


def narrow_condition(files: Files) -> Files | None:
    """IC004: the update of the maximum runs only under an unrelated condition."""

    class T(_InDraftLoop):
        def block(self, body):
            if not any(_writes_max(s) for s in body):
                return None
            return [
                cst.If(cst.parse_expression("self.uses_mrope"), cst.IndentedBlock([s])) if _writes_max(s) else s
                for s in body
            ]

    return _changed(files, _apply(files[MAIN], T()))


@dataclass(frozen=True)
class Rewrite:
    name: str
    injects: bool
    apply: Callable[[Files], Files | None]
    rules: tuple[str, ...] = ("IC004", "IC005")


REWRITES = [
    Rewrite("identity", False, lambda files: dict(files)),
    Rewrite("rename-locals", False, rename_locals),
    Rewrite("alias-object", False, alias_object),
    Rewrite("helper-module-fix", False, helper_module_fix, ("IC004",)),
    Rewrite("helper-module-advance", False, helper_module_advance, ("IC004",)),
    Rewrite("swap-order", False, swap_order, ("IC004",)),
    Rewrite("refresh-helper", False, refresh_helper, ("IC005",)),
    Rewrite("wrap-in-if", False, wrap_in_if),
    Rewrite("for-to-while", False, for_to_while),
    Rewrite("split-lines", False, M.split_lines),
    Rewrite("add-comments", False, M.add_comments),
    Rewrite("combined", False, combined),
    Rewrite("delete-fix", True, delete_fix),
    Rewrite("fix-out-of-loop", True, fix_out_of_loop),
    Rewrite("fix-on-first-step", True, fix_on_first_step, ("IC005",)),
    Rewrite("narrow-condition", True, narrow_condition, ("IC004",)),
]


# -- running -----------------------------------------------------------------------------------------


def expected_sites(rule: str, files: Files) -> set[tuple[str, int]]:
    """Where a finding belongs: IC004 at an advance of the lengths (any module), IC005 at a
    loop of the main module that runs a forward."""
    out: set[tuple[str, int]] = set()
    if rule == "IC004":
        for name, text in files.items():
            for i, line in enumerate(text.splitlines(), 1):
                if re.search(r"\.seq_lens \+=|\bseq_lens=\w+\.seq_lens \+", line):
                    out.add((name, i))
        return out
    tree = ast.parse(files[MAIN])
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and re.fullmatch(r"self\.(run_model|model)|set_forward_context", ast.unparse(sub.func)):
                    out.add((MAIN, node.lineno))
                    break
    return out


def lint(files: Files, rule: str, *, prefilter: bool = True) -> list[tuple[str, int]]:
    """(file, line) of `rule`'s findings, from the real engine."""
    cls = all_rules()[rule]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        root.mkdir()
        for name, text in files.items():
            (root / name).write_text(text)
        engine = Engine([cls], {rule: cls.default_options()}, prefilter=prefilter, jobs=1, root=root, cwd=root)
        result = engine.lint(sorted(root.rglob("*.py")))
        if result.errors:
            raise AssertionError(f"variant did not lint cleanly: {result.errors}")
        return sorted((f.path, f.line) for f in result.findings if f.rule == rule)


@dataclass
class Outcome:
    rewrite: str
    fixture: str
    rule: str
    expect_report: bool
    sites: list[tuple[str, int]] = field(default_factory=list)
    expected: set[tuple[str, int]] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        if not self.expect_report:
            return not self.sites
        return bool(self.sites) and set(self.sites) <= self.expected


def variants(rules: set[str] | None = None):
    """(rewrite name, fixture, files, expect_report) for every rewrite that applies."""
    for rw in REWRITES:
        for fx in fixtures():
            if fx.rule not in rw.rules or (rules is not None and fx.rule not in rules):
                continue
            if rw.injects and fx.buggy:
                continue
            files = rw.apply(dict(fx.files))
            if files is None:
                continue
            yield rw.name, fx, files, fx.buggy or rw.injects
            if not rw.injects:
                continue
            for then in REWRITES:
                if then.injects or then.name == "identity" or fx.rule not in then.rules:
                    continue
                again = then.apply(dict(files))
                if again is not None:
                    yield f"{rw.name} + preserving", fx, again, True


def run(rules: set[str] | None = None) -> list[Outcome]:
    wanted = (rules or {"IC004", "IC005"}) & set(all_rules())
    out = []
    for name, fx, files, expect in variants(wanted):
        sites = lint(files, fx.rule)
        out.append(Outcome(name, fx.name, fx.rule, expect, sites, expected_sites(fx.rule, files)))
    return out


def table_rows_for(rule: str) -> list[str]:
    names = [rw.name for rw in REWRITES if rule in rw.rules]
    return names + [f"{rw.name} + preserving" for rw in REWRITES if rw.injects and rule in rw.rules]


def format_table(outcomes: list[Outcome]) -> str:
    rows: dict[tuple[str, str], list[int]] = {}
    for o in outcomes:
        row = rows.setdefault((o.rule, o.rewrite), [0, 0, 0, 0])
        if o.expect_report:
            row[0] += 1
            row[1] += o.ok
        else:
            row[2] += 1
            row[3] += not o.ok
    lines = [f"{'rule':5} {'rewrite':34} {'detected':>9} {'false alarms':>13}"]
    for (rule, rewrite), (b, d, c, f) in sorted(rows.items()):
        lines.append(f"{rule:5} {rewrite:34} {f'{d}/{b}':>9} {f'{f}/{c}':>13}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(run()))
