from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import libcst as cst

from invariant_check.rule import Rule
from invariant_check.types import Invalid, Option, Valid

from ._names import code_of, dotted


@dataclass
class _Produced:
    """A value whose current binding is the last one a loop produced."""

    loop: cst.For


@dataclass
class _Acc:
    """What a loop body binds (at any depth, outside nested defs) and whether it breaks."""

    names: set[str] = field(default_factory=set)
    breaks: bool = False


class LastEntryValidation(Rule):
    """
    ## What it does
    Flags a validation that, after a loop which produced one value per layer or per group,
    checks only the value of the loop's last iteration: `isinstance(x, T)`, `type(x) is T`,
    `assert ...x...` or `if ...x...: raise`, where `x` was assigned inside a `for` loop (or is
    its loop variable) and is checked after the loop ends. Also flags checks that look at one
    entry of a collection of metadata on purpose: `d[names[-1]]`, `list(d.values())[-1]`,
    `next(reversed(d.values()))`, and the first entry via `next(iter(d.values()))`.

    Only names that look like attention metadata are considered (see `metadata-names`), or
    checks against a type that looks like one (see `metadata-types`).

    ## Why is this bad?
    Each attention group (or layer) gets its own metadata, possibly of a different type. A
    check after the loop sees only the last group's value, so the outcome depends on group
    order: an unsupported backend in any other group slips through. This shipped in vLLM
    0.18/0.19 (`eagle.py`: `isinstance(attn_metadata, self.allowed_attn_types)` after
    `for attn_group in self.draft_attn_groups:`), fixed in 0.20.0 by PR #37887.

    ## Example
    ```python
    for attn_group in self.draft_attn_groups:
        attn_metadata = attn_group.build(common_attn_metadata)
        for layer_name in attn_group.layer_names:
            per_layer_attn_metadata[layer_name] = attn_metadata
    if not isinstance(attn_metadata, self.allowed_attn_types):
        raise ValueError("unsupported attention metadata")
    ```

    ## Use instead
    ```python
    for attn_metadata in per_group_attn_metadata.values():
        if not isinstance(attn_metadata, self.allowed_attn_types):
            raise ValueError("unsupported attention metadata")
    ```

    Not flagged: a search loop that `break`s, a name reassigned between the loop and the
    check, a loop over a one-element collection (`[x]`, `(x,)`, `range(1)`, `xs[:1]`, or after
    `assert len(xs) == 1`), and checks inside the loop. Attribute targets (`self.md = ...`)
    and `while` loops are not tracked.

    ## Options
    - `metadata-names` (globs, case-insensitive): names that hold attention metadata.
      Default `*metadata*`, `*attn_md*`, `*_md`, `md`. Measured on the whole `vllm/` tree of
      six releases (0.18.0 to 0.33.0): with every loop-assigned name (`*`) the rule reports
      38 findings, 34 of them on correct code (counters, search results, last-batch values);
      `*metadata*` alone and the default both report exactly the 4 known sites. The default
      adds the short spellings vLLM's drafters use (`group_md`, `attn_md`, `md`).
    - `metadata-types` (globs): type names that mark a check as a metadata check whatever
      the variable is called. Default `*Metadata`, `*attn_types` (as in
      `self.allowed_attn_types`).
    """

    CODE = "IC001"
    NAME = "last-entry-validation"
    SUMMARY = "A check after a per-group loop validates only the last group's metadata."
    HINT = "Check every entry: move the check into the loop, or iterate the per-group values."
    OPTIONS = {
        "metadata-names": Option(
            ["*metadata*", "*attn_md*", "*_md", "md"],
            "globs for variable names that hold attention metadata",
        ),
        "metadata-types": Option(
            ["*Metadata", "*attn_types"],
            "globs for the names of metadata types (or of the attribute holding them)",
        ),
    }

    VALID = [
        Valid(
            """
def propose(self, groups):
    for group in groups:
        attn_metadata = group.build()
        if not isinstance(attn_metadata, self.allowed_attn_types):
            raise ValueError("unsupported")
"""
        ),
        Valid(
            """
def propose(self, per_group_attn_metadata):
    for attn_metadata in per_group_attn_metadata.values():
        assert isinstance(attn_metadata, FlashAttentionMetadata)
"""
        ),
        Valid(
            """
def find(groups):
    for group in groups:
        attn_metadata = group.metadata
        if attn_metadata.ready:
            break
    assert attn_metadata is not None
"""
        ),
        Valid(
            """
def propose(groups, common):
    for group in groups:
        attn_metadata = group.build()
    attn_metadata = common.build()
    if not isinstance(attn_metadata, FlashAttentionMetadata):
        raise ValueError("unsupported")
"""
        ),
        Valid(
            """
def propose(group, common):
    for g in [group]:
        attn_metadata = g.build()
    assert isinstance(attn_metadata, FlashAttentionMetadata)
"""
        ),
        Valid(
            """
def propose(groups):
    assert len(groups) == 1
    for g in groups:
        attn_metadata = g.build()
    assert isinstance(attn_metadata, FlashAttentionMetadata)
"""
        ),
        Valid(
            """
def collect(self, metadata):
    kinds = {
        report.kind
        for report in metadata.values()
        if isinstance(report, HandshakeMetadata)
    }
    return kinds
"""
        ),
        Valid(
            """
def count(items):
    for item in items:
        total = item.size
    assert total > 0
"""
        ),
    ]
    INVALID = [
        Invalid(
            """
def propose(self, common_attn_metadata):
    per_layer_attn_metadata = {}
    for attn_group in self.draft_attn_groups:
        attn_metadata = attn_group.build(common_attn_metadata)
        for layer_name in attn_group.layer_names:
            per_layer_attn_metadata[layer_name] = attn_metadata
    if self.allowed_attn_types is not None and not isinstance(
        attn_metadata, self.allowed_attn_types
    ):
        raise ValueError("unsupported attention metadata")
""",
            line=7,
            column=52,
            message_contains="self.draft_attn_groups",
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        attn_metadata = group.build()
    if isinstance(attn_metadata, TreeAttentionMetadata):
        return self.propose_tree()
""",
            line=4,
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        md = group.build()
    assert type(md) in (FlashAttentionMetadata,)
""",
            line=4,
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        attn_md = group.build()
    if attn_md.num_actual_tokens > self.max_tokens:
        raise RuntimeError("too many tokens")
""",
            line=4,
        ),
        Invalid(
            """
def check(self, layer_names, per_layer_metadata):
    assert isinstance(per_layer_metadata[layer_names[-1]], FlashAttentionMetadata)
""",
            line=2,
            message_contains="last",
        ),
        Invalid(
            """
def check(self, attn_metadata):
    if not isinstance(next(iter(attn_metadata.values())), self.allowed_attn_types):
        raise ValueError("unsupported")
""",
            line=2,
            message_contains="first",
        ),
        Invalid(
            """
def check(self, attn_metadata):
    assert isinstance(list(attn_metadata.values())[-1], FlashAttentionMetadata)
""",
            line=2,
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        state = group.build()
    assert isinstance(state, FlashAttentionMetadata)
""",
            line=4,
        ),
        Invalid(
            """
def propose(self, groups):
    for attn_group in self.draft_attn_groups:
        attn_metadata, extra = attn_group.build()
    assert isinstance(attn_metadata, FlashAttentionMetadata)
""",
            line=4,
        ),
        Invalid(
            """
def propose(self):
    for attn_group in self.draft_attn_groups:
        built = attn_group.build()
    if not isinstance(built, self.allowed_attn_types):
        raise ValueError("unsupported")
""",
            line=4,
        ),
        Invalid(
            """
def propose(self, groups):
    mds = [g.build() for g in groups]
    assert isinstance(mds[-1], FlashDraftMetadata)
""",
            line=3,
            message_contains="last",
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups: attn_metadata = group.build()
    if attn_metadata is None: raise ValueError("no metadata")
""",
            line=3,
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        plan = group.build()
    assert isinstance(plan, Plan)
""",
            line=4,
            options={"metadata-names": ["plan"]},
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        plan2 = group.build()
    assert isinstance (plan2, Plan)
""",
            line=4,
            options={"metadata-names": ["plan[0-9]"]},
        ),
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        AttnMetaData = group.build()
    if not isinstance(AttnMetaData, self.allowed):
        raise ValueError("unsupported")
""",
            line=4,
        ),
    ]

    # -- prefilter -------------------------------------------------------------------------
    @classmethod
    def triggers(cls, options: dict[str, Any]) -> tuple[str, ...]:
        # Every finding sits at a check. Metadata names match case-insensitively, which a
        # substring cannot express; `may_apply` looks for them in the lower-cased text.
        return ("isinstance", "type", "assert", "raise")

    @classmethod
    def may_apply(cls, source: bytes, options: dict[str, Any]) -> bool:
        return _may_apply(source, tuple(options["metadata-names"]), tuple(options["metadata-types"]))

    # -- analysis --------------------------------------------------------------------------
    def __init__(self, context) -> None:
        super().__init__(context)
        self._name_re = _glob_regex(tuple(self.options["metadata-names"]), re.IGNORECASE)
        self._type_re = _glob_regex(tuple(self.options["metadata-types"]), 0)

    def visit_Module(self, node: cst.Module) -> None:
        self._block(node.body, {}, set(), _Acc())

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if isinstance(node.body, cst.IndentedBlock):
            self._block(node.body.body, {}, set(), _Acc())

    # One walk over each function's statements, in order. `acc` collects what the innermost
    # enclosing loop binds and whether it breaks, so no loop body is walked twice.
    def _block(self, stmts, state: dict[str, _Produced], singles: set[str], acc: _Acc) -> None:
        for stmt in stmts:
            self._stmt(stmt, state, singles, acc)

    def _stmt(self, stmt, state, singles, acc: _Acc) -> None:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            state.pop(stmt.name.value, None)
            acc.names.add(stmt.name.value)
            return  # their own scope; visited separately
        if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in stmt.body:
                if isinstance(small, cst.Assert):
                    self._check_expr(small.test, small, state, assert_like=True)
                    single = _len_one_subject(small.test)
                    if single:
                        singles.add(single)
                elif isinstance(small, cst.Break):
                    acc.breaks = True
                for name in _bound_names_small(small):
                    state.pop(name, None)
                    acc.names.add(name)
            return
        if isinstance(stmt, cst.If):
            self._check_if(stmt, state)
            body_state = dict(state)
            self._block(_body(stmt.body), body_state, set(singles), acc)
            else_state = dict(state)
            if isinstance(stmt.orelse, cst.If):
                self._stmt(stmt.orelse, else_state, set(singles), acc)
            elif stmt.orelse is not None:
                self._block(_body(stmt.orelse.body), else_state, set(singles), acc)
            _merge(state, body_state, else_state)
            return
        if isinstance(stmt, (cst.For, cst.While)):
            self._loop(stmt, state, singles, acc)
            return
        if isinstance(stmt, (cst.Try, getattr(cst, "TryStar", cst.Try))):
            self._block(_body(stmt.body), state, singles, acc)
            for handler in stmt.handlers:
                if handler.name is not None:
                    for name in _target_names(handler.name.name):
                        state.pop(name, None)
                        acc.names.add(name)
                self._block(_body(handler.body), state, singles, acc)
            if stmt.orelse is not None:
                self._block(_body(stmt.orelse.body), state, singles, acc)
            if stmt.finalbody is not None:
                self._block(_body(stmt.finalbody.body), state, singles, acc)
            return
        if isinstance(stmt, cst.With):
            for item in stmt.items:
                if item.asname is not None:
                    for name in _target_names(item.asname.name):
                        state.pop(name, None)
                        acc.names.add(name)
            self._block(_body(stmt.body), state, singles, acc)
            return
        if hasattr(cst, "Match") and isinstance(stmt, cst.Match):
            before = dict(state)
            for case in stmt.cases:
                case_state = dict(before)
                self._block(_body(case.body), case_state, set(singles), acc)
                for name in set(before) - set(case_state):
                    state.pop(name, None)
            for name in _pattern_names(stmt):
                state.pop(name, None)
                acc.names.add(name)
            return

    def _loop(self, loop, state, singles, acc: _Acc) -> None:
        inner_acc = _Acc()
        targets = _target_names(loop.target) if isinstance(loop, cst.For) else []
        inner = dict(state)
        for name in targets:
            inner.pop(name, None)
        self._block(_body(loop.body), inner, set(singles), inner_acc)
        bound = inner_acc.names | set(targets)
        acc.names |= bound
        for name in bound:
            state.pop(name, None)
        if (
            isinstance(loop, cst.For)
            and not inner_acc.breaks
            and not _single_element(loop.iter, singles)
        ):
            for name in bound:
                state[name] = _Produced(loop)
        if loop.orelse is not None:
            self._block(_body(loop.orelse.body), state, singles, acc)

    # -- checks ----------------------------------------------------------------------------
    def _check_if(self, node: cst.If, state) -> None:
        raises = any(
            isinstance(s, (cst.SimpleStatementLine, cst.SimpleStatementSuite))
            and any(isinstance(x, cst.Raise) for x in s.body)
            for s in _body(node.body)
        )
        self._check_expr(node.test, node, state, assert_like=raises)

    def _check_expr(self, test: cst.BaseExpression, owner, state, *, assert_like: bool) -> None:
        """Report the first last-entry check found in `test`; one finding per statement."""
        # 1. isinstance(x, T) / type(x) <op> T anywhere in the test
        for call in _walk_calls(test):
            fname = dotted(call.func)
            if fname == "isinstance" and len(call.args) >= 2:
                subject, types = call.args[0].value, call.args[1].value
                if self._report_subject(call, subject, state, types):
                    return
            if fname == "type" and len(call.args) == 1:
                if self._report_subject(call, call.args[0].value, state, _compared_types(test, call)):
                    return
        # 2. assert / if ...: raise that mentions a loop-produced metadata value
        if assert_like:
            for name in _names_in(test):
                produced = state.get(name)
                if produced is not None and self._is_md_name(name):
                    self._report_loop(test, name, produced, "checks")
                    return
            for sub in _walk_exprs(test):
                shape = self._entry_shape(sub)
                if shape:
                    self._report_shape(test, *shape)
                    return

    def _report_subject(self, check, subject, state, types) -> bool:
        shape = self._entry_shape(subject, md_type=self._is_md_type(types))
        if shape:
            self._report_shape(check, *shape)
            return True
        root = _root_name(subject)
        if root is None or root not in state:
            return False
        if not (self._is_md_name(root) or self._is_md_type(types)):
            return False
        self._report_loop(check, root, state[root], "validates")
        return True

    def _report_loop(self, node, name: str, produced: _Produced, verb: str) -> None:
        check = _one_line(code_of(node))
        loop = produced.loop
        header = _one_line(f"for {code_of(loop.target)} in {code_of(loop.iter)}")
        collection = _collection_of(loop, name)
        where = (
            f"iterate `{collection}.values()`"
            if collection
            else f"move the check into the loop `{header}`"
        )
        self.report(
            node,
            f"`{check}` {verb} only the last `{name}` produced by the loop "
            f"`{header}`; every other entry goes unchecked",
            hint=f"Check every entry: {where}, and check each value there.",
        )

    def _report_shape(self, node, which: str, collection: str) -> None:
        self.report(
            node,
            f"`{_one_line(code_of(node))}` checks only the {which} entry of `{collection}`; "
            f"the other entries go unchecked",
            hint=f"Check every entry: `for value in {collection}.values(): ...`.",
        )

    def _entry_shape(self, expr, md_type: bool = False) -> tuple[str, str] | None:
        """('last'|'first', collection) for one-entry access shapes on metadata collections
        (a metadata-like name, or any collection when checked against a metadata type)."""
        # d[names[-1]] and d[-1]
        if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
            index = expr.slice[0].slice
            if isinstance(index, cst.Index):
                inner = index.value
                base = expr.value
                if _is_minus_one(inner) or (
                    isinstance(inner, cst.Subscript)
                    and len(inner.slice) == 1
                    and isinstance(inner.slice[0].slice, cst.Index)
                    and _is_minus_one(inner.slice[0].slice.value)
                ):
                    coll = _values_source(base)
                    if coll and (md_type or self._is_md_name(coll.rsplit(".", 1)[-1])):
                        return ("last", coll)
        # next(reversed(d...)) / next(iter(d...))
        if isinstance(expr, cst.Call) and dotted(expr.func) == "next" and expr.args:
            arg = expr.args[0].value
            if isinstance(arg, cst.Call) and dotted(arg.func) in ("reversed", "iter") and arg.args:
                coll = _values_source(arg.args[0].value)
                if coll and (md_type or self._is_md_name(coll.rsplit(".", 1)[-1])):
                    return ("last" if dotted(arg.func) == "reversed" else "first", coll)
        return None

    def _is_md_name(self, name: str) -> bool:
        return bool(self._name_re.fullmatch(name))

    def _is_md_type(self, types) -> bool:
        if types is None:
            return False
        names = []
        for sub in _walk_exprs(types):
            if isinstance(sub, (cst.Name, cst.Attribute)):
                d = dotted(sub)
                if d:
                    names.append(d.rsplit(".", 1)[-1])
        return any(self._type_re.fullmatch(n) for n in names)


