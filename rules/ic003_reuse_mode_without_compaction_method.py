from __future__ import annotations

import bisect
import itertools
import re
from typing import Any

import libcst as cst

from invariant_check.rule import Rule
from invariant_check.types import Invalid, Option, Valid

from ._names import dotted


class ReuseModeWithoutCompactionMethod(Rule):
    """
    ## What it does
    Flags a class that implements the top-k reuse switch (`def set_skip_topk`) but neither it
    nor any base class in the linted tree implements the compaction (`def compact_topk_indices`).

    ## Why is this bad?
    With MTP index sharing, draft step 0 writes the shared `topk_indices_buffer` one row per
    query token, and `set_skip_topk(True)` makes later draft steps reuse that buffer, which they
    read one row per request. The buffer must be compacted to one row per request before it is
    reused. A model class without `compact_topk_indices` gives its callers no way to do that,
    so every drafter that enables reuse on it reads other tokens' (even other requests')
    indices. This shipped in vLLM 0.23/0.24 (`DeepSeekMultiTokenPredictor`, fixed in 0.25.0 by
    PR #47238), and acceptance fell from 61.5% to 57.7%.

    ## Example
    ```python
    class MultiTokenPredictor(nn.Module):
        def set_skip_topk(self, skip: bool):
            for layer in self.layers:
                layer.indexer.skip_topk = skip
    ```

    ## Use instead
    ```python
    class MultiTokenPredictor(nn.Module):
        def set_skip_topk(self, skip: bool):
            for layer in self.layers:
                layer.indexer.skip_topk = skip

        def compact_topk_indices(self, slot_ids: torch.Tensor):
            # one call for every distinct shared buffer; see invariant_check.compaction
            compact_topk_indices_(self, slot_ids)
    ```

    Base classes are resolved by name across the linted files. When a base class cannot be
    found in the linted tree and is not listed in `external-bases`, the rule stays silent: it
    cannot prove that the base lacks the method (lint the whole package to resolve it).

    ## Options
    - `switch-method` (default `set_skip_topk`): the method that turns reuse on.
    - `compaction-method` (default `compact_topk_indices`): the method that must exist beside it.
    - `external-bases`: base classes known not to implement the compaction.
    """

    CODE = "IC003"
    NAME = "reuse-mode-without-compaction-method"
    SUMMARY = "A class that can switch on top-k reuse has no method to compact the shared buffer."
    HINT = (
        "Add `def {compaction}(self, slot_ids)` that sets `buf[:n] = buf[slot_ids]` for every "
        "distinct top-k buffer (reference: invariant_check.compaction.compact_topk_indices_)."
    )
    OPTIONS = {
        "switch-method": Option("set_skip_topk", "method that switches index reuse on", str),
        "compaction-method": Option("compact_topk_indices", "method that compacts the buffer", str),
        "external-bases": Option(
            ["object", "Module", "nn.Module", "torch.nn.Module", "ABC", "abc.ABC", "Protocol", "Generic"],
            "base classes outside the tree that are known not to implement the compaction",
        ),
    }

    VALID = [
        Valid(
            """
class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip

    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]
"""
        ),
        Valid(
            """
class Base(nn.Module):
    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]

class Predictor(Base):
    def set_skip_topk(self, skip):
        self.skip = skip
"""
        ),
        Valid(
            """
from .base import CompactingBase

class Predictor(CompactingBase):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            files={
                "base.py": """
import torch.nn as nn

class CompactingBase(nn.Module):
    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]
"""
            },
        ),
        # The reference kernel assigned as the method.
        Valid(
            """
from invariant_check.compaction import compact_topk_indices_

class Predictor(nn.Module):
    compact_topk_indices = compact_topk_indices_

    def set_skip_topk(self, skip):
        self.skip = skip
"""
        ),
        # A nested function of that name is no method of the class.
        Valid(
            """
class Predictor(nn.Module):
    def configure(self):
        def set_skip_topk(skip):
            return skip
        return set_skip_topk
"""
        ),
        # Unknown base outside the linted tree: cannot prove it lacks the method.
        Valid(
            """
from somewhere import UnknownBase

class Predictor(UnknownBase):
    def set_skip_topk(self, skip):
        self.skip = skip
"""
        ),
    ]
    INVALID = [
        Invalid(
            """
class Predictor(nn.Module):
    def __init__(self):
        super().__init__()

    def set_skip_topk(self, skip: bool):
        for layer in self.layers:
            layer.skip_topk = skip
""",
            line=1,
            column=7,
            message_contains="Predictor",
        ),
        Invalid(
            """
class Complete(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip

    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]


class Incomplete(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            line=9,
            message_contains="Incomplete",
        ),
        Invalid(
            """
class Base(nn.Module):
    pass

class Predictor(Base):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            line=4,
        ),
        Invalid(
            """
class Predictor(nn.Module):
    def use_shared_indices(self, on):
        self.skip = on
""",
            line=1,
            options={"switch-method": "use_shared_indices"},
        ),
    ]

    @classmethod
    def triggers(cls, options: dict[str, Any]) -> tuple[str, ...]:
        return (options["switch-method"],)

    @classmethod
    def may_apply(cls, source: bytes, options: dict[str, Any]) -> bool:
        return _may_apply(source, options["switch-method"].encode(), options["compaction-method"].encode())

    def __init__(self, context) -> None:
        super().__init__(context)
        # classes: name -> [[bases, defines compaction]]; wanted: bases of reported classes
        self.facts = {"classes": {}, "wanted": []}
        self._stack: list[tuple[cst.ClassDef, set[str]]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        methods = _members(node)
        bases = [dotted(arg.value) or "?" for arg in node.bases if arg.keyword is None]
        compaction = self.options["compaction-method"]
        entry = self.facts["classes"].setdefault(node.name.value, [])
        entry.append([bases, compaction in methods])
        if self.options["switch-method"] in methods and compaction not in methods:
            self.report(
                node.name,
                f"Class `{node.name.value}` defines `{self.options['switch-method']}` but no "
                f"`{compaction}`: draft steps that reuse the top-k buffer would read per-token rows",
                hint=self.HINT.format(compaction=compaction),
                data={"class": node.name.value, "bases": bases},
            )
            self.facts["wanted"].extend(bases)

    @staticmethod
    def _classes(facts) -> dict[str, list]:
        classes: dict[str, list] = {}
        for per_file in facts.values():
            for name, entries in per_file["classes"].items():
                classes.setdefault(name, []).extend(entries)
        return classes

    @classmethod
    def expand_triggers(cls, facts, options) -> set[str]:
        """Files defining the not-yet-seen ancestors of reported classes."""
        classes = cls._classes(facts)
        external = set(options["external-bases"])
        todo = [b for per_file in facts.values() for b in per_file["wanted"]]
        seen, wanted = set(), set()
        while todo:
            base = todo.pop()
            if base in seen or base in external or base == "?":
                continue
            seen.add(base)
            short = base.rsplit(".", 1)[-1]
            if short in classes:
                todo.extend(b for bases, _ in classes[short] for b in bases)
            else:
                wanted.update({f"class {short}(", f"class {short}:"})
        return wanted

    @classmethod
    def finalize(cls, candidates, facts, options):
        classes = cls._classes(facts)
        external = set(options["external-bases"])
        def may_compact(name: str, seen: set[str]) -> bool:
            """True unless every class of that name provably lacks the method."""
            if name in seen:
                return False
            seen.add(name)
            if name in external:
                return False
            short = name.rsplit(".", 1)[-1]
            if short not in classes:
                return True  # not in the tree: cannot prove anything
            for bases, has in classes[short]:
                if has or any(may_compact(b, seen) for b in bases):
                    return True
            return False

        kept = []
        for path, cand in candidates:
            if not any(may_compact(b, set()) for b in cand.data["bases"]):
                kept.append((path, cand))
        return kept


def _members(node: cst.ClassDef) -> set[str]:
    """Names a class body defines: methods, and attributes assigned there
    (`compact_topk_indices = compact_topk_indices_` provides the method too)."""
    names: set[str] = set()
    for stmt in node.body.body:
        if isinstance(stmt, cst.FunctionDef):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    names.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
                elif isinstance(small, cst.AnnAssign) and small.value is not None:
                    if isinstance(small.target, cst.Name):
                        names.add(small.target.value)
    return names


def _may_apply(source: bytes, switch: bytes, compaction: bytes) -> bool:
    """Whether some class that defines the switch may lack the compaction: for each
    `def <switch>`, find the class line above it (a smaller indent) and look for the
    compaction defined or assigned in that class's block. Anything unclear counts as a
    possible finding, so the file is parsed."""
    switch_re = re.compile(rb"^([ \t]*)(?:async[ \t]+)?def[ \t]+" + re.escape(switch) + rb"\b", re.MULTILINE)
    provides = re.compile(
        rb"^[ \t]+(?:(?:async[ \t]+)?def[ \t]+" + re.escape(compaction) + rb"\b|"
        + re.escape(compaction) + rb"[ \t]*(?::[^\n=]*)?=(?!=))",
        re.MULTILINE,
    )
    lines = None
    for hit in switch_re.finditer(source):
        if lines is None:
            lines = source.split(b"\n")
            starts = list(itertools.accumulate((len(l) + 1 for l in lines[:-1]), initial=0))
        i = bisect.bisect_right(starts, hit.start()) - 1
        own = len(hit.group(1).expandtabs())
        cls_line = None
        for j in range(i - 1, -1, -1):
            text = lines[j]
            stripped = text.lstrip()
            if not stripped or stripped.startswith(b"#"):
                continue
            if len(text[: len(text) - len(stripped)].expandtabs()) < own:
                cls_line = j if stripped.startswith(b"class ") else None
                break
        if cls_line is None:
            return True  # not plainly a method: let the parser decide
        cls_indent = len(lines[cls_line]) - len(lines[cls_line].lstrip())
        end = len(lines)
        for j in range(cls_line + 1, len(lines)):
            stripped = lines[j].lstrip()
            if stripped and not stripped.startswith(b"#") and len(lines[j]) - len(stripped) <= cls_indent:
                end = j
                break
        block_end = starts[end] if end < len(starts) else len(source)
        if not provides.search(source, starts[cls_line], block_end):
            return True
    return False
