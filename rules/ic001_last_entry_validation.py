from __future__ import annotations

import ast
from typing import Any, Iterator

from invariant_check.analysis.consumption import Use, other_entries
from invariant_check.analysis.facts import ref, walk_local
from invariant_check.analysis.needs import (
    MATCH_STATEMENT,
    TYPE_CALL,
    AfterLoop,
    All,
    Around,
    LoopLeftover,
    Names,
    bound,
    bound_from_call,
    subscripted,
)
from invariant_check.analysis.needs import (
    Any as AnyOf,
)
from invariant_check.analysis.source import one_line
from invariant_check.analysis.values import COMPREHENSIONS, ONE_ENTRY_SHAPES, OneEntry, PickedInto, Produced, loop_collection, picked
from invariant_check.analysis.values import Finding as ValueFinding
from invariant_check.analysis.views import FunctionView
from invariant_check.api.rule import Report, Rule
from invariant_check.api.types import Fix, Invalid, Option, Valid



# A dataclass whose `__post_init__` checks the metadata's type: building it validates.
_CHECKED_INPUTS = """
from dataclasses import dataclass

from vllm.v1.attention.backends.flash_attn import FlashAttentionMetadata


@dataclass
class DraftStepInputs:
    attn_metadata: FlashAttentionMetadata
    per_layer_attn_metadata: dict

    def __post_init__(self):
        if not isinstance(self.attn_metadata, FlashAttentionMetadata):
            raise TypeError(f"unsupported draft metadata {type(self.attn_metadata)}")
"""