# -- helpers ------------------------------------------------------------------------------------
def _body(block) -> list:
    return list(block.body) if isinstance(block, cst.IndentedBlock) else [block]


def _merge(state, a, b) -> None:
    """After an if/else: keep a loop-produced binding only if both branches keep it."""
    state.clear()
    # A loop in one branch only: the value may come from before; stay quiet.
    for name, produced in a.items():
        if b.get(name) is produced:
            state[name] = produced


def _target_names(target) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        out = []
        for el in target.elements:
            out.extend(_target_names(el.value))
        return out
    if isinstance(target, cst.StarredElement):
        return _target_names(target.value)
    return []


def _bound_names_small(small) -> list[str]:
    if isinstance(small, cst.Assign):
        return [n for t in small.targets for n in _target_names(t.target)]
    if isinstance(small, (cst.AnnAssign, cst.AugAssign)):
        return _target_names(small.target)
    if isinstance(small, cst.Del):
        return _target_names(small.target)
    if isinstance(small, (cst.Import, cst.ImportFrom)):
        names = small.names if not isinstance(small.names, cst.ImportStar) else []
        return [
            (a.asname.name.value if a.asname else dotted(a.name).split(".")[0])
            for a in names
            if isinstance(getattr(a.asname, "name", None), cst.Name) or a.asname is None
        ]
    return []


