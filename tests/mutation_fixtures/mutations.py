"""Mutation harness for IC001 and IC002: rewrite fixtures, lint them with the real engine.

Fixtures are small packages of this project's own code (`*.py.txt` beside this module, so
that neither pytest nor the linter picks them up as sources). Each is *buggy* or *fixed*
for one rule. Rewrites are libcst transformations of the fixture's main module:

- meaning-preserving rewrites must keep a buggy fixture reported and a fixed one silent;
- bug-injecting rewrites turn a fixed fixture into a buggy one, which must be reported.

`bench/mutation_report.py` prints the table; `tests/test_mutations.py` asserts the rates.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from invariant_check.lint.engine import Engine
from invariant_check.api.registry import all_rules

HERE = Path(__file__).resolve().parent
MAIN = "drafter.py"
SWITCH = "set_skip_topk"
COMPACTION = "compact_topk_indices"

Files = dict[str, str]


@dataclass(frozen=True)
class Fixture:
    name: str
    rule: str  # the code this fixture exercises
    buggy: bool
    files: Files  # MAIN and support modules


def _read(name: str) -> str:
    return (HERE / f"{name}.py.txt").read_text()


def fixtures() -> list[Fixture]:
    out = []
    context = _read("context")
    for shape in ("proposer", "loop", "hooks"):
        for buggy in (True, False):
            name = f"ic002_{shape}_{'buggy' if buggy else 'fixed'}"
            out.append(Fixture(name, "IC002", buggy, {MAIN: _read(name), "context.py": context}))
    for name, buggy in (
        ("ic001_groups_buggy", True),
        ("ic001_groups_fixed", False),
        ("ic001_values_fixed", False),
        ("ic001_assert_buggy", True),
    ):
        out.append(Fixture(name, "IC001", buggy, {MAIN: _read(name)}))
    return out


# -- libcst helpers --------------------------------------------------------------------------


def _last(func: cst.BaseExpression) -> str | None:
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return None


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _calls_named(node: cst.CSTNode, name: str) -> list[cst.Call]:
    return [c for c in m.findall(node, m.Call()) if _last(c.func) == name]


def _is_switch_on(call: cst.Call) -> bool:
    return (
        _last(call.func) == SWITCH
        and bool(call.args)
        and m.matches(call.args[0].value, m.Name("True"))
    )


def _stmt_calling(stmt: cst.CSTNode, name: str) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and bool(_calls_named(stmt, name))


def _is_forward_stmt(stmt: cst.CSTNode) -> bool:
    """`... = self.model(...)` or an alias of it: a call of a receiver ending in the model."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for call in m.findall(stmt, m.Call()):
        code = _code(call.func)
        if code in ("self.model", "drafter", "self.drafter_net"):
            return True
    return False


class _FixEmptyBlocks(cst.CSTTransformer):
    def leave_IndentedBlock(self, original_node, updated_node):
        if not updated_node.body:
            return updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        return updated_node


def _apply(source: str, *transformers: cst.CSTTransformer) -> str:
    module = cst.parse_module(source)
    for t in transformers:
        module = module.visit(t)
    return module.visit(_FixEmptyBlocks()).code


def _changed(files: Files, source: str) -> Files | None:
    if source == files[MAIN]:
        return None  # the rewrite does not apply to this fixture
    cst.parse_module(source)  # every variant must still be valid Python
    return {**files, MAIN: source}


# -- meaning-preserving rewrites ---------------------------------------------------------------

RENAMES = {
    "token_indices_to_sample": "rows_kept",
    "last_token_indices": "row_ids",
    "hidden_states": "h_states",
    "hidden": "h",
    "inputs": "step_kwargs",
    "batch": "micro_batch",
    "picked": "chosen",
    "draft_tokens": "toks",
    "outputs": "outs",
    "num_reqs": "n_active",
    "attn_group": "grp",
    "attn_metadata": "group_md",
    "per_group_attn_metadata": "md_by_group",
    "per_layer_attn_metadata": "md_by_layer",
    "layer_name": "lname",
}


class _Rename(cst.CSTTransformer):
    """Renames variables and parameters; attribute names and keywords stay."""

    def leave_Name(self, original_node, updated_node):
        new = RENAMES.get(updated_node.value)
        return updated_node.with_changes(value=new) if new else updated_node

    def leave_Attribute(self, original_node, updated_node):
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node, updated_node):
        return updated_node.with_changes(keyword=original_node.keyword)


