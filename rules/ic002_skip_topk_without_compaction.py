from __future__ import annotations

import builtins
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import libcst as cst

from invariant_check.rule import Rule
from invariant_check.types import Invalid, Option, Valid

from ._names import code_of, dotted, last_name

# Names that never belong to a compaction helper of the linted tree: builtins, tensor, torch and
# container methods. Leaving them out keeps the facts small and stops the cross-file pass from
# parsing every file that happens to define a `view` or a `get`.
_STOP = frozenset(dir(builtins)) | frozenset(
    """
    view reshape contiguous clone to cpu cuda item tolist copy_ fill_ zero_ numel size dim
    unsqueeze squeeze flatten permute transpose expand expand_as repeat index_select gather
    scatter_ masked_fill_ argmax argmin mean type_as new_empty new_zeros new_full new_ones
    detach narrow split chunk cumsum sort topk nonzero eq ne lt gt le ge add add_ sub mul div
    index_copy_ index_fill_ numpy long half bool empty zeros ones full arange cat stack
    from_numpy tensor as_tensor empty_like zeros_like ones_like full_like append extend pop
    get items keys values update setdefault insert remove clear copy format join strip
    startswith endswith replace lower upper encode decode debug info warning error exception
    warning_once info_once debug_once where perf_counter synchronize
    """.split()
)

_INDEX_NAMES = ("token_indices_to_sample", "last_token_indices")
_PLACEHOLDER = "<token indices sampled in step 0>"


@lru_cache(maxsize=16)
def _call_regex(name: str, first_arg: bytes) -> re.Pattern[bytes]:
    """A call of `name` (not its `def`), optionally with a given first argument."""
    return re.compile(rb"(?<!def )\b" + re.escape(name.encode()) + rb"\s*\(" + first_arg)


def _is_true(arg: cst.Arg) -> bool:
    return isinstance(arg.value, cst.Name) and arg.value.value == "True"


@dataclass
class _Frame:
    """A function (or the module) whose calls are being collected."""

    node: cst.CSTNode
    name: str | None
    cls: _ClassFrame | None  # set for methods defined directly in a class body
    calls: set[str] = field(default_factory=set)
    switches: list[cst.Call] = field(default_factory=list)


@dataclass
class _ClassFrame:
    methods: list[_Frame] = field(default_factory=list)


@dataclass
class _Pending:
    """A switch-on call with no direct compaction on every path around it."""

    node: cst.Call
    frame: _Frame
    before: list[set[str]]  # every path from the last forward to the switch
    after: list[set[str]]  # every path from the switch to the next forward
    message: str
    hint: str