def _pattern_names(match) -> set[str]:
    names = set()
    for node in _walk_exprs(match):
        if type(node).__name__ == "MatchAs" and getattr(node, "name", None) is not None:
            names.add(node.name.value)
        elif type(node).__name__ == "MatchStar" and getattr(node, "name", None) is not None:
            names.add(node.name.value)
    return names


def _single_element(it, singles: set[str]) -> bool:
    if isinstance(it, (cst.List, cst.Tuple, cst.Set)):
        return len(it.elements) == 1 and not isinstance(it.elements[0], cst.StarredElement)
    if (
        isinstance(it, cst.Call)
        and _is_name(it.func, "range")
        and len(it.args) == 1
        and _is_int(it.args[0].value, "1")
    ):
        return True
    if isinstance(it, cst.Subscript) and len(it.slice) == 1:
        sl = it.slice[0].slice
        if isinstance(sl, cst.Slice) and sl.step is None:
            lower = code_of(sl.lower) if sl.lower is not None else "0"
            upper = code_of(sl.upper) if sl.upper is not None else None
            if (lower, upper) in {("0", "1"), ("-1", None)}:
                return True
    return code_of(it) in singles


def _len_one_subject(test) -> str | None:
    """`xs` from `assert len(xs) == 1`."""
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.Equal)
        and isinstance(test.left, cst.Call)
        and _is_name(test.left.func, "len")
        and len(test.left.args) == 1
        and _is_int(test.comparisons[0].comparator, "1")
    ):
        return code_of(test.left.args[0].value)
    return None