def rename_locals(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _Rename()))


class _RenameReceiver(cst.CSTTransformer):
    """`self.model.model` -> `self.drafter_net.mtp` everywhere, assignments included."""

    def leave_Attribute(self, original_node, updated_node):
        if m.matches(original_node, m.Attribute(value=m.Name("self"), attr=m.Name("model"))):
            return updated_node.with_changes(attr=cst.Name("drafter_net"))
        if m.matches(
            original_node,
            m.Attribute(value=m.Attribute(value=m.Name("self"), attr=m.Name("model")), attr=m.Name("model")),
        ):
            return updated_node.with_changes(attr=cst.Name("mtp"))
        return updated_node


def rename_receiver(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _RenameReceiver()))


class _Alias(cst.CSTTransformer):
    """In each function that reads `<target>` and never assigns it, bind it to a local
    `alias` first and use the alias."""

    def __init__(self, target: str, alias: str) -> None:
        self.target = target
        self.alias = alias
        self.depth = 0

    def _matches(self, node: cst.CSTNode) -> bool:
        return isinstance(node, cst.Attribute) and _code(node) == self.target

    def visit_FunctionDef(self, node):
        self.depth += 1

    def leave_Attribute(self, original_node, updated_node):
        if self.depth and self._matches(original_node):
            return cst.Name(self.alias)
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        self.depth -= 1
        uses = [n for n in m.findall(original_node, m.Attribute()) if self._matches(n)]
        assigned = [
            t
            for a in m.findall(original_node, m.Assign())
            for t in a.targets
            if self._matches(t.target)
        ]
        if not uses or assigned:
            return original_node
        bind = cst.parse_statement(f"{self.alias} = {self.target}\n")
        body = list(updated_node.body.body)
        return updated_node.with_changes(body=updated_node.body.with_changes(body=[bind, *body]))


def alias_receiver(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _Alias("self.model.model", "draft_model")))


def alias_model(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _Alias("self.model", "drafter")))


class _CompactionTo(cst.CSTTransformer):
    """`<recv>.compact_topk_indices(<args>)` statements -> a call built by `make`."""

    def __init__(self, make: Callable[[cst.Call], cst.BaseExpression]) -> None:
        self.make = make
        self.hits = 0

    def leave_Expr(self, original_node, updated_node):
        call = original_node.value
        if (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == COMPACTION
        ):
            self.hits += 1
            return updated_node.with_changes(value=self.make(call))
        return updated_node


def _with_import(source: str, line: str) -> str:
    module = cst.parse_module(source)
    body = list(module.body)
    at = 0
    for i, stmt in enumerate(body):
        if m.matches(stmt, m.SimpleStatementLine(body=[m.OneOf(m.Import(), m.ImportFrom(), m.Expr(m.SimpleString()))])):
            at = i + 1
    body.insert(at, cst.parse_statement(line))
    return module.with_changes(body=body).code


def _helper_call(name: str) -> Callable[[cst.Call], cst.BaseExpression]:
    def make(call: cst.Call) -> cst.BaseExpression:
        receiver = call.func.value
        return cst.Call(cst.Name(name), [cst.Arg(receiver), *call.args])

    return make


def helper_module(files: Files) -> Files | None:
    """The compaction moves into a function of another module."""
    t = _CompactionTo(_helper_call("compact_shared_topk"))
    source = _apply(files[MAIN], t)
    if not t.hits:
        return None
    source = _with_import(source, "from .topk_helpers import compact_shared_topk\n")
    out = _changed(files, source)
    out["topk_helpers.py"] = (
        "def compact_shared_topk(model, rows):\n"
        "    # One row per request: see invariant_check.compaction\n"
        f"    model.{COMPACTION}(rows)\n"
    )
    return out


def helper_chain(files: Files) -> Files | None:
    """The compaction moves two calls deep, across two other modules."""
    t = _CompactionTo(_helper_call("finish_step0"))
    source = _apply(files[MAIN], t)
    if not t.hits:
        return None
    source = _with_import(source, "from . import steps\n")
    source = source.replace("finish_step0(", "steps.finish_step0(")
    out = _changed(files, source)
    out["steps.py"] = (
        "from .rows import squeeze_rows\n\n\n"
        "def finish_step0(model, rows):\n"
        "    squeeze_rows(model, rows)\n"
    )
    out["rows.py"] = (
        "def squeeze_rows(model, rows):\n"
        "    if rows is not None:\n"
        f"        model.{COMPACTION}(rows)\n"
    )
    return out


