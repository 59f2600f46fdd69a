"""The engine's read-only batched walk must call rules exactly as libcst's visitor would:
same node types, same nodes, same order, visits and leaves."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from invariant_check.registry import all_rules
from invariant_check.traversal import _NOISE_NAMES, walk_batched

REPO = Path(__file__).resolve().parent.parent

VARIETY = textwrap.dedent(
    '''
    import os, sys as system
    from .x import (a, b as c)

    @decorator(arg=1)
    @other
    async def f(pos, /, p: int = 1, *args, kw: "T" = None, **kwargs) -> list[int]:
        """doc"""
        global G
        x = [i * 2 for i in range(10) if i % 2]
        y = {k: v for k, v in d.items()}
        z = {s for s in x}
        g = (n for n in x)
        w = a if b else c
        async with open(p) as fh, ctx() as (q, r):
            async for item in fh:
                await item
        try:
            pass
        except (ValueError, TypeError) as exc:
            raise RuntimeError("x") from exc
        else:
            del x
        finally:
            print(f"{x!r:>{width}} {y}")
        match command:
            case [first, *rest] if first > 0:
                pass
            case {"k": value, **others}:
                pass
            case Point(x=0) | None:
                pass
        while (n := next(it)) is not None:
            continue
        lam = lambda u, *v, **kw: u + v
        m[1:2, ::3] = -x ** 2 @ y
        assert isinstance(w, (int, str)), "msg"
        return [*x, *y]

    class K(Base, metaclass=Meta):
        attr: int = 3
        def method(self): return super().method()
    '''
)


class Recorder(cst.CSTVisitor):
    """libcst's own walk, every node."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str, int]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.events.append(("visit", type(node).__name__, id(node)))
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.events.append(("leave", type(original_node).__name__, id(original_node)))


def _recorder_class(names: list[str]) -> type:
    """A batchable visitor with visit_/leave_ hooks for the given node types."""
    attrs = {}
    for name in names:
        def visit(self, node, _n=name):
            self.events.append(("visit", _n, id(node)))

        def leave(self, node, _n=name):
            self.events.append(("leave", _n, id(node)))

        visit.__name__, leave.__name__ = f"visit_{name}", f"leave_{name}"  # libcst looks at these
        attrs[f"visit_{name}"] = visit
        attrs[f"leave_{name}"] = leave

    def init(self):
        cst.BatchableCSTVisitor.__init__(self)
        self.events = []

    attrs["__init__"] = init
    return type("Rec", (cst.BatchableCSTVisitor,), attrs)


ALL_TYPES = [
    name
    for name in dir(cst)
    if isinstance(getattr(cst, name), type)
    and issubclass(getattr(cst, name), cst.CSTNode)
    and not name.startswith("Base")
]
CODE_TYPES = [n for n in ALL_TYPES if n not in _NOISE_NAMES]


def sources() -> list[tuple[str, str]]:
    out = [("variety", VARIETY)]
    for folder in ("invariant_check", "rules", "runtime_guards"):
        for path in sorted((REPO / folder).rglob("*.py")):
            out.append((str(path.relative_to(REPO)), path.read_text()))
    for code, rule in all_rules().items():
        for i, ex in enumerate(rule.INVALID + rule.VALID):
            out.append((f"{code}-example-{i}", textwrap.dedent(ex.code)))
    return out


@pytest.mark.parametrize("name,source", sources(), ids=[n for n, _ in sources()])
def test_walk_matches_libcst_order(name, source):
    module = cst.parse_module(source)
    expected = Recorder()
    module.visit(expected)
    # the fast walk: every code node, in libcst's order
    got = _recorder_class(CODE_TYPES)()
    walk_batched(module, [got])
    assert got.events == [e for e in expected.events if e[1] in CODE_TYPES]
    # a rule that also visits noise gets libcst's order for everything
    everything = _recorder_class(ALL_TYPES)()
    walk_batched(module, [everything])
    assert everything.events == expected.events


def test_walk_skips_noise_only_when_no_rule_asks_for_it():
    module = cst.parse_module("x = f(a, b)  # note\n")

    class Calls(cst.BatchableCSTVisitor):
        def __init__(self):
            super().__init__()
            self.seen = []

        def visit_Call(self, node):
            self.seen.append("call")

        def visit_Comment(self, node):
            self.seen.append(node.value)

    v = Calls()
    walk_batched(module, [v])
    assert v.seen == ["call", "# note"]