def _collection_of(loop, name: str) -> str | None:
    """`d` if the loop body also stores `name` into `d[...]` or `d.append(name)`."""
    found: list[str] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, node) -> None:
            if _is_name(node.value, name):
                for t in node.targets:
                    if isinstance(t.target, cst.Subscript):
                        d = dotted(t.target.value)
                        if d:
                            found.append(d)

        def visit_Call(self, node) -> None:
            if (
                isinstance(node.func, cst.Attribute)
                and node.func.attr.value in ("append", "add")
                and len(node.args) == 1
                and _is_name(node.args[0].value, name)
            ):
                d = dotted(node.func.value)
                if d:
                    found.append(d)

    for stmt in _body(loop.body):
        stmt.visit(V())
    return found[0] if found else None


def _walk_exprs(expr):
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (cst.Lambda, cst.BaseComp if hasattr(cst, "BaseComp") else ())):
            continue
        stack.extend(reversed(list(node.children)))


def _walk_calls(expr):
    for node in _walk_exprs(expr):
        if isinstance(node, cst.Call):
            yield node


def _names_in(expr) -> list[str]:
    out = []
    for node in _walk_exprs(expr):
        if isinstance(node, cst.Name):
            out.append(node.value)
    return out


def _root_name(expr) -> str | None:
    while isinstance(expr, (cst.Attribute, cst.Subscript, cst.Call)):
        expr = expr.func if isinstance(expr, cst.Call) else expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _compared_types(test, type_call) -> cst.BaseExpression | None:
    for node in _walk_exprs(test):
        if isinstance(node, cst.Comparison) and node.left is type_call and node.comparisons:
            return node.comparisons[0].comparator
    return None