class _AddMethod(cst.CSTTransformer):
    def __init__(self, method: str) -> None:
        self.method = method

    def leave_ClassDef(self, original_node, updated_node):
        if not _calls_named(original_node, "_compact_shared"):
            return updated_node
        method = cst.parse_statement(self.method).with_changes(leading_lines=[cst.EmptyLine()])
        body = [*updated_node.body.body, method]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))


def helper_method(files: Files) -> Files | None:
    """The compaction moves into a method of the same class."""
    receivers: list[str] = []

    def make(call: cst.Call) -> cst.BaseExpression:
        receivers.append(_code(call.func.value))
        return cst.Call(cst.parse_expression("self._compact_shared"), list(call.args))

    t = _CompactionTo(make)
    source = _apply(files[MAIN], t)
    if not t.hits or len(set(receivers)) != 1 or not receivers[0].startswith("self."):
        return None
    method = f"def _compact_shared(self, rows):\n    {receivers[0]}.{COMPACTION}(rows)\n"
    return _changed(files, _apply(source, _AddMethod(method)))


def _hasattr_guard(stmt: cst.SimpleStatementLine) -> str | None:
    for call in m.findall(stmt, m.Call()):
        name = _last(call.func)
        if name in (SWITCH, COMPACTION) and isinstance(call.func, cst.Attribute):
            return f'hasattr({_code(call.func.value)}, "{name}")'
    return None


class _WrapInIf(cst.CSTTransformer):
    """Wraps each statement that switches, compacts or checks metadata in an `if`."""

    def leave_SimpleStatementLine(self, original_node, updated_node):
        test = _hasattr_guard(original_node)
        if test is None and m.findall(original_node, m.Assert()):
            test = "self.strict_checks"
        if test is None:
            return updated_node
        return cst.If(cst.parse_expression(test), cst.IndentedBlock([updated_node]))

    def leave_If(self, original_node, updated_node):
        if _calls_named(original_node.test, "isinstance") or _calls_named(original_node.test, "type"):
            return cst.If(cst.parse_expression("self.strict_checks"), cst.IndentedBlock([updated_node]))
        return updated_node


def wrap_in_if(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _WrapInIf()))


def _newline(indent_last: str) -> cst.ParenthesizedWhitespace:
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(),
        empty_lines=[],
        indent=True,
        last_line=cst.SimpleWhitespace(indent_last),
    )


class _SplitCalls(cst.CSTTransformer):
    """Puts every argument of every call on its own line, with a trailing comma (not inside
    f-strings: a line break in a replacement field is a syntax error before Python 3.12)."""

    def __init__(self) -> None:
        super().__init__()
        self._fstrings = 0

    def visit_FormattedString(self, node) -> None:
        self._fstrings += 1

    def leave_FormattedString(self, original_node, updated_node):
        self._fstrings -= 1
        return updated_node

    def leave_Call(self, original_node, updated_node):
        if not updated_node.args or self._fstrings:
            return updated_node
        args = [
            a.with_changes(comma=cst.Comma(whitespace_after=_newline("    " if i < len(updated_node.args) - 1 else "")))
            for i, a in enumerate(updated_node.args)
        ]
        return updated_node.with_changes(whitespace_before_args=_newline("    "), args=args)


def split_lines(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _SplitCalls()))


NOTE = f"# note: {COMPACTION}(rows) must follow {SWITCH}(True); see the design doc"


class _Comments(cst.CSTTransformer):
    """A comment line before every statement, and one at the end of every simple one."""

    def _lead(self, node):
        return node.with_changes(leading_lines=[*node.leading_lines, cst.EmptyLine(comment=cst.Comment(NOTE))])

    def leave_SimpleStatementLine(self, original_node, updated_node):
        updated_node = self._lead(updated_node)
        return updated_node.with_changes(
            trailing_whitespace=cst.TrailingWhitespace(
                whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(f"# {COMPACTION}()")
            )
        )

    def leave_If(self, original_node, updated_node):
        return self._lead(updated_node)

    def leave_For(self, original_node, updated_node):
        return self._lead(updated_node)

    def leave_With(self, original_node, updated_node):
        return self._lead(updated_node)

    def leave_FunctionDef(self, original_node, updated_node):
        return self._lead(updated_node)


