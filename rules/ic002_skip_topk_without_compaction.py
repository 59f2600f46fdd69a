from __future__ import annotations

import ast
from typing import Any, Iterator

from invariant_check.analysis.facts import last_name
from invariant_check.analysis.fields import FieldFlow
from invariant_check.analysis.needs import Names, Words
from invariant_check.analysis.objects import partials
from invariant_check.analysis.switch_paths import (
    SwitchQuery,
    Window,
    assumed_on,
    bound_switches,
    calls_beyond_class,
    calls_in,
    called_through,
    dotted_aliases,
    mixed_into,
    sampled_rows_name,
)
from invariant_check.analysis.topk import NONE, TopkNames, TopkRoles
from invariant_check.analysis.views import FunctionView
from invariant_check.api.rule import Report, Rule
from invariant_check.api.types import Fix, Invalid, Option, Valid

from ._hints import compaction_call_hint

_PLACEHOLDER = "token_indices_to_sample"

# fixtures shared by examples: a base class's switch helper, a subclass that compacts
# after calling it, a base class binding the switch in `load_model`
# A base class that compacts when its hook says reuse is on.
_ANSWERING_BASE = """
class DrafterBase:
    def begin_reuse(self, rows):
        return False

    def propose(self, rows):
        hidden = self.model(**self.inputs)
        if self.begin_reuse(rows):
            self.model.model.compact_topk_indices(rows)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""

# The same base, the answer kept in a local first.
_ANSWER_IN_LOCAL_BASE = _ANSWERING_BASE.replace(
    "        if self.begin_reuse(rows):", "        reused = self.begin_reuse(rows)\n        if reused:"
)

# A step runner that calls what it is handed before (or after) the first step's forward.
_STEP_RUNNER = """
def run_steps(model, inputs, num_steps, before_first=None, after_first=None):
    if before_first is not None:
        before_first()
    for step in range(num_steps - 1):
        hidden = model(**inputs)
        if step == 0 and after_first is not None:
            after_first()
"""

_HANDS_OVER = """
import functools

from .steps import run_steps

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    inner = self.model.model
    pack = None
    if self.share:
        inner.set_skip_topk(True)
        pack = functools.partial(inner.compact_topk_indices, token_indices_to_sample)
    return run_steps(self.model, self.inputs, self.num_steps, {when}=pack)
"""

_GETATTR_SWITCH = """
class Drafter:
    def load_model(self, model):
        self.model = model
        self._reuse = getattr(model.model, "set_skip_topk", None)

    def propose(self, sampled):
        hidden = self.model(**self.inputs)
        if self._reuse is not None:
            self._reuse(True){then}
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""

# Two compacting helpers (fused and plain) and one that gathers another buffer.
_PACKERS = """
def pack_fused(model, rows):
    model.compact_topk_indices(rows)


def pack_plain(model, rows):
    for layer in model.layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: rows.numel()] = buf[rows]


def pack_hidden(model, rows):
    buf = model.hidden_states_buffer
    buf[: rows.numel()] = buf[rows]
"""

_CHOOSES_PACKER = """
from .rows import pack_fused, pack_hidden, pack_plain

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    pack = pack_fused if self.fused else {other}
    pack(self.model.model, token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""

# The switch after step 0, then the reuse steps counted from 1, compacting at the top of one.
_COUNTED_FROM_ONE = """
def propose(self, rows):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    for step in range(1, self.num_steps):
        if step == {k}:
            self.model.model.compact_topk_indices(rows)
        hidden = self.model(**self.inputs)
"""

# A `while` loop keeping its own step counter: step 0 switches after its forward.
_WHILE_STEPS = """
def propose(self, rows):
    step = 0
    while step < self.num_steps:
        if step == {k}:
            self.model.model.compact_topk_indices(rows)
        hidden = self.model(**self.inputs)
        if step == 0:
            self.model.model.set_skip_topk(True)
        step += 1