def _is_minus_one(expr) -> bool:
    return (
        isinstance(expr, cst.UnaryOperation)
        and isinstance(expr.operator, cst.Minus)
        and _is_int(expr.expression, "1")
    )


# Plain isinstance tests instead of libcst.matchers: importing matchers costs ~0.14 s, which
# is a third of a one-file pre-commit run.
def _is_name(node, value: str) -> bool:
    return isinstance(node, cst.Name) and node.value == value


def _is_int(node, value: str) -> bool:
    return isinstance(node, cst.Integer) and node.value == value


def _values_source(expr) -> str | None:
    """`d` for `d`, `d.values()`, `d.items()`, `d.keys()`, `list(d.values())`, `tuple(d)`."""
    if isinstance(expr, cst.Call) and dotted(expr.func) in ("list", "tuple") and len(expr.args) == 1:
        expr = expr.args[0].value
    if (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("values", "items", "keys")
        and not expr.args
    ):
        expr = expr.func.value
    return dotted(expr)


def _one_line(code: str, limit: int = 80) -> str:
    text = " ".join(code.split())
    text = re.sub(r"\(\s+", "(", text)
    text = re.sub(r"\s+\)", ")", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _glob_to_regex(glob: str) -> str:
    """An option glob as a regex over identifiers: `*` any run of word characters (lazy, so
    that the literal part is found without quadratic backtracking), `?` one, `[...]` a
    class. The rule and its prefilter both use this, so they agree on what matches."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        close = glob.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append(r"\w*?")
        elif c == "?":
            out.append(r"\w")
        elif close > 0:
            body = glob[i + 1 : close]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = close
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _glob_literal(glob: str) -> str:
    """The longest run of plain characters of a glob: text without it cannot match."""
    return max(re.split(r"\[[^\]]*\]|[*?]", glob), key=len)


@lru_cache(maxsize=16)
def _glob_regex(globs: tuple[str, ...], flags: int) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{_glob_to_regex(g)})" for g in globs) or "(?!)", flags)


# -- prefilter: a conservative textual look for "metadata assigned in a loop, checked after it"


def _glob_body(globs: tuple[str, ...]) -> bytes:
    return "|".join(_glob_to_regex(g) for g in globs).encode()


_MINUS_ONE = re.compile(rb"\[\s*-\s*1\s*\]")
_NEXT = re.compile(rb"next\(\s*(?:iter|reversed)\(")


@lru_cache(maxsize=16)
def _shape_context(globs: tuple[str, ...]) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    md = rb"\b(?:" + _glob_body(tuple(g.lower() for g in globs)) + rb")"
    before = re.compile(
        md + rb"\s*\[\s*(?:[\w.]+\s*)?\Z"  # d[-1], d[names[-1]]
        + rb"|" + md + rb"\s*\.\s*(?:values|items|keys)\(\s*\)\s*\)\s*\Z"  # list(d.values())[-1]
    )
    after = re.compile(rb"\s*(?:(?:list|tuple)\(\s*)?[\w.]*?" + md + rb"\b")
    return before, after


def _find_all(text: bytes, literal: bytes):
    """Positions of `literal`: bytes.find is much faster than a regex that must try every
    position of the file."""
    pos = text.find(literal)
    while pos >= 0:
        yield pos
        pos = text.find(literal, pos + 1)


def _has_shape(low: bytes, names: tuple[str, ...], start: int, end: int) -> bool:
    """A one-entry access of a metadata collection between `start` and `end`."""
    before, after = _shape_context(names)
    for hit in _MINUS_ONE.finditer(low, start, end):
        if before.search(low, max(start, hit.start() - 160), hit.start()):
            return True
    for pos in _find_all(low, b"next("):
        if pos >= end:
            break
        if pos < start:
            continue
        hit = _NEXT.match(low, pos)
        if hit and after.match(low, hit.end(), min(end, hit.end() + 160)):
            return True
    return False


_IF_LINE = re.compile(rb"^[ \t]*(?:el)?if\b", re.MULTILINE)
_SUBJECT = re.compile(rb"(?:isinstance|type)\s*\(\s*([a-z_][a-z0-9_]*)")
_CALL_PAREN = re.compile(rb"\s*\(")
_ID_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_")
# How far a check's test may reach; longer tests are not seen by the prefilter (the
# corpus and fixture tests compare prefiltered and unfiltered findings).
_WINDOW = 2000
_IF_LOOKBACK_LINES = 8


def _statement_end(text: bytes, start: int) -> int:
    """End of the logical line that starts at or contains `start` (bracket-balanced;
    brackets inside strings can only make it longer, which is the safe direction)."""
    balance = 0
    pos = start
    limit = min(len(text), start + _WINDOW)
    while pos < limit:
        nl = text.find(b"\n", pos)
        if nl < 0:
            return len(text)
        line = text[pos:nl]
        balance += line.count(b"(") + line.count(b"[") + line.count(b"{")
        balance -= line.count(b")") + line.count(b"]") + line.count(b"}")
        pos = nl + 1
        if balance <= 0 and not line.rstrip().endswith(b"\\"):
            return nl
    return limit


def _at_statement_start(text: bytes, pos: int, after_colon: bool = False) -> bool:
    """Whether a keyword at `pos` starts a statement: first on its line, after `;`, or
    (for `if x: raise`) after a colon."""
    line_start = text.rfind(b"\n", 0, pos) + 1
    head = text[line_start:pos].rstrip()
    return not head or head.endswith(b";") or (after_colon and head.endswith(b":"))


@lru_cache(maxsize=16)
def _md_matcher(globs: tuple[str, ...], lower: bool = True):
    if lower:
        globs = tuple(g.lower() for g in globs)
    lits = sorted({_glob_literal(g).encode() for g in globs}, key=len)
    minimal = [l for l in lits if not any(o != l and o in l for o in lits)]
    finder = re.compile(b"|".join(re.escape(l) for l in minimal) or b"(?!)")
    full = re.compile(_glob_body(globs))
    id_chars = _ID_CHARS | (frozenset() if lower else frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"))

    def names_in(text: bytes, start: int, end: int) -> set[bytes]:
        out = set()
        for mm in finder.finditer(text, start, end):
            a, b = mm.start(), mm.end()
            while a > start and text[a - 1] in id_chars:
                a -= 1
            while b < end and text[b] in id_chars:
                b += 1
            ident = text[a:b]
            if full.fullmatch(ident):
                out.add(ident)
        return out

    return names_in, tuple(minimal)


_FOR_PREFIX = re.compile(rb"[ \t]*(?:async[ \t]+)?for[ \t]")
_TARGET_PREFIX = re.compile(rb"[\w, ()*\[\]\t]*\Z")
# the name may be followed by more targets (`md, extra = ...`) or an annotation
_ASSIGN_SUFFIX = re.compile(rb"[^\n=]*?(?<![<>!=])=(?!=)")


def _bindings(low: bytes, subjects: set[bytes], last_site: dict[bytes, int]):
    """(match, line start) of each place a subject may be bound before its last check: a
    `for` target or the target side of an assignment, decided from the text of its line."""
    finder = re.compile(rb"\b(?:" + b"|".join(re.escape(x) for x in sorted(subjects)) + rb")\b")
    for mm in finder.finditer(low):
        if mm.start() >= last_site[mm.group(0)]:
            continue
        line_start = low.rfind(b"\n", 0, mm.start()) + 1
        head = low[line_start : mm.start()]
        if _FOR_PREFIX.match(head) and b" in " not in head:
            yield mm, line_start
            continue
        # the target side of an assignment, also after `:` or `;` on the same line
        tail = head.rsplit(b";", 1)[-1].rsplit(b":", 1)[-1]
        if _TARGET_PREFIX.match(tail) and _ASSIGN_SUFFIX.match(low, mm.end()):
            yield mm, line_start


_HEADER_WORDS = (b"for ", b"async for ", b"def ", b"async def ", b"class ")
_FOR_WORDS = (b"for ", b"async for ")


def _is_loop_header(stripped: bytes) -> bool:
    """A `for` line that starts a loop statement, not a comprehension's `for` clause: it has a
    colon (`for x in y:`, also one-line loops) or goes on to the next line."""
    return stripped.startswith(_FOR_WORDS) and (
        b":" in stripped or stripped.rstrip().endswith((b"(", b"[", b",", b"\\"))
    )


def _headers(lines: list[bytes]) -> tuple[list[int], list[tuple[int, bool]]]:
    """Line numbers of `for`/`def`/`class` lines, and for each (indent, is a for)."""
    at, info = [], []
    for idx, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(_HEADER_WORDS):
            is_for = stripped.startswith(_FOR_WORDS)
            if is_for and not _is_loop_header(stripped):
                continue  # a comprehension clause: no loop for the rule
            at.append(idx)
            info.append((len(line) - len(stripped), is_for))
    return at, info


def _may_apply(source: bytes, names: tuple[str, ...], types: tuple[str, ...]) -> bool:
    """Whether a finding is possible: a check whose subject may be metadata, after a `for`
    loop in the same function that binds that subject; or a one-entry shape. Works on the
    lower-cased text, line by line; it may let through a file without findings, and the
    tests prove on fixtures and on six vLLM releases that it drops none."""
    low = source.lower()
    md_names, md_lits = _md_matcher(names)
    # metadata types are matched case-sensitively, as the rule does
    ty_names, ty_lits = _md_matcher(types, lower=False) if types else (None, ())
    has_md = any(lit in low for lit in md_lits)
    has_ty = any(lit in source for lit in ty_lits)
    if not (has_md or has_ty):
        return False
    # The checks the rule reads: isinstance()/type() calls anywhere, assert statements, and
    # `if ...: raise`. Each as a window of text (start, end, is a call).
    windows: list[tuple[int, int, bool]] = []
    for lit in (b"isinstance", b"type"):
        for start in _find_all(low, lit):
            if start and (low[start - 1] in _ID_CHARS or low[start - 1] == 46):  # x.type(, dtype(
                continue
            if not _CALL_PAREN.match(low, start + len(lit)):
                continue
            windows.append((start, _statement_end(low, start), True))
    if has_md:
        for start in _find_all(low, b"assert"):
            if _at_statement_start(low, start):
                windows.append((start, _statement_end(low, start), False))
        for raise_pos in _find_all(low, b"raise"):
            if not _at_statement_start(low, raise_pos, after_colon=True):
                continue
            lo = raise_pos
            for _ in range(_IF_LOOKBACK_LINES):
                lo = low.rfind(b"\n", 0, max(lo - 1, 0)) + 1 if lo > 0 else 0
            ifs = list(_IF_LINE.finditer(low, lo, raise_pos))
            if ifs:
                windows.append((ifs[-1].start(), raise_pos, False))
    # One-entry shapes (d[names[-1]], next(iter(d...)), ...) inside a check need no loop.
    for start, end, is_call in windows:
        if _MINUS_ONE.search(low, start, end) is None and low.find(b"next(", start, end) < 0:
            continue
        if has_md and _has_shape(low, names, start, end):
            return True
        if is_call and has_ty and ty_names(source, start, end):
            return True  # any collection's one entry, checked against a metadata type
    if b"for " not in source:
        return False
    sites: list[tuple[int, set[bytes]]] = []
    for start, end, is_call in windows:
        if is_call:
            sub = _SUBJECT.match(low, start)
            if not sub:
                continue
            root = sub.group(1)
            # the rule looks at the subject's root name, or at a metadata type in the call
            if md_names(root, 0, len(root)) or (has_ty and ty_names(source, sub.end(), end)):
                sites.append((start, {root}))
        else:
            found = md_names(low, start, end)
            if found:
                sites.append((start, found))
    if not sites:
        return False
    lines = low.split(b"\n")
    starts = list(itertools.accumulate((len(l) + 1 for l in lines[:-1]), initial=0))

    def indent(i: int) -> int:
        return len(lines[i]) - len(lines[i].lstrip())

    subjects = set().union(*(names for _, names in sites))
    last_site: dict[bytes, int] = {}
    for pos, names_here in sites:
        for name in names_here:
            last_site[name] = max(last_site.get(name, -1), pos)
    headers = None
    for bound, line_start in _bindings(low, subjects, last_site):
        if headers is None:
            headers = _headers(lines)
        name = bound.group(0)
        i = bisect.bisect_right(starts, line_start) - 1
        is_for = _is_loop_header(lines[i].lstrip())
        loop_indent = indent(i) if is_for else _enclosing_for_indent(headers, i, indent(i))
        if loop_indent is None:
            continue
        for pos, names_here in sites:
            if name in names_here and pos > bound.start():
                k = bisect.bisect_right(starts, pos) - 1
                if _after_loop_same_function(lines, indent, i, k, loop_indent):
                    return True
    return False


def _enclosing_for_indent(headers, i: int, own: int) -> int | None:
    """The indent of the nearest `for` line above line i with a smaller indent, unless a
    `def`/`class` line with a smaller indent comes first (then None). Other lines with a
    smaller indent (`if`, `with`, continuation lines) are passed over: over-approximate."""
    at, info = headers
    for h in range(bisect.bisect_left(at, i) - 1, -1, -1):
        h_indent, is_for = info[h]
        if h_indent >= own:
            continue
        return h_indent if is_for else None
    return None


def _after_loop_same_function(lines, indent, i, k, loop_indent) -> bool:
    """Line k is reached after the loop around line i has ended, in the same function."""
    ended = False
    for j in range(i + 1, k + 1):
        s = lines[j].lstrip()
        if not s or s.startswith(b"#"):
            continue
        if indent(j) <= loop_indent:
            if s.startswith((b"def ", b"async def ", b"class ")) and indent(j) < loop_indent:
                return False
            ended = True
    return ended