class LastEntryValidation(Rule):
    """
    ## What it does
    Flags a check that sees one entry of a collection of metadata while the other entries
    are used after it unchecked: after a loop which produced one value per layer or per
    group, a check of the value of the loop's last iteration; and a check of one entry picked
    on purpose: the last (`d[names[-1]]`, `mds[-1]`, `list(d.values())[-1]`,
    `next(reversed(d.values()))`, `d.popitem()`, `*_, last = d.values()`) or the first
    (`next(iter(d.values()))`, `list(d.values())[0]`, `d[names[0]]`, `first, *_ = d.values()`),
    also one assignment or a walrus away (`first = next(iter(d.values()))`, then a check of
    `first`). A starred unpacking of a function's result (`md, *_ = f(...)`) takes the fields
    of the tuple it returns, not entries: not a pick.

    A *check* is where a value is validated or decides a code path: `isinstance(x, T)` or
    `type(x) is T` in an `assert`, an `if` or `while` test, or in a boolean that an `assert`/`if`
    later reads (`ok = isinstance(x, T)`), also inside a comprehension that does not bind `x`
    (`any(isinstance(x, t) for t in types)` checks the one `x`), or a `match x:` with class patterns (`case
    FlashAttentionMetadata():`, a validation when a case raises); `assert ...x...` and
    `if ...x...: raise`; and a call of a project function that validates that parameter (it
    asserts or raises on the parameter's type, itself or through the functions it calls, in
    any module), a project class's construction included (its `__init__` validates the
    parameter, or a dataclass's `__post_init__` checks the field: `if not
    isinstance(self.attn_metadata, T): raise TypeError(...)`).

    Only metadata is considered: a checked name that looks like attention metadata (see
    `metadata-names`), a check against a type that looks like one (see `metadata-types`), or
    a type check of a value the loop got from a metadata builder, whatever its name (`meta =
    group.get_metadata_builder().build_for_drafting(...)`: a `build` or `build_*` method of
    something named like a builder).

    ## Why is this bad?
    Each attention group (or layer) gets its own metadata, possibly of a different type. A
    check after the loop sees only the last group's value, so the outcome depends on group
    order: an unsupported backend in any other group slips through, and a type dispatch picks
    one group's code path for all of them. This shipped in vLLM 0.18/0.19 (`eagle.py`:
    `isinstance(attn_metadata, self.allowed_attn_types)` after
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
    A validation checks every entry:
    ```python
    if not all(isinstance(md, self.allowed_attn_types) for md in per_group_attn_metadata.values()):
        raise ValueError("unsupported attention metadata")
    ```
    A dispatch decides per group, or says which group decides
    (`any(isinstance(md, TreeAttentionMetadata) for md in per_group_attn_metadata.values())`).

    ## What it proves
    A one-entry check is reported only when the entries it did not see are *used after it*
    (the message names the first use):
    - the collection holding them is read after the check on a path where no full check
      came first: iterated, subscripted, passed to a call, returned, stored, or, for an
      attribute of `self`, read by a method of `self` called after the check (two calls
      deep: `self._run_draft_steps(n)` reading `self.per_layer_attn_metadata`) (what holds them:
      for a loop, every container it stores the value into, `d[k] = md`, `d.update(...)`,
      `xs.append(md)`, or reads it from, `for md in d.values()`, `md = d[name]`; for a pick,
      the collection it was picked from; and locals bound to one of these or built from it);
    - or they were handed on before the check, on a path that reaches it, where the rule
      cannot follow them: the loop passed each value to a call or stored it on `self` or in a
      parameter's container, or the collection was passed to a call (`with
      set_forward_context(per_layer):`); a hand-off in a branch that returns or raises is on
      no such path;
    - or nothing after the check uses either the checked entry or the others: the check
      guards code this function does not show (its caller, a later method), which sees
      them all; a pure validator of a parameter is reported.

    Not reported, besides the loop cases below:
    - after the check, the function goes on with the checked entry only (reads it, passes it
      on, returns it): `md = next(iter(d.values())); assert isinstance(md, T); use(md)`, a
      dispatch on the first entry whose branches use only that entry, a found-any search
      (`md = None`, a loop that binds it for a match, `assert md is not None`,
      `return md`). A type test of the checked entry after the check (`return
      isinstance(md, Tree)`) is a decision for the others and does not count as a use;
    - a later check covers every entry before the collection is used: a loop over it that
      checks each entry (`assert`/`if ...: raise` on the loop variable, or a validating call),
      `all(...)` over it in an `assert`/`if ...: raise`, or a project function that does
      either with it;
    - the collection holds one entry: spelled with one (`[x]`, `range(1)`, `xs[:1]`), a
      guarantee in the same function (`assert len(xs) == 1`, `if len(xs) != 1: raise` or
      `return`, `if len(xs) > 1: raise`, `(x,) = xs`, the check under `if len(xs) == 1:`), or
      a mapping whose values are one object (`dict.fromkeys(names, md)`, bound once and not
      stored into);
    - a pick keyed by what a loop around it iterates (`d[group.layer_names[0]]` in
      `for group in groups:`): one entry of every group, not one entry;
    - the collection is an attribute of `self` that every write keeps at one entry, with at
      least one write proving it: `if len(groups) != 1: raise` before
      `self.draft_attn_groups = list(groups)` in another method. The writes are looked for
      in the class, its bases and its subclasses across the project. No proof (the finding
      stays) when the attribute is written through another object
      (`runner.drafter.draft_attn_groups = groups`), grown in place (`.append`, `+=`,
      `[k] = v`), or when a base class cannot be read. A base's method that the class
      overrides without calling it through `super()` never runs on its instances: its
      writes do not count;
    - `xs[0]` of a name this function did not fill with entries itself (a comprehension,
      `list(d.values())`, stores in a loop): a parameter's or attribute's `[0]` is read as a
      tuple's first field (`attn_metadata[0].decode` of a list of per-cache metadata), not as
      a first entry.

    ## What it assumes about code outside the project
    Validating helpers, helpers that check every entry, and the classes that write a
    `self` attribute are read wherever imports lead: the project, then the Python environment
    (`--python`, `python = ...`, `extra-paths`), then the bundled models of vLLM's classes. A
    bundled model's method whose body is not modelled, and a call nothing answers for, are
    neither validators nor full checks: a check through them is not seen (no finding), a
    collection passed to them counts as used (the finding stays), and a class with such a
    base gets no single-entry proof from its attributes.

    ## What a loop leaves behind
    The names its body or target binds (assignment, unpacking, `with ... as`, walrus, nested
    loops, `except ... as`, `self.x = ...`), in `for` and `while` loops, and a collection
    subscripted by the loop's own variable after the loop (`per_layer[layer_name]`). Also:
    the name a walrus binds inside a comprehension (`[(md := build(g)) for g in groups]`
    leaves the last group's `md` in the function), and what a function returns from its own
    loop (`per_layer, md = self._build_attn_metadata(cad)`, when every return of
    `_build_attn_metadata` hands back its loop's last `md` in that place; the other values
    then are in what the same call returned beside it). Such a returned value is followed to
    a type check of it (`isinstance`, `type(...) is`, `type(...) not in`, against any
    types: a module-level `_SUPPORTED` tuple too), not to an assert, a raise or a
    validating helper it is passed to.
    Not flagged: a search loop that `break`s; a name reassigned between the loop and the check;
    a loop in one branch of an `if` only; a loop over one element (`[x]`, `(x,)`, `range(1)`,
    `xs[:1]`, `xs[-1:]`, or after `assert len(xs) == 1`, `assert len(xs) <= 1`,
    `if len(xs) != 1: raise` (or `return`), `if len(xs) > 1: raise`, also of
    `xs.values()`/`enumerate(xs)`); an accumulator (a name whose new value reads its old one: `md = merge(md, g.build())`);
    checks inside the loop.

    ## What it leaves to the runtime guard
    Whether a validating helper really raises for the type the loop produced, checks of
    values that reach the check through containers or attributes the rule cannot follow, and
    a single-group guarantee made where the rule cannot see it (the model runner, a config
    check): the `group-metadata` runtime guard checks every group's metadata type at every
    draft step.

    ## Fix
    Unsafe (`--fix --unsafe-fixes`; review it: it changes which values the check sees). Where
    the loop stores each value in a collection (`d[key] = value`, `lst.append(value)`), or the
    check picks one entry of one, the check is rewritten over every entry: a validation as
    `all(isinstance(md, T) for md in d.values())` (`any(...)` where the check raises when it
    holds), a dispatch as `any(...)`, as vLLM 0.20.0 wrote its tree-attention test; a validating
    helper is called for each entry. Otherwise an `assert`, an `if` that only raises, or a
    validating call moves into the loop, right after the statement that binds the value.
    No fix for a validating constructor whose value the function uses (`return
    DraftStepInputs(attn_metadata=...)`: no statement of its own to move), for a dispatch
    without a collection (which group decides is a design question), for
    a check stored in a flag first, for a value a comprehension's walrus binds (there is no
    loop body to move the check into), or when the check reads names bound between the loop
    and it.

    ## Options
    - `metadata-names` (globs, any case): names that hold attention metadata.
      Default `*metadata*`, `*attn_md*`, `*_md`, `md`. Measured on the whole `vllm/` tree of
      six releases (0.18.0 to 0.33.0): with every loop-assigned name (`*`) the rule reports
      many findings on correct code (counters, search results, last-batch values);
      `*metadata*` alone and the default both report exactly the known sites.
    - `metadata-types` (globs): type names that mark a check as a metadata check whatever
      the variable is called. Default `*Metadata`, `*attn_types` (as in
      `self.allowed_attn_types`).
    """

    CODE = "IC001"
    NAME = "last-entry-validation"
    SUMMARY = "A check after a per-group loop validates only the last group's metadata."
    HINT = (
        "Check every entry: `all(isinstance(md, T) for md in per_group.values())` for a "
        "validation, a per-group decision (or `any(...)`) for a dispatch."
    )
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
        # The same dataclass built for each group, inside the loop.
        Valid(
            """
from .inputs import DraftStepInputs


def propose(self, common_attn_metadata):
    steps = []
    for attn_group in self.draft_attn_groups:
        attn_metadata = attn_group.get_metadata_builder().build_for_drafting(common_attn_metadata, 0)
        steps.append(DraftStepInputs(attn_metadata, dict.fromkeys(attn_group.layer_names, attn_metadata)))
    return steps
""",
            files={"inputs.py": _CHECKED_INPUTS},
        ),
        # Every entry, looked up by the comprehension's own name.
        Valid(
            """
def propose(self, common_attn_metadata):
    per_layer_attn_metadata = {}
    for attn_group in self.draft_attn_groups:
        attn_metadata = attn_group.get_metadata_builder().build_for_drafting(common_attn_metadata, 0)
        for layer_name in attn_group.layer_names:
            per_layer_attn_metadata[layer_name] = attn_metadata
    assert all(isinstance(per_layer_attn_metadata[name], self.allowed_attn_types) for name in per_layer_attn_metadata)
    return per_layer_attn_metadata
"""
        ),
        # The first field of the tuple a function returns (`md, *_ = f(...)`), not the
        # first of several entries: one value, checked whole.
        Valid(
            """
def test_prepared(proposer, cad):
    spec_attn_metadata, *_ = proposer.prepare_inputs_padded(cad)
    assert spec_attn_metadata.seq_lens_cpu is None
"""
        ),
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
        # The single-group guarantee spelled as an `if ... raise`.
        Valid(
            """
def propose(self):
    if len(self.draft_attn_groups) != 1:
        raise NotImplementedError("one attention group only")
    for attn_group in self.draft_attn_groups:
        attn_metadata = attn_group.build()
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
        # An accumulator reads its old value: it holds every group, not the last one.
        Valid(
            """
def propose(self, groups):
    merged_metadata = None
    for group in groups:
        merged_metadata = merge(merged_metadata, group.build())
    assert isinstance(merged_metadata, MergedMetadata)
"""
        ),
        # A helper that does not validate anything is no check.
        Valid(
            """
def propose(self, groups):
    for group in groups:
        attn_metadata = group.build()
    self.log_metadata(attn_metadata)

def log_metadata(md):
    print(md)
"""
        ),
        # The check narrows the type of the only entry the function goes on with.
        Valid(
            """
def forward(self, attn_metadata):
    md = next(iter(attn_metadata.values()))
    assert isinstance(md, AscendMetadata)
    return self.kernel(md.seq_lens, md.block_tables)
"""
        ),
        # A dispatch on the first entry whose branches use that entry only.
        Valid(
            """
def __call__(self, input_ids):
    attn_metadata = get_forward_context().attn_metadata
    attn_metadata = next(iter(attn_metadata.values()), None)
    if not isinstance(attn_metadata, FastPathMetadata):
        return self.fallback(input_ids)
    return self.fast(input_ids, attn_metadata.seq_lens)
"""
        ),
        # A first-entry check, then a loop that checks every entry before they are used.
        Valid(
            """
def propose(self, per_layer_attn_metadata):
    first = list(per_layer_attn_metadata.values())[0]
    if not isinstance(first, FlashAttentionMetadata):
        raise ValueError("unsupported")
    for md in per_layer_attn_metadata.values():
        if not isinstance(md, self.allowed_attn_types):
            raise ValueError("unsupported")
    return self.model(attn_metadata=per_layer_attn_metadata)
"""
        ),
        # A found-any search: the last match is what the function returns.
        Valid(
            """
def local_agent(self, devices):
    agent_metadata = None
    for device in devices:
        if device.ip != self.ip:
            continue
        agent_metadata = AgentMetadata(device.id, device.ip)
    assert agent_metadata is not None, "this host is not in the rank table"
    return agent_metadata
"""
        ),
        # Every write of `self.draft_attn_groups` keeps one group: the loop sees it.
        Valid(
            """
class OneGroupProposer:
    def initialize_attn_backend(self, attn_groups):
        if len(attn_groups) != 1:
            raise NotImplementedError("the draft model must have one attention group")
        self.draft_attn_groups = list(attn_groups)

    def propose(self, common_attn_metadata):
        per_layer_attn_metadata = {}
        for attn_group in self.draft_attn_groups:
            attn_metadata = attn_group.build(common_attn_metadata)
            for layer_name in attn_group.layer_names:
                per_layer_attn_metadata[layer_name] = attn_metadata
        assert isinstance(attn_metadata, FlashAttentionMetadata)
        return self.model(attn_metadata=per_layer_attn_metadata)
"""
        ),
        # Every layer's entry is one object.
        Valid(
            """
def propose(self, attn_metadata):
    per_layer_attn_metadata = dict.fromkeys(self.attn_layer_names, attn_metadata)
    md = next(iter(per_layer_attn_metadata.values()))
    assert isinstance(md, FlashAttentionMetadata)
    return self.model(attn_metadata=per_layer_attn_metadata)
"""
        ),
        # `[0]` of a parameter: a field of a list of per-cache metadata, not a first entry.
        Valid(
            """
def forward_decode(self, attn_metadata):
    assert attn_metadata[0].decode is not None
    return self._decode(attn_metadata)
"""
        ),
        # The pick runs only when there is one entry.
        Valid(
            """
def propose(self, per_layer_attn_metadata):
    if len(per_layer_attn_metadata) != 1:
        return self.propose_per_group(per_layer_attn_metadata)
    if isinstance(next(iter(per_layer_attn_metadata.values())), TreeAttentionMetadata):
        return self.propose_tree(per_layer_attn_metadata)
    return self.propose_chain(per_layer_attn_metadata)
"""
        ),
        # The first layer's entry of every group, checked inside the loop over the groups:
        # the layers of a group share its metadata, so every group is checked.
        Valid(
            """
def check_groups(self, per_layer_attn_metadata):
    for group in self.draft_attn_groups:
        attn_metadata = per_layer_attn_metadata[group.layer_names[0]]
        if not isinstance(attn_metadata, self.allowed_attn_types):
            raise ValueError(f"unsupported draft metadata {type(attn_metadata)}")
    self.run_model(per_layer_attn_metadata)
"""
        ),
        # The subclass overrides the method that sets the groups, without `super()`, and
        # allows one group only: the base's write never runs on its instances.
        Valid(
            """
from .base import BaseProposer


class OneGroupProposer(BaseProposer):
    def initialize_attn_backend(self, groups):
        if len(groups) != 1:
            raise NotImplementedError("one attention group only")
        self.draft_attn_groups = list(groups)

    def build(self, cad):
        per_layer = {}
        for group in self.draft_attn_groups:
            attn_metadata = group.builder.build_for_drafting(cad, 0)
            for name in group.layer_names:
                per_layer[name] = attn_metadata
        if not isinstance(attn_metadata, FlashAttentionMetadata):
            raise ValueError("unsupported")
        return per_layer
""",
            files={"base.py": """
class BaseProposer:
    def initialize_attn_backend(self, groups):
        self.draft_attn_groups = list(groups)
"""},
        ),
        # A batch built from one-element lists holds one entry: `[0]` is all of it.
        Valid(
            """
def test_expanded_copy_keeps_the_request(build_group_metadata, expand, prompt, seq_len):
    group_metadata = build_group_metadata([prompt], 64, [seq_len])[0]
    out = expand(group_metadata)
    assert out.request_id == group_metadata.request_id
"""
        ),
        # The whole dict goes to the graph runner on a branch that returns; the path that
        # reaches the check goes on with the checked entry alone.
        Valid(
            """
def run(self, per_layer_attn_metadata, input_ids, positions):
    if self.use_cuda_graph:
        for md in per_layer_attn_metadata.values():
            if not isinstance(md, AscendMetadata):
                raise TypeError(type(md))
        return self.graph_runner(per_layer_attn_metadata)
    first_md = per_layer_attn_metadata[self.attn_layer_names[0]]
    if not isinstance(first_md, AscendMetadata):
        raise TypeError(type(first_md))
    return self.model(input_ids=input_ids, positions=positions, attn_metadata=first_md)
"""
        ),
        # A `match` on each group's own metadata, inside the loop; and one on a mode, after it.
        Valid(
            """
def prepare(self, cad):
    per_layer = {}
    for group in self.draft_attn_groups:
        attn_metadata = group.get_metadata_builder().build_for_drafting(cad, 0)
        match attn_metadata:
            case FlashAttentionMetadata() | TritonAttentionMetadata():
                pass
            case _:
                raise ValueError("unsupported draft attention metadata")
        for name in group.layer_names:
            per_layer[name] = attn_metadata
    match self.method:
        case "eagle" | "mtp":
            return self.run_model(per_layer)
        case _:
            raise ValueError(self.method)
"""
        ),
        # A spec read per group, checked after the loop: not metadata, and built by no
        # metadata builder.
        Valid(
            """
def check_groups(self):
    for group in self.draft_attn_groups:
        spec = group.kv_cache_spec
        layers = group.layer_names
    if not isinstance(spec, FullAttentionSpec):
        raise ValueError("draft layers need full attention")
    return layers
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
        # A dispatch on the last group's type.
        Invalid(
            """
def propose(self, groups):
    for group in groups:
        attn_metadata = group.build()
    if isinstance(attn_metadata, TreeAttentionMetadata):
        return self.propose_tree()
""",
            line=4,
            message_contains="decides",
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
        # `with ... as` binds the metadata inside the loop.
        Invalid(
            """
def propose(self, groups):
    for g in groups:
        with g.build() as attn_metadata:
            self.stage(attn_metadata)
    assert isinstance(attn_metadata, FlashAttentionMetadata)
""",
            line=5,
        ),
        # A walrus in the loop body.
        Invalid(
            """
def propose(self, groups):
    for g in groups:
        if (attn_metadata := g.build()) is not None:
            self.stage(attn_metadata)
    assert isinstance(attn_metadata, self.allowed_attn_types)
""",
            line=5,
        ),
        # A while loop over the groups.
        Invalid(
            """
def propose(self, groups):
    i = 0
    while i < len(groups):
        attn_metadata = groups[i].build()
        i += 1
    if not isinstance(attn_metadata, self.allowed_attn_types):
        raise ValueError("unsupported")
""",
            line=6,
        ),
        # The type check stored in a flag, the flag branched on.
        Invalid(
            """
def propose(self, groups):
    for g in groups:
        attn_metadata = g.build()
    supported = isinstance(attn_metadata, self.allowed_attn_types)
    if not supported:
        raise ValueError("unsupported")
""",
            line=4,
        ),
        # A helper of another module validates the last value only.
        Invalid(
            """
from .checks import require_supported

def propose(self, groups):
    for g in groups:
        attn_metadata = g.build()
    require_supported(attn_metadata)
""",
            line=6,
            files={
                "checks.py": """
def require_supported(md):
    if not isinstance(md, (FlashAttentionMetadata, TreeAttentionMetadata)):
        raise ValueError(f"unsupported: {type(md)}")
"""
            },
        ),
        # The same helper reached by keyword, and passing the value on by keyword.
        Invalid(
            """
from .checks import require_supported

def propose(self, groups):
    for g in groups:
        attn_metadata = g.build()
    require_supported(strict=True, md=attn_metadata)
""",
            line=6,
            files={
                "checks.py": """
def require_supported(strict, md):
    _check_type(value=md)

def _check_type(value):
    if not isinstance(value, (FlashAttentionMetadata, TreeAttentionMetadata)):
        raise ValueError(f"unsupported: {type(value)}")
"""
            },
        ),
        # One assignment away: the first entry, then a check of it.
        Invalid(
            """
def check(self, per_group_metadata):
    first = next(iter(per_group_metadata.values()))
    assert isinstance(first, FlashAttentionMetadata)
""",
            line=3,
            message_contains="first",
        ),
        # After the loop, the loop's own variable picks the last layer's entry.
        Invalid(
            """
def build(self, groups):
    per_layer_attn_metadata = {}
    for layer_name in self.layer_names:
        per_layer_attn_metadata[layer_name] = self.builder.build(layer_name)
    assert isinstance(per_layer_attn_metadata[layer_name], FlashAttentionMetadata)
""",
            line=5,
        ),
        # The first entry, spelled `[0]`, decides for the others the function goes on with.
        Invalid(
            """
def propose(self, common_attn_metadata):
    per_group_attn_metadata = {}
    for gid, attn_group in enumerate(self.draft_attn_groups):
        per_group_attn_metadata[gid] = attn_group.build(common_attn_metadata)
    attn_metadata = list(per_group_attn_metadata.values())[0]
    if isinstance(attn_metadata, TreeAttentionMetadata):
        return self.propose_tree()
    return self.propose_chain(per_group_attn_metadata)
""",
            line=6,
            message_contains="used at line 8",
        ),
        # `.popitem()` checks the entry it removes; the others are forwarded.
        Invalid(
            """
def propose(self, per_layer_attn_metadata):
    _, md = per_layer_attn_metadata.popitem()
    assert isinstance(md, FlashAttentionMetadata)
    return self.model(attn_metadata=per_layer_attn_metadata)
""",
            line=3,
            message_contains="last",
        ),
        Invalid(
            """
def propose(self, per_layer_attn_metadata):
    *_, last = per_layer_attn_metadata.values()
    assert isinstance(last, FlashAttentionMetadata)
    self.model(attn_metadata=per_layer_attn_metadata)
""",
            line=3,
        ),
        # The entry picked in a walrus, the collection forwarded afterwards.
        Invalid(
            """
def propose(self, per_layer_attn_metadata):
    if not isinstance(md := next(iter(per_layer_attn_metadata.values())), FlashAttentionMetadata):
        raise ValueError(f"unsupported {type(md)}")
    return self.model(attn_metadata=per_layer_attn_metadata)
""",
            line=2,
        ),
        # The first of a list the function built, checked; every entry is passed on.
        Invalid(
            """
def propose(self, groups):
    group_metadata = [g.build() for g in groups]
    assert isinstance(group_metadata[0], FlashAttentionMetadata)
    return self.model(group_metadata)
""",
            line=3,
            message_contains="first",
        ),
        # The loop's own variable is left behind; the collection it came from is forwarded.
        Invalid(
            """
def propose(self, per_layer_attn_metadata):
    for md in per_layer_attn_metadata.values():
        md.prepare()
    assert isinstance(md, FlashAttentionMetadata)
    return self.model(attn_metadata=per_layer_attn_metadata, seq_lens=md.seq_lens)
""",
            line=4,
        ),
        # The forward context already holds every entry when one of them decides.
        Invalid(
            """
def propose(self, per_layer_attn_metadata):
    with set_forward_context(per_layer_attn_metadata):
        md = next(iter(per_layer_attn_metadata.values()))
        if isinstance(md, TreeAttentionMetadata):
            return self.propose_tree(md)
        return self.propose_chain(md)
""",
            line=4,
            message_contains="handed on at line 2",
        ),
        # A write that grows the attribute breaks the single-group proof.
        Invalid(
            """
class OneGroupProposer:
    def initialize_attn_backend(self, attn_groups):
        if len(attn_groups) != 1:
            raise NotImplementedError("the draft model must have one attention group")
        self.draft_attn_groups = list(attn_groups)

    def add_group(self, group):
        self.draft_attn_groups.append(group)

    def propose(self, common_attn_metadata):
        per_layer_attn_metadata = {}
        for attn_group in self.draft_attn_groups:
            attn_metadata = attn_group.build(common_attn_metadata)
            for layer_name in attn_group.layer_names:
                per_layer_attn_metadata[layer_name] = attn_metadata
        assert isinstance(attn_metadata, FlashAttentionMetadata)
        return self.model(attn_metadata=per_layer_attn_metadata)
""",
            line=16,
        ),
        # A walrus in a comprehension binds in the function: after it, the name holds the
        # last group's metadata.
        Invalid(
            """
def prepare(self, cad):
    group_metadata = [
        (attn_metadata := group.get_metadata_builder().build_for_drafting(cad, 0))
        for group in self.draft_attn_groups
    ]
    assert isinstance(attn_metadata, FlashAttentionMetadata)
    return self.run_model(group_metadata)
""",
            line=6,
            message_contains="last `attn_metadata`",
        ),
        # The same walrus, its value checked by an attribute rather than a type.
        Invalid(
            """
def prepare(self, cad):
    per_layer = {
        name: (attn_md := self.builders[name].build_for_drafting(cad, 0))
        for name in self.attn_layer_names
    }
    if attn_md.num_actual_tokens > self.max_num_tokens:
        raise RuntimeError("draft batch larger than the captured graphs")
    return self.run_model(per_layer)
""",
            line=6,
            message_contains="last `attn_md`",
        ),
        # The group loop moved into a helper that returns its last value beside the dict.
        Invalid(
            """
class Proposer:
    def _build(self, cad):
        per_layer = {}
        attn_metadata = None
        for group in self.draft_attn_groups:
            attn_metadata = group.get_metadata_builder().build_for_drafting(cad, 0)
            for name in group.layer_names:
                per_layer[name] = attn_metadata
        return per_layer, attn_metadata

    def propose(self, cad):
        per_layer, attn_metadata = self._build(cad)
        if not isinstance(attn_metadata, self.allowed_attn_types):
            raise ValueError("unsupported draft attention metadata")
        return self.run_model(per_layer)
""",
            line=13,
            message_contains="inside `self._build(...)`",
        ),
        # A `match` with class patterns is a type check: after the group loop it sees the
        # last group's metadata only.
        Invalid(
            """
def propose_steps(self, cad):
    per_layer = {}
    for group in self.draft_attn_groups:
        attn_metadata = group.get_metadata_builder().build_for_drafting(cad, 0)
        for name in group.layer_names:
            per_layer[name] = attn_metadata
    match attn_metadata:
        case TreeAttentionMetadata():
            return self._propose_tree(per_layer)
        case FlashAttentionMetadata() | TritonAttentionMetadata():
            pass
        case _:
            raise ValueError("unsupported draft attention metadata")
    return self.run_model(per_layer)
""",
            line=7,
            message_contains="`match attn_metadata` validates only the last `attn_metadata`",
        ),
        # Any name is metadata when a metadata builder built it.
        Invalid(
            """
def build_step0(self, cad):
    per_layer = {}
    for group in self.draft_attn_groups:
        meta = group.get_metadata_builder().build_for_drafting(cad, draft_index=0)
        for name in group.layer_names:
            per_layer[name] = meta
    if not isinstance(meta, _MULTI_STEP_BACKENDS):
        raise ValueError(f"{type(meta).__name__} cannot run more than one draft step")
    return per_layer
""",
            line=7,
            message_contains="only the last `meta`",
        ),
        # The same helper; the types are a module-level tuple under a name of its own, and
        # the check is `type(...) not in`.
        Invalid(
            """
from .backends import FlashAttentionMetadata, TritonAttentionMetadata

_SUPPORTED = (FlashAttentionMetadata, TritonAttentionMetadata)


class Proposer:
    def _build(self, cad):
        per_layer = {}
        attn_metadata = None
        for group in self.draft_attn_groups:
            attn_metadata = group.get_metadata_builder().build_for_drafting(cad, 0)
            for name in group.layer_names:
                per_layer[name] = attn_metadata
        return attn_metadata, per_layer

    def propose(self, cad):
        attn_metadata, per_layer = self._build(cad)
        if type(attn_metadata) not in _SUPPORTED:
            raise ValueError("unsupported draft attention metadata")
        return self.run_model(per_layer)
""",
            line=18,
            message_contains="inside `self._build(...)`",
            files={"backends.py": "class FlashAttentionMetadata: ...\n\n\nclass TritonAttentionMetadata: ...\n"},
        ),
        # `any(...)` over the allowed types still checks the one last `attn_metadata`.
        Invalid(
            """
def propose(self, common_attn_metadata):
    per_layer_attn_metadata = {}
    for attn_group in self.draft_attn_groups:
        attn_metadata = attn_group.get_metadata_builder().build_for_drafting(common_attn_metadata, 0)
        for layer_name in attn_group.layer_names:
            per_layer_attn_metadata[layer_name] = attn_metadata
    assert any(isinstance(attn_metadata, t) for t in self.allowed_attn_types)
    return per_layer_attn_metadata
""",
            line=7,
        ),
        # Only the last group's metadata goes through the dataclass's type check.
        Invalid(
            """
from .inputs import DraftStepInputs


def propose(self, common_attn_metadata):
    per_layer_attn_metadata = {}
    for attn_group in self.draft_attn_groups:
        attn_metadata = attn_group.get_metadata_builder().build_for_drafting(common_attn_metadata, 0)
        for name in attn_group.layer_names:
            per_layer_attn_metadata[name] = attn_metadata
    return DraftStepInputs(attn_metadata=attn_metadata, per_layer_attn_metadata=per_layer_attn_metadata)
""",
            line=10,
            files={"inputs.py": _CHECKED_INPUTS},
        ),
    ]

    @classmethod
    def needs(cls, options: dict[str, Any]):
        md, types = _matchers(options)
        type_check = All(types, AnyOf(TYPE_CALL, MATCH_STATEMENT))
        # `_relevant` takes a finding whose checked name, the local name it went through
        # (`via`), or collection looks like metadata, or whose check names a metadata type:
        # each origin below appears once per way it can be relevant
        one_entry = AnyOf(*ONE_ENTRY_SHAPES)
        return AnyOf(
            # a metadata name a loop leaves behind, checked any way
            LoopLeftover(md),
            # a metadata collection subscripted by a loop's variable, after the loop
            AfterLoop(subscripted(md)),
            # any name a loop leaves behind, checked against a metadata type after the loop
            AfterLoop(type_check),
            # a metadata name bound (from a call whose function returns its loop's last
            # value, or by a comprehension's walrus) and checked against a metadata type ...
            All(bound(md), type_check),
            # ... or against any type, when bound to a call's result or by a walrus
            All(bound_from_call(md), AnyOf(TYPE_CALL, MATCH_STATEMENT)),
            # one entry picked out of a metadata collection
            picked(md),
            # one entry of any collection, bound to a metadata name by the statement that
            # picks it (`md, *_ = build()`, `md = next(iter(d.values()))`) ...
            All(PickedInto(md), one_entry),
            # ... or checked against a metadata type
            All(type_check, one_entry),
            # any name a loop binds to what a metadata builder built, type-checked after it
            AfterLoop(All(BUILDER, BUILD_CALL, AnyOf(TYPE_CALL, MATCH_STATEMENT))),
        )

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.md, self.types = _matchers(options)

    def check_function(self, view: FunctionView) -> Iterator[Report]:
        def is_validator(call: ast.Call, pos: int | str, names: tuple[str, ...]) -> bool:
            # only metadata is reported through a helper (a helper's check has no type here)
            return any(self.md.matches(_last(n)) for n in names) and view.validates_through(call, pos)

        seen: set[int] = set()
        for found in view.last_values(is_validator):
            if id(found.check.statement) in seen or not self._relevant(found):
                continue
            use = other_entries(view, found, is_validator)
            if not use.consumed:
                continue
            seen.add(id(found.check.statement))
            yield self._report(view, found, use)

    # -- the query ----------------------------------------------------------------------------
    def _relevant(self, found: ValueFinding) -> bool:
        names = [found.name]
        if found.via:
            names.append(found.via)
        if isinstance(found.origin, OneEntry):
            names.append(found.origin.collection)
        if any(self.md.matches(_last(n)) for n in names if n):
            return True
        if found.check.kind in ("type", "match") and isinstance(found.origin, Produced) and built_by_a_builder(found.origin.loop, found.name):
            return True
        return found.check.types is not None and self._is_md_type(found.check.types)

    def _is_md_type(self, types: ast.AST) -> bool:
        for node in ast.walk(types):
            if isinstance(node, (ast.Name, ast.Attribute)):
                r = ref(node)
                if r and self.types.matches(_last(r)):
                    return True
        return False

    def _report(self, view: FunctionView, found: ValueFinding, use: Use) -> Report:
        check = found.check
        text = view.text(check.node)
        if check.kind == "match":
            text = f"match {text}"
        dispatch = check.kind in ("type", "match") and not check.validates
        data: dict[str, Any] = {"kind": "dispatch" if dispatch else "validation"}
        if isinstance(found.origin, Produced):
            loop = found.origin.loop
            header = _header(view, loop)
            verb = "decides on" if dispatch else ("validates" if check.kind in ("type", "match", "helper") else "checks")
            subject = found.via if found.via and found.via != found.name else found.name
            header = f"inside `{header}`" if isinstance(loop, ast.Call) else f"`{header}`"
            where = f"the loop {header}"
            message = (
                f"`{text}` {verb} only the last `{subject}` produced by {where}; "
                f"every other entry goes {'unseen' if dispatch else 'unchecked'}"
            )
            collection = loop_collection(loop, found.name)
            data["loop_line"] = loop.lineno
        else:
            entry = found.origin
            message = (
                f"`{text}` {'decides on' if dispatch else 'checks'} only the {entry.which} entry of "
                f"`{entry.collection}`; the other entries go {'unseen' if dispatch else 'unchecked'}"
            )
            collection = entry.collection
            header = None
        if use.node is not None:
            where = one_line(view.text(use.node), 60)
            when = "used" if use.reason == "used" else "handed on"
            message += f" ({when} at line {use.node.lineno}: `{where}`)"
            data["used_line"] = use.node.lineno
        data["entries"] = use.reason
        return Report(check.node, message, _hint(dispatch, collection, header, check, view), data)

    def fix(self, report: Report, view: FunctionView) -> Fix | None:
        from ._fixes import ic001

        return ic001.build(self, report, view)


# the receiver of a metadata build (`group.get_metadata_builder().build_for_drafting(...)`,
# `self.attn_metadata_builder.build(...)`, `builder.build(...)`)
BUILDER = Names(["*builder*"], case_sensitive=False)
BUILD = Names(["build", "build_*"], case_sensitive=True)  # what it is asked to build
BUILD_CALL = Around(BUILD, before=r"\.\s*$", before_words=(".",), describe="a `.build*(` call")


def built_by_a_builder(loop: ast.AST, name: str) -> bool:
    """Whether a `for`/`while` loop binds `name` to what a metadata builder builds: a
    `build(...)`/`build_*(...)` method of a receiver named like a builder. Metadata whatever its name
    (`meta = group.get_metadata_builder().build_for_drafting(...)`)."""
    if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
        return False
    for sub in walk_local(loop):
        if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and _builds(sub.value):
                return True
    return False


def _builds(value: ast.AST | None) -> bool:
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and BUILD.matches(value.func.attr)):
        return False
    for node in ast.walk(value.func.value):
        spelled = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if BUILDER.matches(spelled):
            return True
    return False