def add_comments(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _Comments()))


class _TypeIn(cst.CSTTransformer):
    """`isinstance(x, T)` -> `(type(x) in (T,))`; `(type(x) in Ts)` for a tuple of types."""

    def leave_Call(self, original_node, updated_node):
        if not m.matches(updated_node.func, m.Name("isinstance")) or len(updated_node.args) != 2:
            return updated_node
        value, types = (_code(a.value) for a in updated_node.args)
        many = types.endswith("types") or isinstance(updated_node.args[1].value, cst.Tuple)
        return cst.parse_expression(f"(type({value}) in {types if many else f'({types},)'})")


def isinstance_to_type(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _TypeIn()))


def swap_switch_and_compaction(files: Files) -> Files | None:
    """Adjacent switch and compaction statements change places (same step either way)."""

    class Swap(cst.CSTTransformer):
        def leave_IndentedBlock(self, original_node, updated_node):
            body = list(updated_node.body)
            for i in range(len(body) - 1):
                a, b = body[i], body[i + 1]
                pair = {_stmt_calling(a, SWITCH), _stmt_calling(b, SWITCH)}
                comp = {_stmt_calling(a, COMPACTION), _stmt_calling(b, COMPACTION)}
                if pair == {True, False} and comp == {True, False}:
                    body[i], body[i + 1] = b, a
                    return updated_node.with_changes(body=body)
            return updated_node

    return _changed(files, _apply(files[MAIN], Swap()))


# -- bug-injecting rewrites ----------------------------------------------------------------------


class _Remove(cst.CSTTransformer):
    def __init__(self, pred: Callable[[cst.CSTNode], bool]) -> None:
        self.pred = pred

    def leave_SimpleStatementLine(self, original_node, updated_node):
        return cst.RemovalSentinel.REMOVE if self.pred(original_node) else updated_node


def delete_compaction(files: Files) -> Files | None:
    return _changed(files, _apply(files[MAIN], _Remove(lambda s: _stmt_calling(s, COMPACTION))))


def compaction_after_forward(files: Files) -> Files | None:
    """The compaction moves to just after the first forward that follows the switch."""
    module = cst.parse_module(files[MAIN])
    wrapper = MetadataWrapper(module)
    pos = wrapper.resolve(PositionProvider)
    stmts = [n for n in pos if isinstance(n, cst.SimpleStatementLine)]
    compactions = [s for s in stmts if _stmt_calling(s, COMPACTION)]
    switches = [s for s in stmts if any(_is_switch_on(c) for c in m.findall(s, m.Call()))]
    if len(compactions) != 1 or len(switches) != 1:
        return None
    switch_line = pos[switches[0]].start.line
    forwards = sorted(
        (s for s in stmts if _is_forward_stmt(s) and pos[s].start.line > switch_line),
        key=lambda s: pos[s].start.line,
    )
    if not forwards:
        return None
    comp, target = compactions[0], forwards[0]

    class Move(cst.CSTTransformer):
        def leave_SimpleStatementLine(self, original_node, updated_node):
            if original_node is comp:
                return cst.RemovalSentinel.REMOVE
            if original_node is target:
                return cst.FlattenSentinel([updated_node, comp])
            return updated_node

    source = wrapper.module.visit(Move()).visit(_FixEmptyBlocks()).code
    return _changed(files, source)


def check_after_loop(files: Files) -> Files | None:
    """A per-group check inside a `for` body moves to just after that loop."""

    def is_check(stmt: cst.CSTNode) -> bool:
        if isinstance(stmt, cst.If):
            return bool(_calls_named(stmt.test, "isinstance") or _calls_named(stmt.test, "type"))
        return isinstance(stmt, cst.SimpleStatementLine) and bool(
            m.findall(stmt, m.Assert()) and (_calls_named(stmt, "isinstance") or _calls_named(stmt, "type"))
        )

    class Move(cst.CSTTransformer):
        def __init__(self):
            self.moved = 0

        def leave_For(self, original_node, updated_node):
            body = list(updated_node.body.body)
            checks = [s for s in body if is_check(s)]
            if not checks or self.moved:
                return updated_node
            self.moved += 1
            rest = [s for s in body if not is_check(s)] or [cst.SimpleStatementLine([cst.Pass()])]
            new_for = updated_node.with_changes(body=updated_node.body.with_changes(body=rest))
            return cst.FlattenSentinel([new_for, *checks])

    return _changed(files, _apply(files[MAIN], Move()))


