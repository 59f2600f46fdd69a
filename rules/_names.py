"""Small libcst helpers shared by the rules."""

from __future__ import annotations

import libcst as cst


def dotted(node: cst.CSTNode | None) -> str | None:
    """`a.b.c` for Name/Attribute chains, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def last_name(node: cst.CSTNode | None) -> str | None:
    """The final identifier of a Name/Attribute/Call chain: `compact` for `a.b.compact(...)`."""
    if isinstance(node, cst.Call):
        node = node.func
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Name):
        return node.value
    return None


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)