class _Sequence(cst.CSTVisitor):
    """The calls of one function body in evaluation order, with the loops around each.

    Nested functions, classes and lambdas are skipped: their bodies do not run in this order.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[cst.Call, tuple[int, ...]]] = []
        self.loops: list[int] = []
        self.ranges: dict[int, list[int]] = {}
        self.aliases: dict[str, set[str]] = {}
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def leave_Call(self, original_node: cst.Call) -> None:
        # After its arguments: `self.model(**self.inputs_for(step))` runs `inputs_for` first.
        self.calls.append((original_node, tuple(self.loops)))

    def _loop(self, body: Iterable[cst.CSTNode | None]) -> None:
        key = len(self.ranges)
        self.ranges[key] = [len(self.calls), len(self.calls)]
        self.loops.append(key)
        for part in body:
            if part is not None:
                part.visit(self)
        self.loops.pop()
        self.ranges[key][1] = len(self.calls)

    def visit_For(self, node: cst.For) -> bool:
        # The iterable is evaluated once, before the first iteration.
        node.iter.visit(self)
        self._loop((node.target, node.body))
        if node.orelse is not None:
            node.orelse.visit(self)
        return False

    def visit_While(self, node: cst.While) -> bool:
        self._loop((node.test, node.body))
        if node.orelse is not None:
            node.orelse.visit(self)
        return False

    def _alias(self, target: cst.BaseExpression, value: cst.BaseExpression | None) -> None:
        name = dotted(value) if value is not None else None
        if isinstance(target, cst.Name) and name is not None:
            self.aliases.setdefault(target.value, set()).add(name)

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1:
            self._alias(node.targets[0].target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._alias(node.target, node.value)

    # Names of the step-0 token indices, for the hint; attribute and keyword names are not
    # variables of this function.
    def visit_Name(self, node: cst.Name) -> None:
        if "token_indices" in node.value:
            self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if "token_indices" in node.attr.value and isinstance(node.value, cst.Name):
            self.names.add(f"{node.value.value}.{node.attr.value}")
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def canonical(self, name: str) -> str:
        """`self.model.model` for `draft_model` after `draft_model = self.model.model`."""
        for _ in range(8):
            head, dot, rest = name.partition(".")
            targets = self.aliases.get(head)
            if not targets or len(targets) != 1:
                break
            (target,) = targets
            new = target + dot + rest
            if new == name:
                break
            name = new
        return name


class SkipTopkWithoutCompaction(Rule):
    """
    ## What it does
    Flags a call that switches the draft model into top-k reuse mode
    (`<model>.set_skip_topk(True)`) when nothing compacts the shared top-k buffer between the
    forward before the switch (draft step 0) and the forward after it (the first step that
    reuses the buffer). A compaction is a call to `compact_topk_indices(...)`, or to a function
    of the linted tree that performs one, directly or through other functions in any module.

    ## Why is this bad?
    With MTP index sharing, draft step 0 writes the shared `topk_indices_buffer` one row per
    query token. After `set_skip_topk(True)` the later draft steps skip the indexer and read
    that buffer one row per request. Unless the rows of each request's sampled token are first
    moved to the front (`compact_topk_indices(token_indices_to_sample)`), steps 1+ attend with
    the top-k indices of other tokens, often of other requests. vLLM 0.24.0 shipped exactly
    this in `llm_base_proposer.py` (fixed in 0.25.0); acceptance fell from 61.5% to 57.7%.

    ## Example
    ```python
    hidden = self.model(**step0_inputs)
    self.model.model.set_skip_topk(True)
    for _ in range(num_steps - 1):
        hidden = self.model(**step_inputs)
    ```

    ## Use instead
    ```python
    hidden = self.model(**step0_inputs)
    self.model.model.set_skip_topk(True)
    self.model.model.compact_topk_indices(token_indices_to_sample)
    for _ in range(num_steps - 1):
        hidden = self.model(**step_inputs)
    ```
    The model's `compact_topk_indices` can delegate to this project's reference kernel,
    `invariant_check.compaction.compact_topk_indices_(module, slot_ids)`.

    ## Which orderings it proves
    Within the function that holds the switch, the rule reads the calls in source order. A
    *forward* is a call of the switch's receiver or of an object it hangs off
    (`self.model.model(...)`, `self.model(...)`, also through a local alias such as
    `draft_model = self.model.model`), or a call whose last name is in `forward-calls`. The
    switch is fine when a compaction sits on every path from the last forward before it (or
    the start of the function) to the switch, or on every path from the switch to the next
    forward (or the end of the function). Paths are source order, with one refinement for
    the innermost loop that holds the switch and a forward: when no forward precedes the
    switch in the loop body, a later iteration reaches the switch from the end of the
    previous iteration's body (and, when no forward runs before the loop, only that path
    counts); when no forward follows it, the next iteration's first forward is reached
    through the top of the body. Conditions are not evaluated: a compaction under
    `if hasattr(model, "compact_topk_indices"):` counts as run.

    A compaction is the `compaction-method` call on any receiver, or a call of a function of
    the linted tree that makes one, directly or through other functions, up to
    `helper-depth` calls deep, resolved by function name across files. Followed calls are
    `helper(...)`, `self.helper(...)`, `super().helper(...)`, `module.helper(...)` and
    methods of the switched model (`self.model.model.helper(...)`); methods of other objects
    are not followed.

    ## What it leaves to the runtime guard
    - A switch in a method of a class whose *sibling* method compacts (directly or through
      helpers), where the sibling is not called by the switching method itself: vLLM's
      `on_prefill_end` compacts and `on_multi_step_decode_begin` switches, and the order in
      which a framework calls such hooks is not visible statically. The rule stays silent;
      the `topk-layout` runtime guard checks the buffer layout when a reusing step runs.
      (A compacting method that the switching method calls is a helper: its place among the
      forwards is known, and it is judged like any other call.)
    - A switch whose argument is not the literal `True` (`set_skip_topk(flag)`), and the body
      of `def set_skip_topk` itself, which only delegates.
    - Forwards hidden in helpers not named in `forward-calls` (the window then extends past
      them), and a compaction made by a caller outside the class before it calls the
      function holding the switch (this one is reported: compact next to the switch, or
      suppress the line).
    - Tests that switch reuse on over a batch of one token per request: the buffer is then
      already compact, and the finding is noise there (use `per-file-ignores` for tests).

    ## Options
    - `switch-method` (default `set_skip_topk`): the method that turns reuse on.
    - `compaction-method` (default `compact_topk_indices`): the call that compacts the buffer.
    - `forward-calls` (default `model`, `forward`, `draft_model`, `run_model`, `_run_model`):
      last names of calls that run a draft step, besides calls of the switch's receiver.
    - `helper-depth` (default 4): how many helper calls deep a compaction is looked for.
      Each level costs one more cross-file round when a switch is not resolved locally.
    """

    CODE = "IC002"
    NAME = "skip-topk-without-compaction"
    SUMMARY = (
        "Top-k reuse is switched on but the shared buffer is not compacted before the next "
        "draft step reads it."
    )
    HINT = (
        "Call `<model>.compact_topk_indices(<token indices sampled in step 0>)` between the "
        "step-0 forward and the next one (reference kernel: "
        "invariant_check.compaction.compact_topk_indices_)."
    )
    OPTIONS = {
        "switch-method": Option("set_skip_topk", "method that switches index reuse on", str),
        "compaction-method": Option("compact_topk_indices", "call that compacts the buffer", str),
        "forward-calls": Option(
            ["model", "forward", "draft_model", "run_model", "_run_model"],
            "last names of calls that run a draft step (a forward of the draft model)",
        ),
        "helper-depth": Option(4, "how many helper calls deep a compaction is looked for", int),
    }

    VALID = [
        # Compaction right after the switch (vLLM 0.25.0).
        Valid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    self.model.model.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # Compaction before the switch, after step 0's forward.
        Valid(
            """