def _matchers(options: dict[str, Any]) -> tuple[Names, Names]:
    return (
        Names(options["metadata-names"], case_sensitive=False),
        Names(options["metadata-types"], case_sensitive=True),
    )


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _header(view: FunctionView, loop: ast.AST) -> str:
    if isinstance(loop, ast.While):
        return one_line(f"while {view.text(loop.test)}", 80)
    if isinstance(loop, ast.Call):  # a loop of the function called
        return one_line(f"{view.text(loop.func)}(...)", 80)
    if isinstance(loop, COMPREHENSIONS):  # a walrus in a comprehension: its first `for`
        gen = loop.generators[0]
        return one_line(f"for {view.text(gen.target)} in {view.text(gen.iter)}", 80)
    prefix = "async for" if isinstance(loop, ast.AsyncFor) else "for"
    return one_line(f"{prefix} {view.text(loop.target)} in {view.text(loop.iter)}", 80)


def _hint(dispatch: bool, collection: str | None, header: str | None, check, view) -> str:
    values = f"{collection}.values()" if collection else "the per-group values"
    if check.kind == "match":  # the classes of the case patterns
        names = list(dict.fromkeys(view.text(c) for c in check.types.elts))
        types = names[0] if len(names) == 1 else f"({', '.join(names)})"
    else:
        types = view.text(check.types) if check.types is not None else "T"
    if check.kind == "match":
        where = f" inside the loop {header}" if header else f" of `{values}`"
        return (
            f"This `match` sees one group's metadata: match each entry{where}, or check every "
            f"entry first: `if not all(isinstance(md, {types}) for md in {values}): raise ...`."
        )
    if dispatch:
        where = f" (or decide inside the loop {header})" if header else ""
        return (
            f"This picks one code path from one group's type: decide per group{where}, or say "
            f"which group decides, e.g. `any(isinstance(md, {types}) for md in {values})`."
        )
    where = f", or move the check into the loop {header}" if header else ""
    return (
        f"Check every entry: `if not all(isinstance(md, {types}) for md in {values}): raise ...`"
        f"{where}."
    )


__all__ = ["LastEntryValidation"]
