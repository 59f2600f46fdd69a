"""One batched traversal of a parsed module for every rule, without rebuilding nodes.

libcst's own visitor walk rebuilds every node it passes (`_visit_and_replace_children`), which
costs about three times the parse. Rules only read the tree, so this walker reads the
dataclass fields of each node instead, in source order, and calls each rule's `visit_<Type>`
and `leave_<Type>` as libcst's batched visitor does (return values are ignored there too).
Whitespace, comments and punctuation are skipped; a rule that visits them gets libcst's walk.
tests/test_traversal.py checks the visit order against libcst's on real code.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Callable, Iterable

import libcst as cst

# Node types that never hold code a rule looks at.
_NOISE = (
    cst.SimpleWhitespace,
    cst.ParenthesizedWhitespace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Newline,
    cst.Comment,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.BaseBinaryOp,
    cst.BaseUnaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseAugOp,
)

# Fields whose dataclass order differs from source order (libcst visits in source order).
_SOURCE_ORDER = {
    "FunctionDef": ("decorators", "asynchronous", "name", "type_parameters", "params", "returns", "body"),
    "ClassDef": ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    "IfExp": ("body", "test", "orelse"),
    "Arg": ("keyword", "value"),
    "DictComp": ("key", "value", "for_in"),
    "ListComp": ("elt", "for_in"),
    "SetComp": ("elt", "for_in"),
    "GeneratorExp": ("elt", "for_in"),
    "Parameters": ("posonly_params", "posonly_ind", "params", "star_arg", "kwonly_params", "star_kwarg"),
    "ExceptHandler": ("type", "name", "body"),
    "ExceptStarHandler": ("type", "name", "body"),
    "MatchCase": ("pattern", "guard", "body"),
    "For": ("asynchronous", "target", "iter", "body", "orelse"),
    "With": ("asynchronous", "items", "body"),
    "CompFor": ("asynchronous", "target", "iter", "ifs", "inner_for_in"),
}


def _noise_names() -> set[str]:
    names = set()
    for base in _NOISE:
        names.add(base.__name__)
        stack = [base]
        while stack:
            for sub in stack.pop().__subclasses__():
                names.add(sub.__name__)
                stack.append(sub)
    return names


_NOISE_NAMES = frozenset(_noise_names())


@lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[str, ...]:
    names = tuple(f.name for f in dataclasses.fields(cls))
    order = _SOURCE_ORDER.get(cls.__name__)
    if order is None:
        return names
    rest = tuple(n for n in names if n not in order)
    return tuple(n for n in order if n in names) + rest


def walk_batched(module: cst.Module, visitors: Iterable[cst.BatchableCSTVisitor]) -> None:
    """Call every visitor's visit_/leave_ methods over `module`, in source order."""
    visitors = list(visitors)
    visit: dict[str, list[Callable]] = {}
    leave: dict[str, list[Callable]] = {}
    for v in visitors:
        for attr in dir(type(v)):
            if attr.startswith(("visit_", "leave_")) and attr != "visit_batched":
                bound = getattr(v, attr)
                if _overridden(bound):
                    table = visit if attr[0] == "v" else leave
                    table.setdefault(attr[6:], []).append(bound)
    if (set(visit) | set(leave)) & _NOISE_NAMES:
        # A rule wants whitespace, comments or punctuation: their exact places come from
        # libcst's own (slower) walk.
        cst.visit_batched(module, visitors)
        return
    _walk(module, visit, leave, _NOISE_NAMES)


_BASES = frozenset(
    {"CSTVisitor", "BatchableCSTVisitor", "CSTTypedVisitorFunctions", "CSTTypedBaseFunctions"}
)


def _overridden(bound) -> bool:
    """libcst's base visitors define a no-op visit_/leave_ for every node type."""
    func = getattr(bound, "__func__", bound)
    return func.__qualname__.split(".")[0] not in _BASES


def _walk(root, visit, leave, skip) -> None:
    # Per node class: (visit functions, leave functions, fields to descend into), computed
    # once per class and run; iterative so that deep trees cannot hit the recursion limit.
    plans: dict[type, tuple] = {}
    node_base = cst.CSTNode
    stack: list = [root]
    leaving = object()
    while stack:
        node = stack.pop()
        if node is leaving:
            node = stack.pop()
            for fn in plans[type(node)][1]:
                fn(node)
            continue
        cls = type(node)
        plan = plans.get(cls)
        if plan is None:
            name = cls.__name__
            plan = plans[cls] = (tuple(visit.get(name, ())), tuple(leave.get(name, ())), _fields(cls))
        for fn in plan[0]:
            fn(node)
        if plan[1]:
            stack.append(node)
            stack.append(leaving)
        children = []
        for field in plan[2]:
            value = getattr(node, field)
            if isinstance(value, node_base):
                if type(value).__name__ not in skip:
                    children.append(value)
            elif value.__class__ is tuple or value.__class__ is list:
                for item in value:
                    if isinstance(item, node_base) and type(item).__name__ not in skip:
                        children.append(item)
        children.reverse()
        stack.extend(children)