def propose(self, last_token_indices):
    hidden = self.model(**self.inputs)
    self.model.model.compact_topk_indices(last_token_indices)
    self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # Both under a condition that guards them together.
        Valid(
            """
def propose(self, idx):
    hidden = self.model(**self.inputs)
    if self.share and hasattr(self.model.model, "compact_topk_indices"):
        self.model.model.set_skip_topk(True)
        self.model.model.compact_topk_indices(idx)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # Through a helper defined in another module.
        Valid(
            """
from .topk import compact_shared_topk

def propose(self, idx):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    compact_shared_topk(self.model.model, idx)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            files={
                "topk.py": """
def compact_shared_topk(model, idx):
    model.compact_topk_indices(idx)
"""
            },
        ),
        # Through a chain of two helpers in two other modules.
        Valid(
            """
from .steps import after_step0

def propose(self, idx):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    after_step0(self, idx)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            files={
                "steps.py": """
from .buffers import squeeze_rows

def after_step0(proposer, idx):
    squeeze_rows(proposer.model.model, idx)
""",
                "buffers.py": """
def squeeze_rows(model, idx):
    if idx is not None:
        model.compact_topk_indices(idx)
""",
            },
        ),
        # A sibling hook method compacts; the hook order is left to the runtime guard.
        Valid(
            """
class MTPSpeculator(Speculator):
    def on_prefill_end(self, num_reqs):
        if self.share:
            self.model.model.compact_topk_indices(self.last_token_indices[:num_reqs])

    def on_multi_step_decode_begin(self, num_reqs):
        if self.share:
            self.model.model.set_skip_topk(True)
"""
        ),
        # A sibling hook compacts through a helper of another module.
        Valid(
            """
from .topk import compact_for_reuse

class Speculator:
    def on_prefill_end(self, num_reqs):
        compact_for_reuse(self.model.model, self.last_token_indices[:num_reqs])

    def on_decode_begin(self, num_reqs):
        self.model.model.set_skip_topk(True)
""",
            files={
                "topk.py": """
def compact_for_reuse(model, rows):
    model.compact_topk_indices(rows)
"""
            },
        ),
        # Local alias of the receiver; the forward is the alias's owner.
        Valid(
            """
def propose(self, token_indices_to_sample):
    draft_model = self.model.model
    hidden = self.model(**self.inputs)
    draft_model.set_skip_topk(True)
    draft_model.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # Calls split over several lines.
        Valid(
            """
def propose(self, idx):
    hidden = self.model(
        **self.inputs
    )
    self.model.model.set_skip_topk(
        True
    )
    self.model.model.compact_topk_indices(
        idx,
    )
    hidden = self.model(
        **self.inputs
    )
"""
        ),
        # Switched on inside the draft loop; compaction after each forward covers the next step.
        Valid(
            """
def propose(self, idx):
    for step in range(self.num_steps):
        if step == 1:
            self.model.model.set_skip_topk(True)
        hidden = self.model(**self.inputs)
        self.model.model.compact_topk_indices(idx)
"""
        ),
        # Not provably on: the runtime guard checks this one.
        Valid(
            """
def propose(self, on):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(on)
    hidden = self.model(**self.inputs)
"""
        ),
        # The switch itself delegating to its layers.
        Valid(
            """
class Predictor:
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.set_skip_topk(True)
"""
        ),
    ]
    INVALID = [
        # vLLM 0.24.0: no compaction at all.
        Invalid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    if self.share and hasattr(self.model.model, "set_skip_topk"):
        self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=4,
            column=9,
            message_contains="self.model.model.set_skip_topk(True)",
        ),
        # Compaction only after the next forward: step 1 already read the per-token rows.
        Invalid(
            """
def propose(self, idx):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    hidden = self.model(**self.inputs)
    self.model.model.compact_topk_indices(idx)
""",
            line=3,
        ),
        # Compaction inside the draft loop, after that loop's forward.
        Invalid(
            """
def propose(self, idx):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
        self.model.model.compact_topk_indices(idx)
""",
            line=3,
        ),
        # Switched on in the loop's first iteration, after step 0 ran before the loop: the
        # compaction at the end of the body comes one step late.
        Invalid(
            """
def propose(self, idx):
    hidden = self.model(**self.inputs)
    for step in range(1, self.num_steps):
        if step == 1:
            self.model.model.set_skip_topk(True)
        hidden = self.model(**self.inputs)
        self.model.model.compact_topk_indices(idx)
""",
            line=5,
        ),
        # A compacting helper method of the same class, called one step late.
        Invalid(
            """
class Drafter:
    def propose(self, idx):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        hidden = self.model(**self.inputs)
        self._compact(idx)

    def _compact(self, idx):
        self.model.model.compact_topk_indices(idx)
""",
            line=4,
        ),
        # The only compaction sits in an unrelated class.
        Invalid(
            """
class Other:
    def on_prefill_end(self, idx):
        self.model.model.compact_topk_indices(idx)

class Proposer:
    def on_decode_begin(self):
        self.model.model.set_skip_topk(True)
""",
            line=7,
        ),
        # Alias receiver, multi-line call.
        Invalid(
            """
def propose(self, last_token_indices):
    draft_model = self.model.model
    hidden = draft_model(**self.inputs)
    draft_model.set_skip_topk(
        True,
    )
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=4,
            message_contains="draft_model.set_skip_topk(True)",
        ),
        # A helper that does not compact.
        Invalid(
            """
from .topk import log_topk

def propose(self, idx):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    log_topk(self.model.model, idx)
    hidden = self.model(**self.inputs)
""",
            line=5,
            files={
                "topk.py": """
def log_topk(model, idx):
    print(model, idx)
"""
            },
        ),
        # Custom names.
        Invalid(
            """
def draft(self, idx):
    out = self.runner.step(self.batch)
    self.net.use_shared_indices(True)
    out = self.runner.step(self.batch)
    self.net.squash_indices(idx)
""",
            line=3,
            options={
                "switch-method": "use_shared_indices",
                "compaction-method": "squash_indices",
                "forward-calls": ["step"],
            },
        ),
    ]

    @classmethod
    def triggers(cls, options: dict[str, Any]) -> tuple[str, ...]:
        return (options["switch-method"],)

    @classmethod
    def may_apply(cls, source: bytes, options: dict[str, Any]) -> bool:
        # Only a call with the literal `True` is a switch (see _is_true).
        return _call_regex(options["switch-method"], rb"\s*True\b").search(source) is not None

    @classmethod
    def may_collect(cls, source: bytes, options: dict[str, Any]) -> bool:
        # Facts seed the direct compactors: files that call the method, not only define it.
        return _call_regex(options["compaction-method"], b"").search(source) is not None

    def __init__(self, context) -> None:
        super().__init__(context)
        self._switch = self.options["switch-method"]
        self._compaction = self.options["compaction-method"]
        self._forward_names = frozenset(self.options["forward-calls"])
        self._stack: list[_Frame | _ClassFrame] = []
        self._funcs: list[_Frame] = []
        self._defs: dict[str, set[str]] = {}
        self._pending: list[_Pending] = []
        self._imported: set[str] = set()

    # -- collection ------------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        frame = _Frame(node, None, None)
        self._stack.append(frame)
        self._funcs.append(frame)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._stack.append(_ClassFrame())

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        outer = self._stack[-1]
        frame = _Frame(node, node.name.value, outer if isinstance(outer, _ClassFrame) else None)
        if frame.cls is not None:
            frame.cls.methods.append(frame)
        self._stack.append(frame)
        self._funcs.append(frame)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._stack.pop()
        frame = self._funcs.pop()
        self._defs.setdefault(frame.name, set()).update(frame.calls)
        if frame.switches:
            self._check(frame)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            head = dotted(bound)
            if head is not None:
                self._imported.add(head.split(".", 1)[0])

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            if isinstance(bound, cst.Name):
                self._imported.add(bound.value)

    def visit_Call(self, node: cst.Call) -> None:
        name = last_name(node.func)
        if name is None:
            return
        frame = self._funcs[-1]
        if name == self._compaction or _followable(node.func, self._imported):
            frame.calls.add(name)
        if (
            name == self._switch
            and node.args
            and _is_true(node.args[0])
            and frame.name != self._switch
        ):
            frame.switches.append(node)

    def leave_Module(self, original_node: cst.Module) -> None:
        frame = self._funcs.pop()
        if frame.switches:
            self._check(frame)
        facts = {
            name: sorted(_useful(calls, self.options))
            for name, calls in self._defs.items()
            if name is not None
        }
        facts = {name: calls for name, calls in facts.items() if calls}
        need: set[str] = set()
        depth = self.options["helper-depth"]
        local = {name: set(calls) for name, calls in facts.items()}
        for p in self._pending:
            siblings = [_useful(method.calls, self.options) for method in _siblings(p.frame)]
            before = [sorted(_useful(path, self.options)) for path in p.before]
            after = [sorted(_useful(path, self.options)) for path in p.after]
            hooks = [sorted(calls) for calls in siblings if calls]
            if _satisfied(before, after, hooks, local, self._compaction, depth):
                continue
            for path in before + after + hooks:
                need.update(path)
            data = {"before": before, "after": after, "siblings": hooks}
            self.report(p.node, p.message, hint=p.hint, data=data)
        if facts or need:
            self.facts = {"defs": facts, "need": sorted(need)}

    # -- the window of one switch ------------------------------------------------------------
    def _check(self, frame: _Frame) -> None:
        seq = _Sequence()
        body = frame.node.body if isinstance(frame.node, cst.FunctionDef) else frame.node
        body.visit(seq)
        calls = [call for call, _ in seq.calls]
        index = {id(call): i for i, call in enumerate(calls)}
        names = [last_name(call.func) for call in calls]
        callees = [dotted(call.func) for call in calls]
        canonical = [seq.canonical(c) if c else None for c in callees]
        for switch in frame.switches:
            s = index.get(id(switch))
            if s is None:
                continue  # inside a lambda or a nested scope the sequencer skipped
            receiver = switch.func.value if isinstance(switch.func, cst.Attribute) else None
            owners = _owners(receiver, seq)
            forward = [
                i != s
                and names[i] not in (self._switch, self._compaction)
                and (
                    names[i] in self._forward_names
                    or callees[i] in owners
                    or canonical[i] in owners
                )
                for i in range(len(calls))
            ]
            before, after, next_forward = _paths(s, seq.calls, seq.ranges, forward)
            if _all_compact(before, names, self._compaction) or _all_compact(
                after, names, self._compaction
            ):
                continue
            exact = {dotted(receiver), seq.canonical(dotted(receiver) or "")} - {None, ""}

            def followed(path: set[int], exact: set[str] = exact) -> set[str]:
                return {
                    names[i]
                    for i in path
                    if names[i] is not None
                    and names[i] != self._switch
                    and (
                        _followable(calls[i].func, self._imported)
                        or (
                            isinstance(calls[i].func, cst.Attribute)
                            and seq.canonical(dotted(calls[i].func.value) or "") in exact
                        )
                    )
                }

            self._pending.append(
                _Pending(
                    switch,
                    frame,
                    [followed(p) for p in before],
                    [followed(p) for p in after],
                    self._message(
                        receiver, calls[next_forward] if next_forward is not None else None
                    ),
                    self._hint(receiver, seq.names),
                )
            )

    def _message(self, receiver: cst.CSTNode | None, forward: cst.Call | None) -> str:
        prefix = f"{code_of(receiver)}." if receiver is not None else ""
        where = (
            f"the next forward `{code_of(forward.func)}(...)`"
            if forward is not None
            else "the next draft step"
        )
        return (
            f"`{prefix}{self._switch}(True)` makes later draft steps reuse the shared top-k "
            f"buffer, but no `{self._compaction}` call (direct or via a helper) runs between "
            f"the forward before it and {where}: those steps would read per-token rows "
            f"instead of one row per request"
        )

    def _hint(self, receiver: cst.CSTNode | None, names: set[str]) -> str:
        target = code_of(receiver) if receiver is not None else "<draft model>"
        return (
            f"Call `{target}.{self._compaction}({_indices(names)})` after the step-0 forward and "
            f"before the next one (e.g. right after this switch); the model method can delegate "
            f"to the reference kernel `invariant_check.compaction.compact_topk_indices_"
            f"(module, slot_ids)`."
        )

    # -- cross-file pass -------------------------------------------------------------------
    @classmethod
    def fact_triggers(cls, options: dict[str, Any]) -> tuple[str, ...]:
        # Every function that calls the compaction directly sits in a file holding its name:
        # parsing those first makes the set of direct compactors complete before any
        # helper chain is followed.
        return (options["compaction-method"],)

    @classmethod
    def expand_triggers(cls, facts: dict[str, Any], options: dict[str, Any]) -> set[str]:
        defs = _merged(facts)
        compaction = options["compaction-method"]
        if not any(compaction in calls for calls in defs.values()):
            return set()  # no chain can end in a compaction: nothing to follow
        need = {name for per_file in facts.values() for name in per_file.get("need", ())}
        frontier, seen = need, set()
        for _ in range(options["helper-depth"]):
            frontier = frontier - seen
            if not frontier:
                break
            seen |= frontier
            frontier = {callee for name in frontier for callee in defs.get(name, ())}
        return {f"def {name}(" for name in seen}

    @classmethod
    def finalize(cls, candidates, facts, options):
        defs = _merged(facts)
        return [
            (path, cand)
            for path, cand in candidates
            if not _satisfied(
                cand.data["before"],
                cand.data["after"],
                cand.data["siblings"],
                defs,
                options["compaction-method"],
                options["helper-depth"],
            )
        ]


def _followable(func: cst.BaseExpression, imported: set[str]) -> bool:
    """Whether a call may be followed into a function of the linted tree by its name.

    Followed: `helper(...)`, `self.helper(...)`, `cls.helper(...)`, `super().helper(...)` and
    `module.helper(...)` for an imported name. Methods of other objects (`metadata.build()`,
    `hidden.view()`) are not: their last names (`build`, `forward`, `embed_input_ids`) are
    defined in hundreds of files and would make the cross-file pass parse most of a tree.
    """
    if isinstance(func, cst.Name):
        return True
    if not isinstance(func, cst.Attribute):
        return False
    base = func.value
    if isinstance(base, cst.Name):
        return base.value in ("self", "cls") or base.value in imported
    if isinstance(base, cst.Call):
        return isinstance(base.func, cst.Name) and base.func.value == "super"
    head = dotted(base)
    return head is not None and head.split(".", 1)[0] in imported


def _siblings(frame: _Frame) -> list[_Frame]:
    """The other methods of the switch's class that it does not call itself.

    A method the switching function calls is a helper: when it runs is known, and the
    paths around the switch already account for it.
    """
    if frame.cls is None:
        return []
    return [
        method
        for method in frame.cls.methods
        if method is not frame and method.name != frame.name and method.name not in frame.calls
    ]


def _useful(names: Iterable[str], options: dict[str, Any]) -> set[str]:
    """Names that may be functions of the linted tree worth following."""
    forward = set(options["forward-calls"])
    compaction = options["compaction-method"]
    return {
        n
        for n in names
        if n == compaction
        or not (
            n in _STOP
            or n in forward
            or n == options["switch-method"]
            or n.startswith("__")
            or n[:1].isupper()  # a class: its constructor is not where compaction happens
        )
    }


def _merged(facts: dict[str, Any]) -> dict[str, set[str]]:
    defs: dict[str, set[str]] = {}
    for per_file in facts.values():
        for name, calls in per_file.get("defs", {}).items():
            defs.setdefault(name, set()).update(calls)
    return defs


def _reaches_compaction(
    names: Iterable[str], defs: dict[str, Iterable[str]], compaction: str, depth: int
) -> bool:
    """Whether a function among `names` compacts within `depth` calls (by function name)."""
    frontier, seen = set(names), set()
    if compaction in frontier:
        return True
    for _ in range(depth):
        frontier -= seen
        if not frontier:
            return False
        seen |= frontier
        nxt: set[str] = set()
        for name in frontier:
            callees = defs.get(name, ())
            if compaction in callees:
                return True
            nxt.update(callees)
        frontier = nxt
    return False


def _owners(receiver: cst.CSTNode | None, seq: _Sequence) -> set[str]:
    """Dotted names whose call is a forward of the model that owns `receiver`.

    `self.model.model` -> {`self.model.model`, `self.model`}; bare `self` is not a model.
    """
    raw = dotted(receiver) if receiver is not None else None
    if raw is None:
        return set()
    out = set()
    for name in {raw, seq.canonical(raw)}:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if i >= 2 or prefix not in ("self", "cls"):
                out.add(prefix)
    return out


def _paths(
    s: int,
    calls: list[tuple[cst.Call, tuple[int, ...]]],
    ranges: dict[int, list[int]],
    forward: list[bool],
) -> tuple[list[set[int]], list[set[int]], int | None]:
    """The paths (sets of call indices) into call `s` from the last forward, and out of it
    to the next forward; and the index of the next forward.

    A compaction on every path in, or on every path out, puts one between the two forwards
    on every run. Paths are read in source order, flow-insensitively, except around the
    innermost loop L that holds both the switch and a forward: when no forward precedes the
    switch in L's body, an iteration after the first reaches it from the end of the previous
    iteration's body; when none follows it, the next iteration's forward is reached through
    the top of L's body.
    """
    n = len(calls)
    loops = calls[s][1][::-1]  # innermost first
    with_forward = None
    plain: list[int] = []  # loops around the switch, inside L, that run no forward
    for loop in loops:
        lo, hi = ranges[loop]
        if any(forward[lo:hi]):
            with_forward = loop
            break
        plain.append(loop)
    # A loop without a forward may run its body again before the next forward: its whole
    # body belongs to both sides.
    extra = {k for loop in plain for k in range(*ranges[loop]) if k != s}

    j = s + 1
    while j < n and not forward[j]:
        j += 1
    next_forward = j if j < n else None
    after = [set(range(s + 1, j)) | extra]

    j = s - 1
    while j >= 0 and not forward[j]:
        j -= 1
    prev_forward = j if j >= 0 else None
    before = [set(range(j + 1, s)) | extra]

    if with_forward is not None:
        lo, hi = ranges[with_forward]
        fwd = [k for k in range(lo, hi) if forward[k]]
        if fwd[0] > s:  # no forward before the switch in the body
            looped = set(range(lo, s)) | set(range(fwd[-1] + 1, hi)) | extra
            # Without a forward before the loop, the first iteration has nothing to reuse:
            # only the path through the previous iteration counts.
            before = [looped] if prev_forward is None else before + [looped]
        if fwd[-1] < s:  # no forward after the switch in the body
            looped = set(range(s + 1, hi)) | set(range(lo, fwd[0])) | extra
            after = [looped] if next_forward is None else after + [looped]
            if next_forward is None:
                next_forward = fwd[0]
    for path in before + after:
        path.discard(s)
    return before, after, next_forward


def _all_compact(paths: list[set[int]], names: list[str | None], compaction: str) -> bool:
    return all(any(names[i] == compaction for i in path) for path in paths)


def _satisfied(
    before: list[list[str]],
    after: list[list[str]],
    siblings: list[list[str]],
    defs: dict[str, Iterable[str]],
    compaction: str,
    depth: int,
) -> bool:
    """A compaction on every path into the switch, or on every path out of it, or in a
    sibling method (each sibling is given by the names it calls)."""
    return any(
        all(_reaches_compaction(path, defs, compaction, depth) for path in side)
        for side in (before, after)
    ) or any(_reaches_compaction(calls, defs, compaction, depth) for calls in siblings)


def _indices(names: set[str]) -> str:
    for preferred in _INDEX_NAMES:
        for name in sorted(names, key=len):
            if name == preferred or name.endswith("." + preferred):
                return name
    for name in sorted(names):
        if "token_indices" in name.rsplit(".", 1)[-1]:
            return name
    return _PLACEHOLDER


__all__ = ["SkipTopkWithoutCompaction"]