@dataclass(frozen=True)
class Rewrite:
    name: str
    injects: bool  # True: turns fixed code into buggy code
    apply: Callable[[Files], Files | None]
    rules: tuple[str, ...] = ("IC001", "IC002")


def combined(files: Files) -> Files | None:
    """Every meaning-preserving rewrite that applies, one after the other."""
    out, steps = dict(files), 0
    for step in (
        rename_locals,
        rename_receiver,
        helper_chain,
        swap_switch_and_compaction,
        wrap_in_if,
        isinstance_to_type,
        split_lines,
        add_comments,
    ):
        new = step(out)
        if new is not None:
            out, steps = new, steps + 1
    return out if steps > 1 else None


REWRITES = [
    Rewrite("identity", False, lambda files: dict(files)),
    Rewrite("rename-locals", False, rename_locals),
    Rewrite("rename-receiver", False, rename_receiver, ("IC002",)),
    Rewrite("alias-receiver", False, alias_receiver, ("IC002",)),
    Rewrite("alias-model", False, alias_model, ("IC002",)),
    Rewrite("helper-module", False, helper_module, ("IC002",)),
    Rewrite("helper-chain", False, helper_chain, ("IC002",)),
    Rewrite("helper-method", False, helper_method, ("IC002",)),
    Rewrite("swap-switch-compaction", False, swap_switch_and_compaction, ("IC002",)),
    Rewrite("wrap-in-if", False, wrap_in_if),
    Rewrite("split-lines", False, split_lines),
    Rewrite("add-comments", False, add_comments),
    Rewrite("isinstance-to-type", False, isinstance_to_type, ("IC001",)),
    Rewrite("combined", False, combined),
    Rewrite("delete-compaction", True, delete_compaction, ("IC002",)),
    Rewrite("compaction-after-forward", True, compaction_after_forward, ("IC002",)),
    Rewrite("check-after-loop", True, check_after_loop, ("IC001",)),
]


# -- running -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    rewrite: str  # a rewrite's name, or "<injecting> + preserving"
    fixture: str
    rule: str
    expect_report: bool
    reported: bool
    lines: list[int] = field(default_factory=list)
    expected_lines: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Reported exactly at the expected lines (each once), or not at all for a clean variant."""
        if not self.expect_report:
            return not self.reported
        return self.reported and sorted(self.lines) == sorted(self.expected_lines)


def switch_lines(source: str) -> list[int]:
    """IC002's sites: every call switching top-k reuse on."""
    wrapper = MetadataWrapper(cst.parse_module(source))
    pos = wrapper.resolve(PositionProvider)
    return sorted(pos[c].start.line for c in pos if isinstance(c, cst.Call) and _is_switch_on(c))


def check_lines(source: str) -> list[int]:
    """IC001's sites: the `isinstance(...)`/`type(...)` calls in the test of an `if` or an
    `assert` outside every `for` loop (a check of the metadata the loop left from its last
    group); the calls' first lines."""
    wrapper = MetadataWrapper(cst.parse_module(source))
    pos = wrapper.resolve(PositionProvider)
    lines: set[int] = set()

    class Visit(cst.CSTVisitor):
        def __init__(self):
            self.loops = 0

        def visit_For(self, node):
            self.loops += 1

        def leave_For(self, node):
            self.loops -= 1

        def _test(self, test):
            if self.loops:
                return
            for name in ("isinstance", "type"):
                for call in _calls_named(test, name):
                    lines.add(pos[call].start.line)

        def visit_If(self, node):
            self._test(node.test)

        def visit_Assert(self, node):
            self._test(node.test)

    wrapper.visit(Visit())
    return sorted(lines)


def expected_lines(rule: str, source: str) -> list[int]:
    return switch_lines(source) if rule == "IC002" else check_lines(source)


def lint(files: Files, rule: str, *, prefilter: bool = True) -> list[int]:
    """Lines of `rule`'s findings in the main module, from the real engine."""
    cls = all_rules()[rule]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        root.mkdir()
        for name, text in files.items():
            (root / name).write_text(text)
        engine = Engine(
            [cls], {rule: cls.default_options()}, prefilter=prefilter, jobs=1, root=root, cwd=root
        )
        result = engine.lint(sorted(root.rglob("*.py")))
        if result.errors:
            raise AssertionError(f"variant did not lint cleanly: {result.errors}")
        return [f.line for f in result.findings if f.path == MAIN and f.rule == rule]