"""

# A step that hands the sampled rows to a helper of another module (`rows.py`).
_SQUEEZES = """
from .rows import squeeze_shared_rows

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    squeeze_shared_rows(self.model, token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""

_ENTER_REUSE = """
class DraftBase:
    def _enter_reuse(self):
        self.model.model.set_skip_topk(True)
"""

_MTP_COMPACTS = """
from .example import DraftBase

class MTPDrafter(DraftBase):
    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self._enter_reuse()
        self.model.model.compact_topk_indices(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""

_BOUND_REUSE = """
import functools

class DrafterBase:
    def load_model(self, model):
        self.model = model
        self._reuse_on = functools.partial(self.model.model.set_skip_topk, True)
"""


_ROW_COMPACTOR = """
class RowCompactor:
    def __init__(self, model):
        self.model = model

    def __call__(self, rows):
        self.model.compact_topk_indices(rows)


class RowCounter:
    def __init__(self, model):
        self.model = model
        self.seen = 0

    def __call__(self, rows):
        self.seen += rows.numel()
"""



# A mixin of a hardware fork whose hook the proposer's other base calls between step 0 and
# the draft loop: in the proposer's instances `self.<name>` resolves through both bases.
_REUSE_MIXIN_BASE = """
class DraftBase:
    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self._after_first_step(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
        self._after_draft(token_indices_to_sample)

    def _after_first_step(self, rows):
        pass

    def _after_draft(self, rows):
        pass

    def _squeeze_rows(self, rows):
        for layer in self.model.model.layers:
            buf = layer.indexer.topk_indices_buffer
            buf[: rows.numel()].copy_(buf[rows])
"""
_REUSE_MIXIN_PROPOSER = """
from .base import DraftBase
from .example import IndexReuseMixin

class NpuMtpProposer(IndexReuseMixin, DraftBase):
    pass
"""


# A context manager class that switches reuse on for the body of a `with`.
_REUSE_WINDOW = """
class TopkReuseWindow:
    def __init__(self, draft_model):
        self.draft_model = draft_model

    def __enter__(self):
        self.draft_model.set_skip_topk(True)
        return self

    def __exit__(self, *exc):
        self.draft_model.set_skip_topk(False)

    def pack(self, rows):
        self.draft_model.compact_topk_indices(rows)
"""
_WITH_REUSE_WINDOW = """
from .example import TopkReuseWindow

class MtpWorker:
    def draft(self, batch, rows):
        logits = self.draft_runner.forward(batch)
        with TopkReuseWindow(self.draft_runner.model.model) as window:
            {before}
            for step in range(1, self.num_steps):
                logits = self.draft_runner.forward(batch)
                {after}
"""

class SkipTopkWithoutCompaction(Rule):
    """
    ## What it does
    Flags a call that switches the draft model into top-k reuse mode
    (`<model>.set_skip_topk(True)`, also `set_skip_topk(skip=True)`, a value that is on when
    sharing is configured, `set_skip_topk(self.share)`, or a parameter a caller leaves `True`)
    when a compaction of the
    shared top-k buffer does not run on every path between the forward before the switch
    (draft step 0) and the forward after it (the first step that reuses the buffer).

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
    where the model's `compact_topk_indices` gathers `buf[:n] = buf[slot_ids]`
    (`n = slot_ids.numel()`) once per distinct shared buffer (see IC003).

    ## Which orderings it proves
    The rule walks every path of the function's control flow (branches, loops, `try`,
    `return` (through the `finally` blocks around it), short-circuit operators, whose
    operands are conditions too: `if not reuse or compact(rows):` compacts wherever `reuse`
    holds) backwards from the switch to the previous forward and
    forwards to the next one. The switch is fine when a compaction lies on every path into it,
    or on every path out of it. A *forward* is a call of the switch's receiver or an object it
    hangs off (`self.model(...)` for `self.model.model`, also through a local alias), a call
    whose last name is in `forward-calls`, or a call of a project function that runs one (also
    through a local bound to a choice of two: `decode = self._fused if fused else self._plain`).
    A *compaction* is the `compaction-method` called on the same model (or an owner of it), or
    a call of a project function that compacts (any module, through imports, `self`, the class
    of `self.x`, `functools.partial` bindings, the `__call__` of a project class's instance
    (`self.compactor(rows)`; of a `torch.nn.Module` subclass, the `forward` it defines), a local bound to a choice of two that both compact (`pack =
    pack_fused if fused else pack_plain`), up to `helper-depth` calls deep). A project
    function compacts when it calls `compaction-method` or gathers the rows of a buffer named
    like `topk-buffers` in place, under any name of its own: `buf[:n].copy_(buf[idx])`,
    `buf[:n] = buf[idx]`, `buf[:n] = buf.index_select(0, idx)`,
    `buf.narrow(0, 0, n).copy_(buf.index_select(0, idx))`, `torch.gather`/`index_copy_`
    forms, through a local alias (`buf = layer.indexer.topk_indices_buffer`, `getattr`, a
    view of it), an entry of a container of buffers read back (`{b.data_ptr(): b ...}` then
    `for buf in d.values()`), or what a project function returns or yields (`for buf in
    _shared_buffers(model):` with `yield layer.indexer.topk_indices_buffer`, a list it fills
    and returns, `buf = self._first_buffer()`). A gather into a copy (`rows = buf.clone()`, then
    `rows[:n] = rows[idx]`) compacts nothing shared. Such a gather written out in the function
    itself compacts where it stands; a `for` loop that runs no forward and gathers on some
    path (each layer's buffer, skipping those already gathered) is one compaction. The
    compaction and the switch may also be called through what binds them: a local or an
    instance attribute bound to `functools.partial(<model>.compact_topk_indices, rows)` or to
    the bound method, or to a lambda that hands its parameters on in order (`lambda rows:
    <model>.compact_topk_indices(rows)`), or a class attribute `staticmethod(helper)`, or a
    parameter of a project function the call hands the compaction to
    (`run_steps(..., before_first=functools.partial(inner.compact_topk_indices, rows))`, or a
    local of the caller bound to that, and `before_first()` in `run_steps`); a switch bound
    to `self._reuse_on = functools.partial(<model>.set_skip_topk, True)` (or to
    `<model>.set_skip_topk`, or `getattr(<model>, "set_skip_topk", None)`) is judged where
    `self._reuse_on()` is called and reported where it is bound.

    A call of a project function is judged by what its body does *for this call's
    arguments*: its first event (on the path after the switch) and its last (on the path
    before it), with a parameter left to a `None` default or passed `None` pruning the
    branches that test it (`_run_model(..., compact_rows=rows)` on step 0 compacts after its
    forward; the same helper called without `compact_rows` only runs a forward; `rows if
    share else None` takes the branch the switch's own conditions decide), also when its name
    is in `forward-calls`. It is followed through the decorators the project defines (a
    wrapper that calls the wrapped method, then compacts), through the `__exit__` of a
    `with` block's context manager when the block is left (of a `@contextmanager`
    generator, the code after its `yield`; the code before it runs on entering the block),
    and through the switch itself: a
    switch method that compacts with the rows it is given (`set_skip_topk(True, rows)`, with
    `if skip and rows is not None: self.compact_topk_indices(rows)`) is its own compaction.
    A compaction of rows `0..n-1` (`torch.arange(n)`, `self.arange[:n]`, by position or by
    keyword, also through a local bound once to them: `rows = torch.arange(n)`, or passed to a
    helper that compacts the rows it is given: `pack_rows(model, rows=self.arange[:n])`)
    gathers each row onto itself and counts as none. A module called out of a container of the model
    (`draft_model.mtp_layers[0](...)`) is a forward. A local or an instance attribute bound
    with `getattr(model.model, "compact_topk_indices", None)` is the bound compaction. A
    helper method defined on every branch of a class-body `if`/`try` (`if HAS_TRITON: def
    _compact(...)` / `else: def _compact(...)`) is resolved to its last definition.

    Conditions count: a branch that contradicts the switch's own conditions is not taken (a
    switch under `if self.share:` pairs with a compaction under the same `if self.share:`,
    also through a local bound once outside loops: `share = self.share and ...`), nor one
    that contradicts what an earlier branch of the same path decided (`if self.share:
    compact(...)`, then `if not self.share: return` before the switch), but a
    compaction under a narrower condition than the switch's does not cover the paths where
    that condition is false. `hasattr(model, "compact_topk_indices")` tests are taken as
    true: a model without the method is IC003's finding; not a test of an object that holds
    the switched model (`hasattr(self.model, ...)` beside `self.model.model.set_skip_topk(True)`:
    the wrapper need not have the method). A test of several operands is left
    by its `else` only where one of them can be false (`if self.share and hasattr(model,
    "compact_topk_indices"):` after the switch under `if self.share and ...:` always compacts),
    and `if True:` never is.

    A path needs no compaction when nothing on it reads reused rows: it takes a branch that
    says there are no rows (a size that is zero: `rows.numel() == 0`, `len(rows) == 0`,
    `not len(rows)`, `rows.shape[0] == 0`, `rows.size(0) < 1`, `not n` where `n` holds a
    size, `num_reqs == 0`), or it turns reuse off again (`set_skip_topk(False)` on the same
    model) before any forward. A function that runs step 0's forward itself and switches
    after it must be followed by a draft step: when no forward comes after the switch, in
    the function or in the callers the source shows (methods calling `self.<it>(...)`, the
    function a nested one is defined in), the switch is no finding (a unit test that flips
    the switch and asserts; a path that returns before the draft loop).

    Inside a loop that runs the forward, a path that reaches the start of the function without
    any forward does not count (the switch then precedes step 0 in that iteration), and the
    previous iteration's forward is reached over the back edge. A switch under `step == K` (or
    `not step`) in `for step in range(...)` is followed through the rest of step K and then
    through step K + 1 with the counter known: `if step == 1: compact(...)` at the top of the
    loop runs before step 1's forward, `if step == 2:` does not. A switch before such a loop
    is followed into its first iteration with the counter at its first value (`for step in
    range(1, n):` then `if step == 1: compact(...)` first thing in the body). A `while` loop
    whose body ends with `step += 1` (and binds `step` nowhere else) counts as such a loop for
    a switch inside it.

    The switch's own function is judged for what every call of it the source shows passes:
    a helper `enter_reuse(model, rows=None)` that compacts under `if rows is not None:` is
    fine when each caller passes rows (a name, an attribute), and a finding when one leaves
    the `None` default. Parameters the function binds anew are not assumed.

    When a path reaches the start (or the end) of the function holding the switch, the window
    goes on in its callers: the methods of the class and of its base classes that call it
    (`self.on_multi_step_decode_begin(...)` in the base class's `propose()`, resolved for the
    subclass, so `self.on_prefill_end(...)` there is the subclass's compacting hook; a base
    read from the environment or the bundled models counts); where the class and its bases
    never call it, the methods of the project's subclasses that inherit it (a base class's
    helper called from a subclass's `propose()`: every such caller must cover it); the call
    sites of a module-level function across the project (through imports); and the function
    a nested one is defined in. A switch in a mixin (a class whose method calls `self.<name>`
    that its own bases do not define, or whose callers are not in them) is judged for each
    project class that mixes it in (`class NpuMtpProposer(IndexReuseMixin, DraftBase)`): there
    `self.<name>` and the callers resolve through the whole MRO, sibling bases included, and
    every such class must cover it. A function that returns a constant on every path after the
    switch (`set_skip_topk(True)`, then `return True`; falling off its end returns `None`)
    decides the caller's branch on its answer: `if self.begin_reuse(rows):
    self.compact(rows)` in the base class's `propose()` (or `reused =
    self.begin_reuse(rows)`, a local bound once, then `if reused:`) covers a hook that says
    `True`, and not one that returns nothing. In a `@contextmanager` generator, its `yield` is where the caller's `with` block
    runs: a switch before the `yield` is followed into that block (a compaction placed
    after the block's first forward comes too late). Likewise a switch in a context manager
    class's `__enter__` is followed into each `with Cls(...)` block of the project, and in
    `with Cls(...) as window:` (an `__enter__` that returns `self`), `window.pack(rows)` is
    the class's own method. A switch on a parameter of the function
    (`def enable_reuse(draft_model): draft_model.set_skip_topk(True)`) is, in each caller, a
    switch on the argument passed for it (`enable_reuse(self.model.model)`): a compaction of
    `self.model.model` there covers it, one of another model does not.

    ## Which objects it checks
    A switch counts only on an object that can hold a shared top-k buffer. The receiver
    (`self.model.model`, `self.sampler`, a parameter, a local alias) is resolved through
    imports, annotations and `self.x = Cls(...)` assignments, across the project, then the
    Python environment, then the bundled models of vLLM's classes (`invariant-check lint -v`
    says which source answered for each outside module). It is skipped only when its class
    provably holds none:
    - the switch only sets flags of the object that the class's own code tests in
      conditions (a sampler's top-k filter: `self.skip_topk = skip`, then
      `if self.skip_topk:` in `forward`), and neither the class nor a base defines the
      compaction, names a top-k buffer (`topk-buffers`) or builds in `__init__` an object of
      a class that does (the layers that hold the buffers); or
    - it is built as `Cls(...)` from a class of a module of the vLLM releases modelled
      (0.13.0 to 0.33.0) that the bundled models do not hold (vLLM's sampler): the models hold
      every class of those releases that defines the switch or the compaction, names a
      buffer, or subclasses one that does. A newer release's classes are read from the
      environment when vLLM is installed there; a module that no release modelled has tells
      nothing. An object only annotated with such a class may be of a plugin's subclass: it
      counts.
    A receiver nothing tells about (a model loaded by `get_model(...)`, an unannotated
    parameter, a class with a base outside the project and the models) counts.

    ## What it leaves to the runtime guard
    - A switch in a hook method that nothing in the project calls (the framework does) while
      another method of the class compacts: the order of such hooks is not in the source. The
      compacting method must be *reachable*: called somewhere in the project, overriding a
      base method (or a base the project cannot see), or named by `entry-points`. The
      `topk-layout` runtime guard checks the buffer layout when a reusing step runs.
    - A switch whose argument is a parameter that no call the source shows passes as `True`
      (`def propose(self, on): ... set_skip_topk(on)`), and the body of `def set_skip_topk`
      itself, which only delegates. A non-literal value the function reads
      (`set_skip_topk(self.share)`) is judged as on, with that value known true.
    - A compaction in a helper counts if the helper compacts on some path: its own conditions
      (`if idx is not None:`) are taken as the helper's business.
    - Switches called out of a container of callables (`self._hooks[phase]()`): the lookups
      that run them are not read as their callers. (A context-manager class's `__enter__` is:
      each `with Cls(...)` of the project is its caller.)
    - Step 0 and the reusing steps in two methods that only the framework calls, one after the
      other (`prepare()` runs step 0 and switches, `run_steps()` runs the rest): the source
      does not show that a draft step follows the switch.

    ## Fix
    Unsafe (`--fix --unsafe-fixes`). `<model>.compact_topk_indices(<rows>)` right after the
    switch, in its block (so under its conditions), on the switched model: vLLM 0.25.0's fix of
    0.24.0. The rows are those of a compaction the function already makes in the wrong place
    (that call is moved, not repeated: a second gather would permute the rows again), else the
    sampled rows by their vLLM names (`token_indices_to_sample`, `last_token_indices`, a name
    holding `token_indices`) bound before the switch. No fix for a switch bound to an attribute
    (reported where it is bound, away from its call), nor when neither is in scope, when the
    switch shares its line or statement with other code, when the misplaced compaction is not a
    statement of its own in this function or is the only statement of its block (`if k == 2:`
    would be left empty), or when a helper compacts on some paths only.

    ## Options
    - `switch-method` (default `set_skip_topk`): the method that turns reuse on.
    - `compaction-method` (default `compact_topk_indices`): the call that compacts the buffer.
    - `forward-calls` (default `model`, `forward`, `draft_model`, `run_model`, `_run_model`):
      last names of calls that run a draft step, besides calls of the switch's receiver.
    - `helper-depth` (default 4): how many calls deep compactions and forwards are looked for.
    - `topk-buffers` (globs, default `*topk_indices*`): attribute names of the shared top-k
      buffers; a function that gathers one's rows in place is a compaction, and a class that
      names one can hold a shared buffer. With other names than the defaults for
      `switch-method`, `compaction-method` and `topk-buffers`, vLLM classes missing from the
      bundled models are no longer known to hold no buffer (they count).
    - `entry-points` (globs, default `propose`, `forward`, `load_model`, `dummy_run`,
      `capture`, `on_*`): method names a framework calls by name, which count as reachable.
    """

    CODE = "IC002"
    NAME = "skip-topk-without-compaction"
    SUMMARY = (
        "Top-k reuse is switched on but the shared buffer is not compacted before the next "
        "draft step reads it."
    )
    HINT = compaction_call_hint("<model>", "compact_topk_indices", _PLACEHOLDER)
    OPTIONS = {
        "switch-method": Option("set_skip_topk", "method that switches index reuse on", str),
        "compaction-method": Option("compact_topk_indices", "call that compacts the buffer", str),
        "forward-calls": Option(
            ["model", "forward", "draft_model", "run_model", "_run_model"],
            "last names of calls that run a draft step (a forward of the draft model)",
        ),
        "helper-depth": Option(4, "how many helper calls deep compactions and forwards are looked for", int),
        "topk-buffers": Option(
            ["*topk_indices*"],
            "globs for the attribute names of shared top-k buffers: a function that gathers the rows of one in place compacts",
        ),
        "entry-points": Option(
            ["propose", "forward", "load_model", "dummy_run", "capture", "on_*"],
            "globs for method names a framework calls by name (reachable without a caller)",
        ),
    }

    VALID = [
        # The compaction under the switch's own flag `and` a `hasattr` test, as the switch is.
        Valid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    if self.share and hasattr(self.model.model, "set_skip_topk"):
        self.model.model.set_skip_topk(True)
    if self.share and hasattr(self.model.model, "compact_topk_indices"):
        self.model.model.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # Both calls through `getattr(...)`: the compaction follows the switch.
        Valid(
            """
def propose(self, token_indices_to_sample):
    inner = self.model.model
    hidden = self.model(**self.inputs)
    getattr(inner, "set_skip_topk")(True)
    getattr(inner, "compact_topk_indices")(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # A context manager class's `__enter__` switches; the block packs before its loop.
        Valid(_REUSE_WINDOW, files={"worker.py": _WITH_REUSE_WINDOW.replace("{before}", "window.pack(rows)").replace("{after}", "pass")}),
        # A mixin's switch, then its proposer's other base gathers the rows in place.
        Valid(
            """
class IndexReuseMixin:
    def _after_first_step(self, rows):
        self.model.model.set_skip_topk(True)
        self._squeeze_rows(rows)
""",
            files={"base.py": _REUSE_MIXIN_BASE, "mtp.py": _REUSE_MIXIN_PROPOSER},
        ),
        # A `while` loop's own counter (`step += 1` last in its body) is read as a `for`'s is.
        Valid(_WHILE_STEPS.replace("{k}", "1")),
        # The loop after the switch counts from 1: `if step == 1:` runs before its first forward.
        Valid(_COUNTED_FROM_ONE.replace("{k}", "1")),
        # A short circuit decides the compaction: it runs wherever reuse was switched on.
        Valid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    reuse = self.share and self.num_steps > 1
    if reuse:
        self.model.model.set_skip_topk(True)
    if not reuse or self.model.model.compact_topk_indices(token_indices_to_sample):
        log_step(0)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # A local bound to a choice of two helpers, each of which compacts.
        Valid(_CHOOSES_PACKER.replace("{other}", "pack_plain"), files={"rows.py": _PACKERS}),
        # The hook's answer kept in a local of the base class's `propose()`, then tested.
        Valid(
            """
from .base import DrafterBase

class MLADrafter(DrafterBase):
    def begin_reuse(self, rows):
        self.model.model.set_skip_topk(True)
        return True
""",
            files={"base.py": _ANSWER_IN_LOCAL_BASE},
        ),
        # The compaction handed to a project function that calls it before its first forward.
        Valid(_HANDS_OVER.replace("{when}", "before_first"), files={"steps.py": _STEP_RUNNER}),
        # A switch bound with `getattr`, followed by the compaction where it is called.
        Valid(_GETATTR_SWITCH.replace("{then}", "\n            self.model.model.compact_topk_indices(sampled)")),
        # The helper gathers the buffers another helper yields (a generator over the layers).
        Valid(
            _SQUEEZES,
            files={
                "rows.py": """
def _shared_buffers(model):
    for layer in model.model.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is not None:
            yield attn.indexer.topk_indices_buffer


def squeeze_shared_rows(model, rows):
    n = rows.numel()
    for buf in _shared_buffers(model):
        buf[:n] = buf[rows]
"""
            },
        ),
        # The same gather written out after the switch, over a list a method of the class
        # returns, and over the one buffer another method returns.
        Valid(
            """
class Drafter:
    def _topk_buffers(self):
        bufs = []
        for layer in self.model.model.layers:
            bufs.append(layer.indexer.topk_indices_buffer)
        return bufs

    def _first_buffer(self):
        return self.model.model.layers[0].indexer.topk_indices_buffer

    def propose(self, rows):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        if self.single_buffer:
            buf = self._first_buffer()
            buf[: rows.numel()] = buf[rows]
        else:
            for buf in self._topk_buffers():
                buf[: rows.numel()] = buf[rows]
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # A subclass's hook switches reuse on and says so; the base class compacts on the
        # branch it takes on that answer.
        Valid(
            """
from .base import DrafterBase

class MLADrafter(DrafterBase):
    def begin_reuse(self, rows):
        if not self.shares_indexer:
            return False
        self.model.model.set_skip_topk(True)
        return True
""",
            files={"base.py": _ANSWERING_BASE},
        ),
        # A compaction written out in a helper of another module, under a name of its own.
        Valid(
            """
from .rows import gather_rows

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    gather_rows(self.model.model, token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            files={
                "rows.py": """
def gather_rows(model, idx):
    for layer in model.layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: idx.numel()] = buf[idx]
"""
            },
        ),
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
        # The same condition tested twice: the compaction runs whenever the switch did.
        Valid(
            """
def propose(self, idx):
    hidden = self.model(**self.inputs)
    if self.share:
        self.model.model.set_skip_topk(True)
    if self.share:
        self.model.model.compact_topk_indices(idx)
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
        # The base class's propose() calls the hooks in order: compaction, then the switch.
        Valid(
            """
from .base import DraftSpeculator

class MTPSpeculator(DraftSpeculator):
    def on_prefill_end(self, num_reqs):
        if self.share:
            self.model.model.compact_topk_indices(self.last_token_indices[:num_reqs])

    def on_decode_begin(self, num_reqs):
        if self.share:
            self.model.model.set_skip_topk(True)
""",
            files={
                "base.py": """
class DraftSpeculator:
    def on_prefill_end(self, num_reqs): ...

    def on_decode_begin(self, num_reqs): ...

    def propose(self, num_reqs):
        self._prefill(num_reqs)
        self.on_prefill_end(num_reqs)
        if self.num_steps <= 1:
            return
        self.on_decode_begin(num_reqs)
        for _ in range(self.num_steps - 1):
            self.run_model(num_reqs)

    def _prefill(self, num_reqs):
        self.run_model(num_reqs)
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
        # A compacting method bound through functools.partial in __init__.
        Valid(
            """
import functools
from .topk import compact_rows

class Proposer:
    def __init__(self):
        self.compact = functools.partial(compact_rows, self)

    def propose(self, idx):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        self.compact(idx)
        hidden = self.model(**self.inputs)
""",
            files={
                "topk.py": """
def compact_rows(proposer, idx):
    proposer.model.model.compact_topk_indices(idx)
"""
            },
        ),
        # A helper returns early only when there are no rows: nothing to compact, and the
        # draft steps read no rows.
        Valid(
            """
class Drafter:
    def _enter_reuse(self, rows):
        self.model.model.set_skip_topk(True)
        n = rows.shape[0]
        if n == 0:
            return
        self.model.model.compact_topk_indices(rows)

    def propose(self, rows):
        hidden = self.model(**self.inputs)
        self._enter_reuse(rows)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # Reuse is switched off again on the path that leaves before the draft loop.
        Valid(
            """
class Drafter:
    def _enter_reuse(self, rows):
        self.model.model.set_skip_topk(True)
        if self.use_cuda_graph:
            self.model.model.set_skip_topk(False)
            return
        self.model.model.compact_topk_indices(rows)

    def propose(self, rows):
        hidden = self.model(**self.inputs)
        self._enter_reuse(rows)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # The same condition through a local bound once: the compaction runs whenever the
        # switch did.
        Valid(
            """
def propose(self, idx):
    reuse = self.share_indices and self.num_steps > 1
    hidden = self.model(**self.inputs)
    if reuse:
        self.model.model.set_skip_topk(True)
    logits = self.model.compute_logits(hidden)
    if reuse:
        self.model.model.compact_topk_indices(idx)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # The gather written out in the proposer, over the layers (skipping buffers already
        # gathered).
        Valid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    n = token_indices_to_sample.numel()
    seen = set()
    for layer in self.model.model.layers:
        buf = layer.indexer.topk_indices_buffer
        if id(buf) in seen:
            continue
        seen.add(id(buf))
        buf[:n] = buf[token_indices_to_sample]
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # A sampler's own top-k filter: its switch sets a flag that only its own `forward`
        # tests, and it holds no top-k buffer.
        Valid(
            """
import torch.nn as nn

class GreedySampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.greedy = False

    def set_skip_topk(self, skip):
        self.greedy = skip

    def forward(self, logits, k):
        if self.greedy:
            return logits.argmax(dim=-1)
        return logits.topk(k, dim=-1).indices[:, 0]

class Drafter:
    def __init__(self, model):
        self.model = model
        self.sampler = GreedySampler()

    def propose(self, batch):
        hidden = self.model(**self.inputs)
        self.sampler.set_skip_topk(True)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # vLLM's sampler, from the bundled models: no vLLM release has a top-k buffer there.
        Valid(
            """
from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

class Drafter:
    def __init__(self, model):
        self.model = model
        self.sampler = TopKTopPSampler()

    def propose(self, batch):
        hidden = self.model(**self.inputs)
        if batch.all_greedy:
            self.sampler.set_skip_topk(True)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # A unit test that runs step 0 and flips the switch: no draft step follows.
        Valid(
            """
from unittest.mock import MagicMock

def test_switch_after_step0():
    proposer = MagicMock()

    def run_step0(**inputs):
        proposer.model(**inputs)
        proposer.model.model.set_skip_topk(True)

    run_step0(input_ids=[1, 2])
    assert proposer.model.model.set_skip_topk.called
"""
        ),
        # A gather written with `narrow`/`index_select` in a helper, one distinct buffer once.
        Valid(
            """
from .rows import squeeze_rows

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    squeeze_rows(self.model.model.layers, token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            files={
                "rows.py": """
def squeeze_rows(layers, rows):
    done = set()
    for layer in layers:
        buf = layer.indexer.topk_indices_buffer
        if buf.data_ptr() in done:
            continue
        done.add(buf.data_ptr())
        buf.narrow(0, 0, rows.numel()).copy_(buf.index_select(0, rows))
"""
            },
        ),
        # The compaction bound with `functools.partial` and called after the switch.
        Valid(
            """
import functools

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    squeeze = functools.partial(self.model.model.compact_topk_indices, token_indices_to_sample)
    self.model.model.set_skip_topk(True)
    squeeze()
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # The compaction held as a class attribute: a `staticmethod` of a helper elsewhere.
        Valid(
            """
from .rows import compact_rows

class Proposer:
    _compact = staticmethod(compact_rows)

    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        self._compact(self.model.model, token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
""",
            files={
                "rows.py": """
def compact_rows(model, rows):
    model.compact_topk_indices(rows)
"""
            },
        ),
        # A step helper that compacts after its forward when given rows: passed on step 0.
        Valid(
            """
class Drafter:
    def _step(self, inputs, keep_rows=None):
        hidden = self.model(**inputs)
        if keep_rows is not None:
            self.model.model.compact_topk_indices(keep_rows)
        return hidden

    def propose(self, inputs, token_indices_to_sample):
        hidden = self._step(inputs, keep_rows=token_indices_to_sample)
        self.model.model.set_skip_topk(True)
        for _ in range(self.num_steps - 1):
            hidden = self._step(inputs)
"""
        ),
        # A decorator of the step-0 method compacts after the wrapped forward returns.
        Valid(
            """
from .steps import then_compact

class Drafter:
    @then_compact
    def _prefill(self, inputs):
        return self.model(**inputs)

    def propose(self, inputs):
        hidden = self._prefill(inputs)
        self.model.model.set_skip_topk(True)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**inputs)
""",
            files={
                "steps.py": """
import functools

def then_compact(fn):
    @functools.wraps(fn)
    def inner(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        self.model.model.compact_topk_indices(self.rows)
        return out

    return inner
"""
            },
        ),
        # Step 0 runs in a `with` block whose context manager compacts in `__exit__`.
        Valid(
            """
from .scopes import KeepSampledRows

def propose(self, inputs, token_indices_to_sample):
    with KeepSampledRows(self.model.model, token_indices_to_sample):
        hidden = self.model(**inputs)
    self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**inputs)
""",
            files={
                "scopes.py": """
class KeepSampledRows:
    def __init__(self, model, rows):
        self.model, self.rows = model, rows

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.model.compact_topk_indices(self.rows)
        return False
"""
            },
        ),
        # The compaction cached as a bound method with `getattr` at load time.
        Valid(
            """
class Proposer:
    def load_model(self, model):
        self.model = model
        self._squeeze = getattr(model.model, "compact_topk_indices", None)

    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self._squeeze(token_indices_to_sample)
        self.model.model.set_skip_topk(True)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # The model's switch compacts itself when it is given the rows to keep.
        Valid(
            """
class Predictor:
    def set_skip_topk(self, skip, keep=None):
        if skip and keep is not None:
            self.compact_topk_indices(keep)
        self.skip = skip

    def compact_topk_indices(self, keep):
        for layer in self.layers:
            buf = layer.topk_indices_buffer
            buf[: keep.numel()] = buf[keep]

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True, token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # The switch lives in a helper that compacts when it is given rows, and every call of
        # it the project shows passes the sampled rows.
        Valid(
            """
def begin_shared_indices(head, rows=None):
    head.set_skip_topk(True)
    if rows is not None:
        head.compact_topk_indices(rows)

class Drafter:
    def propose(self, inputs, token_indices_to_sample):
        hidden = self.model(**inputs)
        begin_shared_indices(self.model.model, rows=token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**inputs)
"""
        ),
        # One loop for every step: the switch after step 0's forward, the compaction at the
        # top of step 1, before that step's forward.
        Valid(
            """
def propose(self, inputs, token_indices_to_sample):
    for k in range(self.num_steps):
        if k == 1:
            self.model.model.compact_topk_indices(token_indices_to_sample)
        hidden = self.model(**inputs)
        if k == 0:
            self.model.model.set_skip_topk(True)
"""
        ),
        # Every case of a `match` compacts, the last one for any other backend: no path is
        # left without the compaction.
        Valid(
            """
def propose(self, draft, token_indices_to_sample, input_ids, positions):
    hidden = self.model(input_ids, positions)
    draft.set_skip_topk(True)
    match self.backend:
        case "triton":
            draft.compact_topk_indices(token_indices_to_sample, kernel="triton")
        case _:
            draft.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(input_ids, positions)
    draft.set_skip_topk(False)
    return hidden
"""
        ),
        # A `@contextmanager` compacts after its `yield`: leaving the block, after step 0's
        # forward and before the switch, runs it.
        Valid(
            """
from contextlib import contextmanager

@contextmanager
def sampled_rows_first(model, rows):
    yield
    model.compact_topk_indices(rows)

def propose(self, token_indices_to_sample):
    with sampled_rows_first(self.model.model, token_indices_to_sample):
        hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # The compacting helper is defined on both branches of a class-body `if`.
        Valid(
            """
class Proposer:
    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        self._compact(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)

    if HAS_TRITON:
        def _compact(self, rows):
            self.model.model.compact_topk_indices(rows, kernel="triton")
    else:
        def _compact(self, rows):
            self.model.model.compact_topk_indices(rows)
"""
        ),
        # The compaction is the bound method `getattr` gives a local.
        Valid(
            """
def propose(self, token_indices_to_sample):
    squeeze = getattr(self.model.model, "compact_topk_indices")
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    squeeze(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # A helper of another module switches the model it is handed; its caller compacts
        # that model (as it spells it) before the next step.
        Valid(
            """
from .reuse import enable_topk_reuse

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    enable_topk_reuse(self.model.model)
    self.model.model.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            files={"reuse.py": "def enable_topk_reuse(draft_model):\n    draft_model.set_skip_topk(True)\n"},
        ),
        # The same through a `@contextmanager` that switches the model it is handed: the
        # `with` block compacts before its first forward.
        Valid(
            """
from contextlib import contextmanager

@contextmanager
def topk_reuse(draft_model):
    draft_model.set_skip_topk(True)
    try:
        yield
    finally:
        draft_model.set_skip_topk(False)

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    with topk_reuse(self.model.model):
        self.model.model.compact_topk_indices(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # A base class's helper switches; the subclass's `propose` that calls it compacts.
        Valid(
            _ENTER_REUSE,
            files={"mtp.py": _MTP_COMPACTS},
        ),
        # The compaction under `if self.share:`; the switch after an early return when that
        # is false: no path reaches it without the compaction.
        Valid(
            """
def draft(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    if self.share:
        self.model.model.compact_topk_indices(token_indices_to_sample)
    if not self.share or self.num_steps == 1:
        return self.propose_plain(hidden)
    self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
"""
        ),
        # Step 0's helper returns its forward from a `try` whose `finally` compacts: the
        # compaction runs after the forward, before the caller switches.
        Valid(
            """
class Drafter:
    def _step0(self, token_indices_to_sample):
        try:
            return self.model(**self.inputs)
        finally:
            self.model.model.compact_topk_indices(token_indices_to_sample)

    def propose(self, token_indices_to_sample):
        hidden = self._step0(token_indices_to_sample)
        self.model.model.set_skip_topk(True)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
        # A base class binds the switch; the subclass's `propose` calls it and compacts.
        Valid(
            _BOUND_REUSE,
            files={
                "dsv32.py": """
from .example import DrafterBase

class DSV32Drafter(DrafterBase):
    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self._reuse_on()
        self.model.model.compact_topk_indices(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
            },
        ),
        # The compaction in `__call__` of a project helper object, and in a lambda on `self`
        # that hands its rows on.
        Valid(
            """
from .compactor import RowCompactor


class MTPProposer:
    def load_model(self, model):
        self.model = model
        self.compactor = RowCompactor(model.model)
        self._compact = lambda rows: self.model.model.compact_topk_indices(rows)

    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        if self.fused:
            self.compactor(token_indices_to_sample)
        else:
            self._compact(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
""",
            files={"compactor.py": _ROW_COMPACTOR},
        ),
        # A `torch.nn.Module` whose `forward` gathers the rows: calling the module runs it.
        Valid(
            """
import torch.nn as nn


class RowPacker(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers

    def forward(self, rows):
        for layer in self.layers:
            buf = layer.indexer.topk_indices_buffer
            buf[: rows.numel()] = buf[rows]


class MTPProposer:
    def load_model(self, model):
        self.model = model
        self.pack_rows = RowPacker(list(model.model.layers))

    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        self.pack_rows(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
        ),
    ]
    INVALID = [
        # The helper gathers another buffer (the hidden states), not the top-k indices.
        Invalid(
            """
from .rows import gather_rows

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    gather_rows(self.model.model, token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=5,
            files={
                "rows.py": """
def gather_rows(model, idx):
    buf = model.hidden_states_buffer
    buf[: idx.numel()].copy_(buf[idx])
"""
            },
        ),
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
        # The switch as a keyword argument, on a deeper receiver.
        Invalid(
            """
def propose(self, idx):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(skip=True)
    hidden = self.model(**self.inputs)
""",
            line=3,
        ),
        # A compaction under a narrower condition than the switch: not every path compacts.
        Invalid(
            """
def propose(self, idx):
    hidden = self.model(**self.inputs)
    if self.share:
        self.model.model.set_skip_topk(True)
        if self.num_steps > 2:
            self.model.model.compact_topk_indices(idx)
    hidden = self.model(**self.inputs)
""",
            line=4,
            message_contains="not on every path",
        ),
        # The forward hidden in a helper: the compaction after it comes too late.
        Invalid(
            """
class Drafter:
    def propose(self, idx):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        self._step(idx)
        self.model.model.compact_topk_indices(idx)

    def _step(self, idx):
        return self.run_model(self.inputs)
""",
            line=4,
        ),
        # A compacting method nothing calls, overriding nothing: it does not compact anything.
        Invalid(
            """
class Drafter:
    def _unused_compact(self, idx):
        self.model.model.compact_topk_indices(idx)

    def after_prefill(self):
        self.model.model.set_skip_topk(True)
""",
            line=6,
        ),
        # The base class's propose() switches before the subclass's hook compacts.
        Invalid(
            """
from .base import DraftSpeculator

class MTPSpeculator(DraftSpeculator):
    def on_decode_end(self, num_reqs):
        self.model.model.compact_topk_indices(self.last_token_indices[:num_reqs])

    def on_decode_begin(self, num_reqs):
        self.model.model.set_skip_topk(True)
""",
            line=8,
            files={
                "base.py": """
class DraftSpeculator:
    def propose(self, num_reqs):
        self.run_model(num_reqs)
        self.on_decode_begin(num_reqs)
        for _ in range(self.num_steps - 1):
            self.run_model(num_reqs)
        self.on_decode_end(num_reqs)

    def on_decode_begin(self, num_reqs): ...

    def on_decode_end(self, num_reqs): ...
"""
            },
        ),
        # An early return that is not for want of rows: CUDA-graph runs skip the compaction.
        Invalid(
            """
class Drafter:
    def _enter_reuse(self, rows):
        self.model.model.set_skip_topk(True)
        if self.use_cuda_graph:
            return
        self.model.model.compact_topk_indices(rows)

    def propose(self, rows):
        hidden = self.model(**self.inputs)
        self._enter_reuse(rows)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
""",
            line=3,
            message_contains="not on every path",
        ),
        # Step 0 in a helper that switches last: its caller runs the draft steps.
        Invalid(
            """
class Drafter:
    def _step0(self, inputs):
        hidden = self.model(**inputs)
        self.model.model.set_skip_topk(True)
        return hidden

    def propose(self, inputs):
        hidden = self._step0(inputs)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**inputs)
""",
            line=4,
        ),
        # The local flag is narrowed between the switch and the compaction.
        Invalid(
            """
def propose(self, idx):
    share = self.share_indices
    hidden = self.model(**self.inputs)
    if share:
        self.model.model.set_skip_topk(True)
    share = share and self.num_steps > 2
    if share:
        self.model.model.compact_topk_indices(idx)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=5,
        ),
        # The gather written out moves the hidden states, not the top-k indices.
        Invalid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    n = token_indices_to_sample.numel()
    buf = self.hidden_states_buffer
    buf[:n] = buf[token_indices_to_sample]
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=3,
        ),
        # The model's switch sets a flag that its forward hands to the indexer: the switch
        # concerns a top-k buffer the class cannot be shown not to hold.
        Invalid(
            """
import torch.nn as nn

class Predictor(nn.Module):
    def __init__(self, indexer):
        super().__init__()
        self.indexer = indexer
        self.reuse = False

    def set_skip_topk(self, skip):
        self.reuse = skip

    def forward(self, x):
        return self.indexer(x, reuse=self.reuse)

class Drafter:
    def __init__(self, indexer):
        self.model = Predictor(indexer)

    def propose(self, batch):
        hidden = self.model(batch)
        self.model.set_skip_topk(True)
        for _ in range(self.num_steps - 1):
            hidden = self.model(batch)
""",
            line=21,
        ),
        # The switch bound with `functools.partial` in one method and called in another.
        Invalid(
            """
import functools

class Proposer:
    def load_model(self, model):
        self.model = model
        self._reuse_on = functools.partial(self.model.model.set_skip_topk, True)

    def propose(self, sampled_rows):
        hidden = self.model(**self.inputs)
        self._reuse_on()
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
""",
            line=6,
        ),
        # Rows gathered into a copy of each buffer: the shared buffer itself is left as it was.
        Invalid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    for layer in self.model.model.layers:
        rows = layer.indexer.topk_indices_buffer.clone()
        rows[: token_indices_to_sample.numel()] = rows[token_indices_to_sample]
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=3,
        ),
        # Rows 0..n-1 gathered onto themselves: the sampled rows stay where step 0 put them.
        Invalid(
            """
import torch

def propose(self, batch_size):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    self.model.model.compact_topk_indices(torch.arange(batch_size))
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=5,
        ),
        # The switch's value is a parameter whose default is True; the caller passes nothing.
        Invalid(
            """
class Drafter:
    def propose(self):
        hidden = self.model(**self.inputs)
        self._reuse()
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)

    def _reuse(self, on=True):
        self.model.model.set_skip_topk(on)
""",
            line=9,
        ),
        # The switch's value is a config flag: on exactly when sharing is configured.
        Invalid(
            """
def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(self.share_indices)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=3,
        ),
        # A `@contextmanager` switches; the caller's block compacts only after the first reuse.
        Invalid(
            """
from contextlib import contextmanager

@contextmanager
def reusing(model):
    model.set_skip_topk(True)
    try:
        yield
    finally:
        model.set_skip_topk(False)

def propose(self, rows):
    hidden = self.model(**self.inputs)
    with reusing(self.model.model):
        for step in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
            if step == 0:
                self.model.model.compact_topk_indices(rows)
""",
            line=5,
        ),
        # Switched on at the second iteration; the layer called out of the model's container
        # is the forward, and nothing compacts between the iterations.
        Invalid(
            """
def draft_loop(self, draft_model, inputs):
    for i in range(self.num_modules):
        if i == 1:
            draft_model.set_skip_topk(True)
        hidden = draft_model.mtp_layers[0](**inputs)
""",
            line=4,
        ),
        # The step helper compacts after its forward, but the rows are passed on step 1 only.
        Invalid(
            """
class Drafter:
    def _step(self, inputs, keep_rows=None):
        hidden = self.model(**inputs)
        if keep_rows is not None:
            self.model.model.compact_topk_indices(keep_rows)
        return hidden

    def propose(self, inputs, token_indices_to_sample):
        hidden = self._step(inputs)
        self.model.model.set_skip_topk(True)
        for i in range(self.num_steps - 1):
            hidden = self._step(inputs, keep_rows=token_indices_to_sample if i == 0 else None)
""",
            line=10,
        ),
        # The helper compacts only when given rows; its one caller gives none.
        Invalid(
            """
def begin_shared_indices(head, rows=None):
    head.set_skip_topk(True)
    if rows is not None:
        head.compact_topk_indices(rows)

class Drafter:
    def propose(self, inputs, token_indices_to_sample):
        hidden = self.model(**inputs)
        begin_shared_indices(self.model.model)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**inputs)
""",
            line=2,
        ),
        # One loop for every step, but the compaction waits for step 2: step 1 reads the
        # per-token rows.
        Invalid(
            """
def propose(self, inputs, token_indices_to_sample):
    for k in range(self.num_steps):
        if k == 2:
            self.model.model.compact_topk_indices(token_indices_to_sample)
        hidden = self.model(**inputs)
        if k == 0:
            self.model.model.set_skip_topk(True)
""",
            line=7,
        ),
        # The `@contextmanager` compacts before its `yield`: on entering the block, before
        # step 0's forward has written the buffer; nothing compacts after it.
        Invalid(
            """
from contextlib import contextmanager

@contextmanager
def sampled_rows_first(model, rows):
    model.compact_topk_indices(rows)
    yield

def propose(self, token_indices_to_sample):
    with sampled_rows_first(self.model.model, token_indices_to_sample):
        hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=11,
        ),
        # The rows, given by keyword, are `0..n-1`: each row is gathered onto itself.
        Invalid(
            """
def propose(self, batch_size):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    self.model.model.compact_topk_indices(slot_ids=self.arange[:batch_size])
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=3,
        ),
        # The helper switches the model it is handed, and the caller compacts another one.
        Invalid(
            """
def enable_topk_reuse(draft_model):
    draft_model.set_skip_topk(True)

def draft(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    enable_topk_reuse(self.model.model)
    self.target_model.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=2,
        ),
        # The identity rows one assignment away.
        Invalid(
            """
import torch


def draft(self, batch_size):
    hidden = self.model(**self.inputs)
    rows = torch.arange(batch_size, device=self.device)
    self.model.model.set_skip_topk(True)
    self.model.model.compact_topk_indices(rows)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=7,
        ),
        # The same helper, called by two subclasses: one of them never compacts.
        Invalid(
            _ENTER_REUSE,
            line=3,
            files={
                "mtp.py": _MTP_COMPACTS,
                "eagle.py": """
from .example import DraftBase

class EagleDrafter(DraftBase):
    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self._enter_reuse()
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
""",
            },
        ),
        # The early return tests another flag: with `self.share` false the switch still runs.
        Invalid(
            """
def draft(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    if self.share:
        self.model.model.compact_topk_indices(token_indices_to_sample)
    if not self.draft_ready:
        return self.propose_plain(hidden)
    self.model.model.set_skip_topk(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=7,
        ),
        # The same binding, and the subclass's `propose` never compacts.
        Invalid(
            _BOUND_REUSE,
            line=6,
            message_contains="called in `DSV32Drafter.propose()` at dsv32.py:6",
            files={
                "dsv32.py": """
from .example import DrafterBase

class DSV32Drafter(DrafterBase):
    def propose(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self._reuse_on()
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
"""
            },
        ),
        # A helper object's `__call__` is followed: this one only counts the rows.
        Invalid(
            """
from .compactor import RowCounter


class MTPProposer:
    def load_model(self, model):
        self.model = model
        self.counter = RowCounter(model.model)

    def draft(self, token_indices_to_sample):
        hidden = self.model(**self.inputs)
        self.model.model.set_skip_topk(True)
        self.counter(token_indices_to_sample)
        for _ in range(self.num_steps - 1):
            hidden = self.model(**self.inputs)
""",
            line=11,
            files={"compactor.py": _ROW_COMPACTOR},
        ),
        # The hook switches reuse on but does not say so (it returns None): the base class's
        # branch on its answer skips the compaction.
        Invalid(
            """
from .base import DrafterBase

class MLADrafter(DrafterBase):
    def begin_reuse(self, rows):
        if self.shares_indexer:
            self.model.model.set_skip_topk(True)
""",
            line=6,
            files={"base.py": _ANSWERING_BASE},
        ),
        # The helper's generator yields the hidden-state buffers, not the top-k indices.
        Invalid(
            _SQUEEZES,
            line=5,
            files={
                "rows.py": """
def _shared_buffers(model):
    for layer in model.model.layers:
        yield layer.self_attn.hidden_states_buffer


def squeeze_shared_rows(model, rows):
    n = rows.numel()
    for buf in _shared_buffers(model):
        buf[:n] = buf[rows]
"""
            },
        ),
        # The same hand-over, called after the first reuse step's forward.
        Invalid(_HANDS_OVER.replace("{when}", "after_first"), line=10, files={"steps.py": _STEP_RUNNER}),
        # A switch bound with `getattr` in `load_model`, called with no compaction.
        Invalid(_GETATTR_SWITCH.replace("{then}", ""), line=4),
        # The helper compacts the rows it is given: rows 0..n-1 here, which move nothing.
        Invalid(
            """
from .rows import pack_rows

def propose(self, token_indices_to_sample):
    hidden = self.model(**self.inputs)
    n = token_indices_to_sample.numel()
    self.model.model.set_skip_topk(True)
    pack_rows(self.model.model, rows=self.arange[:n])
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=6,
            files={"rows.py": "def pack_rows(model, rows):\n    model.compact_topk_indices(rows)\n"},
        ),
        # A short circuit under a narrower condition: without `self.fused`, no compaction.
        Invalid(
            """
def propose(self, rows):
    hidden = self.model(**self.inputs)
    if self.share:
        self.model.model.set_skip_topk(True)
        self.fused and self.model.model.compact_topk_indices(rows)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=4,
        ),
        # A choice of two helpers, one of which gathers the hidden states instead.
        Invalid(_CHOOSES_PACKER.replace("{other}", "pack_hidden"), line=5, files={"rows.py": _PACKERS}),
        # The same loop compacting at `step == 2`: step 1 has read the per-token rows.
        Invalid(_COUNTED_FROM_ONE.replace("{k}", "2"), line=3),
        # The same `while` loop compacting at `step == 2`: step 1 has read the per-token rows.
        Invalid(_WHILE_STEPS.replace("{k}", "2"), line=8),
        # The same mixin compacting in the hook the base calls after the draft loop.
        Invalid(
            """
class IndexReuseMixin:
    def _after_first_step(self, rows):
        self.model.model.set_skip_topk(True)

    def _after_draft(self, rows):
        self.model.model.compact_topk_indices(rows)
""",
            line=3,
            files={"base.py": _REUSE_MIXIN_BASE, "mtp.py": _REUSE_MIXIN_PROPOSER},
        ),
        # The same `with` block packing after step 1's forward has read the per-token rows.
        Invalid(
            _REUSE_WINDOW,
            line=6,
            files={"worker.py": _WITH_REUSE_WINDOW.replace("{before}", "pass").replace("{after}", "window.pack(rows)")},
        ),
        # The switch called through `getattr(...)` inline, and no compaction before the loop.
        Invalid(
            """
def propose(self, token_indices_to_sample):
    inner = self.model.model
    hidden = self.model(**self.inputs)
    getattr(inner, "set_skip_topk")(True)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=4,
        ),
        # The same two tests, the compaction's narrower (`self.fused` may be false).
        Invalid(
            """
def propose(self, token_indices_to_sample, num_tokens):
    hidden = self.model(**self.inputs)
    if self.share and hasattr(self.model.model, "set_skip_topk"):
        self.model.model.set_skip_topk(True)
    if self.share and self.fused:
        self.model.model.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=4,
        ),
        # The compaction guarded by a test of the wrapper, which need not have the method.
        Invalid(
            """
def propose(self, token_indices_to_sample, num_tokens):
    hidden = self.model(**self.inputs)
    self.model.model.set_skip_topk(True)
    if hasattr(self.model, "compact_topk_indices"):
        self.model.compact_topk_indices(token_indices_to_sample)
    for _ in range(self.num_steps - 1):
        hidden = self.model(**self.inputs)
""",
            line=3,
        ),
    ]


    @classmethod
    def needs(cls, options: dict[str, Any]) -> Words:
        return Words(options["switch-method"])

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.switch = options["switch-method"]
        self.compaction = options["compaction-method"]
        self.buffers = Names(options["topk-buffers"], case_sensitive=True)
        self.query = SwitchQuery(
            switch=self.switch,
            compaction=self.compaction,
            forward_names=frozenset(options["forward-calls"]),
            depth=options["helper-depth"],
            buffers=self.buffers,
            entry_points=Names(options["entry-points"], case_sensitive=True),
            buffer_globs=tuple(options["topk-buffers"]),
        )
        defaults = self.default_options()
        modelled = all(options[k] == defaults[k] for k in ("switch-method", "compaction-method", "topk-buffers"))
        self.names = TopkNames(self.switch, self.compaction, self.buffers, closed_world=modelled)
        self._roles: TopkRoles | None = None

    def roles(self, view: FunctionView) -> TopkRoles:
        if self._roles is None or self._roles.project is not view.project:
            self._roles = TopkRoles(view.project, self.names)
        return self._roles

    # -- the screen: which calls are switches, and which windows to report ----------------------
    def check_function(self, view: FunctionView) -> Iterator[Report]:
        if view.name == self.switch:
            return  # the switch's own body only delegates
        flow = None
        local = aliases = None
        for call in calls_in(view.node):
            made = call
            if last_name(call.func) != self.switch and isinstance(call.func, (ast.Name, ast.Call)):
                # a call of a local bound to the switch: `enter = partial(m.set_skip_topk, True)`
                # (or of what `getattr(m, "set_skip_topk")` returns)
                if local is None:
                    local, aliases = partials(view.node), dotted_aliases(view.node)
                made = called_through(call, local, aliases)
            if last_name(made.func) != self.switch:
                continue
            assumed = assumed_on(view, made)
            if assumed is None:
                continue
            flow = flow or FieldFlow(view.node)
            idx = flow.by_call.get(id(call))
            if idx is None:
                continue  # in a lambda or nested scope
            window = Window(self.query, view, flow, call, made, assumed=assumed)
            verdict = window.judge(idx)
            if window.owner is not None and view.info is not None and (
                verdict.left_to_guard or verdict.unseen_callers or (not verdict.ok and calls_beyond_class(view.info, window.owner))
            ):
                # a mixin's switch runs in its subclasses' instances: judged there, where
                # `self.<helper>` and the callers resolve through their sibling bases
                subs = [Window(self.query, view, flow, call, made, assumed=assumed, owner=cls) for cls in mixed_into(window.owner, view.info)]
                if subs:
                    judged = [(w, w.judge(idx)) for w in subs]
                    window, verdict = next(((w, v) for w, v in judged if not v.ok), judged[0])
            if verdict.ok:
                continue
            if self.roles(view).of_receiver(view, window.receiver) == NONE:
                continue  # an object that holds no shared top-k buffer (a sampler)
            yield Report(call, window.message(verdict), self._hint(window), verdict.data())
        # the switch bound to an instance attribute, reported where it is bound
        holds_buffer = lambda receiver: self.roles(view).of_receiver(view, receiver) != NONE
        for found in bound_switches(view, self.query, holds_buffer):
            at = (f"line {found.call.lineno}" if found.method.module.path == view.module.path
                  else f"{view.project.display(found.method.module.path)}:{found.call.lineno}")
            where = f"`{view.text(found.target)}`, called in `{found.method.qual}()` at {at},"
            message = found.window.message(found.verdict, bound=where)
            yield Report(found.value, message, self._hint(found.window), {**found.verdict.data(), "called_at": found.call.lineno})

    def _hint(self, window: Window) -> str:
        target = window.receiver or "<draft model>"
        return compaction_call_hint(target, self.compaction, sampled_rows_name(window.view.node))

    def fix(self, report: Report, view: FunctionView) -> Fix | None:
        from ._fixes import ic002

        return ic002.build(self, report, view)


__all__ = ["SkipTopkWithoutCompaction"]