def variants(rules: set[str] | None = None):
    """(rewrite name, fixture, files, expect_report) for every rewrite that applies."""
    for rw in REWRITES:
        for fx in fixtures():
            if fx.rule not in rw.rules or (rules is not None and fx.rule not in rules):
                continue
            if rw.injects and fx.buggy:
                continue  # injecting a bug needs a fixed fixture
            files = rw.apply(dict(fx.files))
            if files is None:
                continue
            yield rw.name, fx, files, fx.buggy or rw.injects
            if not rw.injects:
                continue
            # The injected bug must survive every meaning-preserving rewrite too.
            for then in REWRITES:
                if then.injects or then.name == "identity" or fx.rule not in then.rules:
                    continue
                again = then.apply(dict(files))
                if again is not None:
                    yield f"{rw.name} + preserving", fx, again, True


def run(rules: set[str] | None = None) -> list[Outcome]:
    available = set(all_rules())
    wanted = (rules or {"IC001", "IC002"}) & available
    out = []
    for name, fx, files, expect in variants(wanted):
        lines = lint(files, fx.rule)
        expected = expected_lines(fx.rule, files[MAIN]) if expect else []
        out.append(Outcome(name, fx.name, fx.rule, expect, bool(lines), lines, expected))
    return out


@dataclass
class Row:
    rewrite: str
    kind: str
    rule: str
    buggy_variants: int
    detected: int
    clean_variants: int
    false_alarms: int

    @property
    def detection_rate(self) -> float | None:
        return self.detected / self.buggy_variants if self.buggy_variants else None

    @property
    def false_alarm_rate(self) -> float | None:
        return self.false_alarms / self.clean_variants if self.clean_variants else None


def table(outcomes: list[Outcome]) -> list[Row]:
    kinds = {rw.name: ("injects bug" if rw.injects else "preserves") for rw in REWRITES}
    kinds.update({f"{rw.name} + preserving": "injects bug" for rw in REWRITES if rw.injects})
    rows: dict[tuple[str, str], Row] = {}
    for o in outcomes:
        row = rows.setdefault((o.rewrite, o.rule), Row(o.rewrite, kinds[o.rewrite], o.rule, 0, 0, 0, 0))
        if o.expect_report:
            row.buggy_variants += 1
            row.detected += o.ok
        else:
            row.clean_variants += 1
            row.false_alarms += not o.ok
    order = {name: i for i, name in enumerate(kinds)}
    return sorted(rows.values(), key=lambda r: (r.rule, order[r.rewrite]))


def table_rows_for(rule: str) -> list[str]:
    """The table rows a full run must produce for `rule` (rewrites, and injections followed
    by preserving rewrites)."""
    names = [rw.name for rw in REWRITES if rule in rw.rules]
    names += [f"{rw.name} + preserving" for rw in REWRITES if rw.injects and rule in rw.rules]
    return names


def format_table(rows: list[Row]) -> str:
    def pct(x: float | None) -> str:
        return "  n/a" if x is None else f"{100 * x:4.0f}%"

    head = f"{'rule':5} {'rewrite':36} {'kind':12} {'detected':>10} {'rate':>6} {'false alarms':>13} {'rate':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.rule:5} {r.rewrite:36} {r.kind:12} {f'{r.detected}/{r.buggy_variants}':>10} "
            f"{pct(r.detection_rate):>6} {f'{r.false_alarms}/{r.clean_variants}':>13} {pct(r.false_alarm_rate):>6}"
        )
    for rule in sorted({r.rule for r in rows}):
        sel = [r for r in rows if r.rule == rule]
        b = sum(r.buggy_variants for r in sel)
        d = sum(r.detected for r in sel)
        c = sum(r.clean_variants for r in sel)
        f = sum(r.false_alarms for r in sel)
        lines.append(
            f"{rule:5} {'ALL':36} {'':12} {f'{d}/{b}':>10} {pct(d / b if b else None):>6} "
            f"{f'{f}/{c}':>13} {pct(f / c if c else None):>6}"
        )
    return "\n".join(lines)
