from __future__ import annotations

import ast
from typing import Any, Iterator

from invariant_check.analysis.group_loops import STATE, group_loops, last_group_uses, names_any, shared_advances
from invariant_check.analysis.fields import Moved
from invariant_check.analysis.needs import FOR_STATEMENT, WHILE_STATEMENT, All, Names, Need, Words
from invariant_check.analysis.needs import Any as AnyOf
from invariant_check.analysis.source import one_line
from invariant_check.analysis.views import FunctionView
from invariant_check.api.rule import Report, Rule
from invariant_check.api.types import Invalid, Option, Valid

_INPUTS = """
def advance_inputs(input_buffers, num_reqs):
    input_buffers.positions[:num_reqs] += 1
    input_buffers.seq_lens[:num_reqs] += 1


def advance_metadata(md):
    md.seq_lens += 1
    md.max_seq_len += 1
"""



# A wrapper handed the whole buffers object, launching a kernel that advances two of its fields.
_BUFFERS_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def _advance_kernel(positions_ptr, seq_lens_ptr, max_len):
    i = tl.program_id(0)
    tl.store(positions_ptr + i, tl.minimum(tl.load(positions_ptr + i) + 1, max_len - 1))
    tl.store(seq_lens_ptr + i, tl.load(seq_lens_ptr + i) + 1)


def advance_draft_step(num_reqs, input_buffers, max_len):
    _advance_kernel[(num_reqs,)](input_buffers.positions, input_buffers.seq_lens, max_len)
"""

class AdvanceOncePerStep(Rule):
    """
    ## What it does
    Flags two ways a draft step goes wrong in its loop over attention groups (or layers):

    - an advance of the positions or sequence lengths of an object every group shares (the
      input buffers, the common attention metadata, a position tensor bound before the loop)
      made in each iteration of the loop over groups: directly (`positions += 1`,
      `md.seq_lens.add_(1)`, `cad.seq_lens.copy_(cad.seq_lens + 1)`) or by a helper or kernel
      that advances what it is given (`self._advance_inputs(num_reqs)`, a function of another
      module, a method of a base class);
    - a value bound per group in such a loop (`attn_metadata = group.build(...)`) handed, after
      the loop, to every layer: `{name: attn_metadata for name in layer_names}`,
      `dict.fromkeys(layer_names, attn_metadata)`, a loop storing it under every layer name,
      `set_forward_context(attn_metadata, ...)` or another forward, a helper that passes it to
      one.

    ## Why is this bad?
    A draft step moves the inputs by one position. Advanced once per group, the shared
    buffers move by the number of groups: with two groups the second group's metadata is
    built one position ahead of the first, and after two steps the position buffer has moved
    by 4 instead of 2; every later step writes the KV cache at the wrong slots and attends over
    the wrong lengths. And after the loop only the last group's metadata is left in the name:
    handed to every layer, the layers of the other groups attend with a metadata of another
    backend, another block table, another KV-cache layout (a silent wrong answer, or an
    invalid memory access).

    ## Example
    ```python
    for step in range(1, self.num_speculative_steps):
        for group in self.draft_attn_groups:
            self._advance_inputs(num_reqs)  # moves self.input_buffers.positions by 1
            attn_metadata = group.builder.build_for_drafting(common_attn_metadata, step)
        per_layer_attn_metadata = {name: attn_metadata for name in self.attn_layer_names}
        hidden = self.run_model(num_tokens, per_layer_attn_metadata)
    ```

    ## Use instead
    Advance once per step, outside the group loop, and give each group's layers the
    metadata of their own group:
    ```python
    for step in range(1, self.num_speculative_steps):
        self._advance_inputs(num_reqs)
        per_layer_attn_metadata = {}
        for group in self.draft_attn_groups:
            attn_metadata = group.builder.build_for_drafting(common_attn_metadata, step)
            for name in group.layer_names:
                per_layer_attn_metadata[name] = attn_metadata
        hidden = self.run_model(num_tokens, per_layer_attn_metadata)
    ```

    ## What it proves
    A *group loop* is a `for` whose iterable (or a `while` whose test) names an identifier
    matching `group-iterables`: `self.draft_attn_groups`, `enumerate(builders)`,
    `zip(groups, builders)`, `range(len(self.attn_groups))`, `layer_names`. A loop that
    `break`s (a search) is none, nor one whose iterations run the model (a `forward-calls`
    name, or a call of the loop's own variable: `for module in self.mtp_layers: hidden =
    module(...)` is a loop over steps).

    *Advances.* An event of one iteration of the innermost group loop around it that moves a
    field or local named in `advanced-fields` forward: `+= k`, `= x + k` (also capped:
    `min(x + 1, limit)`, `torch.clamp(x[:n] + 1, max=m)`), `add_`, `copy_(x + k)`, `torch.add(x, k, out=x)`; a call of an
    `input-advancing-calls` function (a kernel), or of a project function that makes one of
    these, itself or in the helpers it calls (`helper-depth` deep, through `self`, imports,
    base classes), or of a function of any module that advances a tensor it is handed as one
    of those fields (by any of these spellings, `out=` included), itself or through a helper
    it hands the field on to
    (`bump(self.input_buffers.positions, n)`, also through a local `functools.partial` of
    the helper, a wrapper launching a
    `@triton.jit` kernel that `tl.store`s its own load plus one through that pointer, as
    IC004 reads kernels; also a wrapper handed the whole buffers object that launches such a
    kernel with its fields: `advance(n, self.input_buffers)`). It is reported when what moves *outlives the iteration*: `self` or
    something reached from it, a parameter, a local bound before the loop or bound to one
    (`md = common_attn_metadata`, also in the iteration: `positions =
    self.input_buffers.positions`, or a view of it), module state a helper advances without
    being given it.
    What a helper advances is the argument it gives the parameter whose fields (or which
    itself, for a parameter named like a field) it advances; for a kernel read by name, the
    arguments passed under an advanced name (`seq_lens=md.seq_lens`).

    Not reported: an object bound anew in the iteration (the loop's variable, `md =
    copy.copy(common)`, `md = replace(common, ...)`, `md = group.builder.build(...)`): each
    group's own object advanced once is what the step asks; a helper that advances only an
    object it makes itself; a slice indexed by the iteration (`self.seq_lens[i] += 1` in `for
    i, group in enumerate(groups)`, or by a counter the loop moves, `gid += 1`); an advance under a condition that picks iterations: one
    that reads only names (`if i == 0:`, `if not advanced:`), one that reads what the
    iteration holds (`if group.builder.supports_shared_advance:`), or a conjunction with one
    of those (`if i == 0 and self.advance_positions:`), a `match` case on such a value
    (`match group.backend_name: case "FLASHMLA":`); the rule does not count them; a new
    object built from the old one (`replace(md, seq_lens=md.seq_lens + 1)`).
    An advance through a helper, a kernel or a local is looked for only in a function that
    names attention metadata (`metadata-names`) or an `input-advancing-calls` function (what
    a draft step's group loop does; the prefilter reads the same names); a field moved in
    place (`x.seq_lens += 1`) is looked for in every group loop.
    There need not be a loop over the steps around the group loop: one call of the function
    advances by the number of groups however often it is called.

    *Last group's value.* A name matching `metadata-names` bound in the group loop from what
    the iteration binds (its variable, a counter of a `while`), not from itself (`md =
    merge(md, ...)` gathers every group), then, on the statements that run after the loop
    (the rest of the block and of every enclosing one; the next turn of an enclosing loop is
    not followed) before the name is bound again: a mapping comprehension whose values are
    the name over keys that do not come from the loop (`{n: md for n in names}`; keys of the
    last group, `group.layer_names`, pair it with its own layers), `dict.fromkeys(keys,
    md)`, a `for` over other keys storing it under each (`d[name] = md`), the name itself
    passed to a `forward-calls` call, or to a project function that passes it on to one.

    Not reported: the loop stores the value for its own group's layers and nothing after it
    hands the name on (vLLM's own loops); the name used inside the loop only; the collection
    known to hold one entry (`assert len(groups) == 1`, `if len(groups) != 1: raise`, `(g,)
    = groups`, a loop under `if len(groups) == 1:`, a one-element literal, an attribute of
    `self` every write keeps at one entry: see IC001).

    ## What it leaves to the runtime guard
    Conditions that pick iterations (a first-group flag, a `supports_...` property that holds
    for one group only), helpers and kernels whose source cannot be read and whose arguments
    are not named like the fields, a value that reaches every layer through a container or a
    helper's return value, and a single group guaranteed elsewhere (the model runner, the
    configuration): the `metadata-coherence` runtime guard checks, at each draft step's
    metadata build, the common metadata against the positions (`max_seq_len`,
    `seq_lens_cpu_upper_bound`, the slot mapping), and the `group-metadata` guard each
    group's metadata type.

    ## Fix
    None. Where the advance belongs depends on the loop's intent (once before the group loop,
    or on each group's own copy), and which group's metadata a layer needs depends on the
    layer: both are the author's call. The hint names the shared object and the loop.

    ## Options
    - `group-iterables` (globs, any case): identifiers whose presence in a loop's iterable
      (or a `while` test) makes it a loop over groups or layers. Default `*group*`,
      `*builder*`, `*layer_name*` (not `*layer*`: `for layer in self.layers` of every model
      file is a loop over a model's layers, and it tripled the files a lint reads).
    - `advanced-fields`: fields (and locals) whose increment advances the inputs. Default
      `seq_lens`, `positions` (as IC005).
    - `input-advancing-calls`: last names of calls (kernels, helpers) that advance the draft
      inputs. Default as IC005.
    - `metadata-names` (globs, any case): names that hold attention metadata. Default as
      IC005.
    - `forward-calls`: last names of calls that run the draft model with the metadata they
      receive. Default as IC005.
    - `helper-depth` (default 4): how many calls deep helpers are followed.
    """

    CODE = "IC006"
    NAME = "advance-once-per-step"
    SUMMARY = (
        "A loop over attention groups advances the shared draft inputs once per group, or hands "
        "the last group's metadata to every layer."
    )
    HINT = (
        "Advance the positions and sequence lengths once per draft step, outside the loop over "
        "groups, and give each group's layers their own group's metadata "
        "(`for name in group.layer_names: per_layer[name] = md` inside the loop)."
    )
    OPTIONS = {
        "group-iterables": Option(
            ["*group*", "*builder*", "*layer_name*"],
            "globs for identifiers that make a loop's iterable a collection of attention groups or layers",
        ),
        "advanced-fields": Option(["seq_lens", "positions"], "fields and locals whose increment advances the inputs"),
        "input-advancing-calls": Option(
            ["update_eagle_inputs", "update_draft_inputs", "compute_slot_mappings",
             "eagle_step_update_slot_mapping_and_metadata"],
            "last names of calls that advance the draft inputs",
        ),
        "metadata-names": Option(
            ["*attn_metadata*", "*attention_metadata*", "*attn_md*", "*_md", "md"],
            "globs for names that hold attention metadata",
        ),
        "forward-calls": Option(
            ["model", "forward", "draft_model", "run_model", "_run_model", "set_forward_context"],
            "last names of calls that run the draft model with the metadata they receive",
        ),
        "helper-depth": Option(4, "how many helper calls deep advances and forwards are looked for", int),
    }

    VALID = [
        # The same wrapper, once per step, before the groups build from the buffers.
        Valid(
            """
from .ops import advance_draft_step


class Speculator:
    def build_step(self, num_reqs, common_attn_metadata):
        advance_draft_step(num_reqs, self.input_buffers, self.max_model_len)
        out = {}
        for gid, group in enumerate(self.kv_cache_config.kv_cache_groups):
            out[gid] = self.builders[gid].build_for_drafting(common_attn_metadata, 1)
        return out
""",
            files={"ops.py": _BUFFERS_KERNEL},
        ),
        # The same `copy_` helper, once per step before the builders read the lengths.
        Valid(
            """
class HybridProposer:
    def _advance_common(self, common_attn_metadata):
        common_attn_metadata.seq_lens.copy_(common_attn_metadata.seq_lens + 1)

    def build_step(self, common_attn_metadata, step):
        self._advance_common(common_attn_metadata)
        return {
            gid: builder.build_for_drafting(common_attn_metadata, step)
            for gid, builder in zip(self.kv_cache_group_ids, self.attn_metadata_builders)
        }
"""
        ),
        # The inputs advance once per step, outside the group loop; each group's layers get
        # their own group's metadata.
        Valid(
            """
from .inputs import advance_inputs

def propose(self, common_attn_metadata, num_reqs, num_tokens):
    for step in range(1, self.num_speculative_steps):
        advance_inputs(self.input_buffers, num_reqs)
        per_layer_attn_metadata = {}
        for group in self.draft_attn_groups:
            attn_metadata = group.builder.build_for_drafting(common_attn_metadata, step)
            for name in group.layer_names:
                per_layer_attn_metadata[name] = attn_metadata
        self.run_model(num_tokens, per_layer_attn_metadata)
""",
            files={"inputs.py": _INPUTS},
        ),
        # Each group advances its own copy of the common metadata, once.
        Valid(
            """
import copy

def build_groups(self, common_attn_metadata):
    per_layer_attn_metadata = {}
    for group in self.draft_attn_groups:
        md = copy.copy(common_attn_metadata)
        md.seq_lens += 1
        md.positions.add_(1)
        for name in group.layer_names:
            per_layer_attn_metadata[name] = group.builder.build(md)
    return per_layer_attn_metadata
""",
        ),
        # A helper in another module advances each group's own metadata, fresh per group.
        Valid(
            """
from .inputs import advance_metadata

def build_groups(self, common_attn_metadata):
    for builder in self.builders:
        group_md = builder.make_metadata(common_attn_metadata)
        advance_metadata(group_md)
        builder.register(group_md)
""",
            files={"inputs.py": _INPUTS},
        ),
        # A helper that advances only a copy it makes itself.
        Valid(
            """
import copy

class Proposer:
    def _shifted(self, common):
        md = copy.copy(common)
        md.seq_lens += 1
        return md

    def build_groups(self, common_attn_metadata):
        for group in self.attn_groups:
            group.builder.build(self._shifted(common_attn_metadata))
""",
        ),
        # Advanced on the first group only.
        Valid(
            """
def step(self, common_attn_metadata):
    for i, group in enumerate(self.draft_attn_groups):
        if i == 0:
            common_attn_metadata.seq_lens += 1
        group.builder.build(common_attn_metadata)
""",
        ),
        # Each iteration moves its own slice of the buffer.
        Valid(
            """
def advance(self, num_reqs):
    for i, group in enumerate(self.kv_cache_groups):
        self.input_buffers.seq_lens[i] += 1
""",
        ),
        # A loop over the MTP layers is the loop over steps: one module, one advance, per step.
        Valid(
            """
def propose(self, input_ids, positions, hidden, attn_metadata):
    for module in self.mtp_layers:
        hidden = module(input_ids, positions, hidden, attn_metadata)
        positions += 1
""",
        ),
        # A new object per group, built from the common one (each group's copy moves once).
        Valid(
            """
from dataclasses import replace

def build_groups(self, cad):
    mds = []
    for group in self.draft_attn_groups:
        mds.append(group.builder.build(replace(cad, seq_lens=cad.seq_lens + 1)))
    return mds
""",
        ),
        # One group, asserted: its metadata is every layer's.
        Valid(
            """
def propose(self, common_attn_metadata, num_tokens):
    assert len(self.draft_attn_groups) == 1
    for group in self.draft_attn_groups:
        attn_metadata = group.builder.build(common_attn_metadata)
    per_layer_attn_metadata = {name: attn_metadata for name in self.attn_layer_names}
    self.run_model(num_tokens, per_layer_attn_metadata)
""",
        ),
        # The value is used inside the loop only; after it, the per-layer dict is passed.
        Valid(
            """
from vllm.forward_context import set_forward_context

def propose(self, common_attn_metadata, num_tokens):
    per_layer_attn_metadata = {}
    for group in self.draft_attn_groups:
        attn_metadata = group.builder.build(common_attn_metadata)
        per_layer_attn_metadata.update({name: attn_metadata for name in group.layer_names})
    with set_forward_context(per_layer_attn_metadata, self.vllm_config, num_tokens=num_tokens):
        return self.model(self.input_ids[:num_tokens])
""",
        ),
        # Paired with the last group's own layers after the loop (the others are filled in it).
        Valid(
            """
def propose(self, common_attn_metadata):
    per_layer = {}
    for group in self.attn_groups:
        md = group.builder.build(common_attn_metadata)
        per_layer.update({n: md for n in group.layer_names})
    per_layer.update({n: md for n in group.layer_names})
    return per_layer
""",
        ),
        # Gathered over every group, not one group's value.
        Valid(
            """
def propose(self, common_attn_metadata):
    attn_metadata = None
    for group in self.attn_groups:
        attn_metadata = group.merge(attn_metadata, common_attn_metadata)
    return self.run_model(attn_metadata)
""",
        ),
        # A search: the loop stops at the group it wants.
        Valid(
            """
def propose(self, common_attn_metadata):
    for group in self.attn_groups:
        attn_metadata = group.builder.build(common_attn_metadata)
        if group.is_draft:
            break
    return self.run_model(attn_metadata)
""",
        ),
        # Rebound before the hand-out.
        Valid(
            """
def propose(self, common_attn_metadata):
    for group in self.attn_groups:
        attn_metadata = group.builder.build(common_attn_metadata)
        group.check(attn_metadata)
    attn_metadata = self.build_all(common_attn_metadata)
    return self.run_model(attn_metadata)
""",
        ),
        # A flag lets the first group advance the shared inputs, once.
        Valid(
            """
def step(self, common_attn_metadata):
    advanced = False
    for group in self.draft_attn_groups:
        if not advanced:
            common_attn_metadata.seq_lens += 1
            advanced = True
        group.builder.build(common_attn_metadata)
""",
        ),
        # A helper that advances the metadata it is given, called once per step outside the
        # group loop (the loop only stores each group's build per layer).
        Valid(
            """
from .inputs import advance_metadata

def propose(self, common_attn_metadata):
    for step in range(1, self.num_steps):
        advance_metadata(common_attn_metadata)
        for group in self.draft_attn_groups:
            md = group.builder.build_for_drafting(common_attn_metadata, step)
            for name in group.layer_names:
                self.per_layer[name] = md
""",
            files={"inputs.py": _INPUTS},
        ),
        # Each group's own positions, picked by the iteration.
        Valid(
            """
class Proposer:
    def prepare(self, common_attn_metadata, num_reqs):
        for i, group in enumerate(self.draft_attn_groups):
            positions = self.group_positions[i]
            positions[:num_reqs] += 1
            group.builder.build(common_attn_metadata, positions)
"""
        ),
        # Only a group whose builder says so advances the shared inputs.
        Valid(
            """
class Proposer:
    def prepare(self, common_attn_metadata, num_reqs):
        for group in self.draft_attn_groups:
            if group.builder.supports_shared_input_advance:
                self.input_buffers.positions[:num_reqs] += 1
            group.builder.build(common_attn_metadata)
"""
        ),
        # The first group only, under a setting too.
        Valid(
            """
class Proposer:
    def prepare(self, common_attn_metadata, num_reqs):
        for i, group in enumerate(self.draft_attn_groups):
            if i == 0 and self.advance_draft_positions:
                common_attn_metadata.seq_lens += 1
            group.builder.build(common_attn_metadata)
"""
        ),
        # A `while` loop's counter picks each group's own row of the shared positions.
        Valid(
            """
def prepare(self, common_attn_metadata, positions):
    gid = 0
    while gid < len(self.draft_attn_groups):
        positions[gid] += 1
        self.draft_attn_groups[gid].builder.build(common_attn_metadata, positions)
        gid += 1
"""
        ),
        # A `match` on what the iteration holds picks iterations, as an `if` on it does.
        Valid(
            """
def prepare(self, common_attn_metadata, num_reqs):
    for group in self.draft_attn_groups:
        match group.backend_name:
            case "FLASHMLA":
                self.input_buffers.positions[:num_reqs] += 1
            case _:
                pass
        group.builder.build(common_attn_metadata)
"""
        ),
    ]

    INVALID = [
        # A helper of the same class, called once per group in each step, advances
        # `self.input_buffers`.
        Invalid(
            """
class Speculator:
    def _advance_inputs(self, num_reqs):
        self.input_buffers.positions[:num_reqs] += 1
        self.input_buffers.seq_lens[:num_reqs] += 1

    def propose(self, common_attn_metadata, num_reqs):
        for step in range(1, self.num_speculative_steps):
            for group in self.draft_attn_groups:
                self._advance_inputs(num_reqs)
                group.builder.build(common_attn_metadata)
""",
            line=9,
            message_contains="`self.input_buffers.positions`",
        ),
        # The helper of another module is given the shared buffers.
        Invalid(
            """
from .inputs import advance_inputs

def propose(self, common_attn_metadata, num_reqs):
    for step in range(1, self.num_speculative_steps):
        for builder in self.builders:
            advance_inputs(self.input_buffers, num_reqs)
            builder.build(common_attn_metadata)
""",
            line=6,
            files={"inputs.py": _INPUTS},
        ),
        # The common metadata advanced in place, once per group.
        Invalid(
            """
def step(self, common_attn_metadata):
    for group in self.draft_attn_groups:
        common_attn_metadata.seq_lens += 1
        group.builder.build(common_attn_metadata)
""",
            line=3,
            message_contains="`common_attn_metadata.seq_lens`",
        ),
        # Through a local alias of the common metadata, with `add_`, in `enumerate(zip(...))`.
        Invalid(
            """
def step(self, common_attn_metadata, builders):
    for i, (group, builder) in enumerate(zip(self.attn_groups, builders)):
        md = common_attn_metadata
        md.seq_lens.add_(1)
        builder.build(md)
""",
            line=4,
        ),
        # A position tensor bound before the loop, with `copy_`, in a loop over layer names.
        Invalid(
            """
def step(self, layer_names, positions):
    for layer_name in layer_names:
        self.buffers.positions.copy_(self.buffers.positions + 1)
        self.build_for(layer_name, positions)
""",
            line=3,
        ),
        # A `while` over the groups; the base class's method advances the input buffers.
        Invalid(
            """
from .base import BaseProposer

class Proposer(BaseProposer):
    def propose(self, common_attn_metadata, num_reqs):
        i = 0
        while i < len(self.draft_attn_groups):
            self.advance_draft_inputs(num_reqs)
            self.draft_attn_groups[i].builder.build(common_attn_metadata)
            i += 1
""",
            line=7,
            files={"base.py": """
class BaseProposer:
    def advance_draft_inputs(self, num_reqs):
        self.positions[:num_reqs] += 1
"""},
        ),
        # A kernel read by name, given the shared sequence lengths.
        Invalid(
            """
from vllm.v1.spec_decode.utils import eagle_step_update_slot_mapping_and_metadata

def step(self, cad, num_reqs):
    for group in self.draft_attn_groups:
        eagle_step_update_slot_mapping_and_metadata(positions=self.positions, seq_lens=cad.seq_lens, num_reqs=num_reqs)
        group.builder.build(cad)
""",
            line=5,
        ),
        # The last group's metadata handed to every layer in a comprehension.
        Invalid(
            """
def propose(self, common_attn_metadata, num_tokens):
    for group in self.draft_attn_groups:
        attn_metadata = group.builder.build(common_attn_metadata)
    per_layer_attn_metadata = {name: attn_metadata for name in self.attn_layer_names}
    return self.run_model(num_tokens, per_layer_attn_metadata)
""",
            line=4,
            message_contains="`attn_metadata`",
        ),
        # ... to the forward context, inside the step loop.
        Invalid(
            """
from vllm.forward_context import set_forward_context

def propose(self, common_attn_metadata, num_tokens):
    for step in range(self.num_speculative_steps):
        for builder in self.builders:
            attn_metadata = builder.build_for_drafting(common_attn_metadata, step)
        with set_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens):
            self.model(self.input_ids[:num_tokens])
""",
            line=7,
        ),
        # ... stored under every layer name by a second loop.
        Invalid(
            """
def propose(self, common_attn_metadata):
    per_layer = {}
    for idx, group in enumerate(self.kv_cache_groups):
        group_md = group.builder.build(common_attn_metadata)
    for layer_name in self.all_layer_names:
        per_layer[layer_name] = group_md
    return per_layer
""",
            line=6,
        ),
        # ... with `dict.fromkeys`, over the layers of every group.
        Invalid(
            """
def propose(self, common_attn_metadata):
    for g in self.attn_groups:
        attn_md = g.get_metadata_builder().build(0, common_attn_metadata)
    names = [n for grp in self.attn_groups for n in grp.layer_names]
    return dict.fromkeys(names, attn_md)
""",
            line=5,
        ),
        # ... to a helper that passes it to the forward context.
        Invalid(
            """
from vllm.forward_context import set_forward_context

class Proposer:
    def _run(self, attn_metadata, num_tokens):
        with set_forward_context(attn_metadata, self.vllm_config, num_tokens=num_tokens):
            return self.model(self.input_ids[:num_tokens])

    def propose(self, common_attn_metadata, num_tokens):
        for group in self.draft_attn_groups:
            attn_metadata = group.builder.build(common_attn_metadata)
            self.validate(attn_metadata)
        return self._run(attn_metadata, num_tokens)
""",
            line=12,
        ),
        # A position local moved forward in a loop over the builders.
        Invalid(
            """
def step(self, builders, positions, common_attn_metadata):
    for builder in builders:
        positions = positions + 1
        builder.build(common_attn_metadata, positions)
""",
            line=3,
            message_contains="`positions`",
        ),
        # The per-layer dict comprehension walks every group's layers, with the last value.
        Invalid(
            """
def propose(self, cad):
    for group in self.attn_groups:
        md = group.builder.build(cad)
    return {n: md for g in self.attn_groups for n in g.layer_names}
""",
            line=4,
        ),
        # The helper of another module advances the rows of the shared buffers in place, once
        # per builder.
        Invalid(
            """
from .inputs import step_rows

def steps(self, common, num_reqs):
    for step in range(1, self.num_steps):
        md = {}
        for gid, builder in enumerate(self.builders):
            step_rows(self.input_batch, num_reqs)
            md[gid] = builder.build_for_drafting(common, step)
        self.run_model(md)
""",
            line=7,
            files={"inputs.py": """
def step_rows(batch, n):
    batch.positions[:n].add_(1)
    batch.seq_lens[:n].add_(1)
"""},
        ),
        # A wrapper of another module launches a Triton kernel that stores each position plus
        # one back through the pointer it is given; it is called once per group.
        Invalid(
            """
from .kernels import bump_positions

def propose(self, common_attn_metadata, num_reqs):
    for step in range(1, self.num_steps):
        for group in self.draft_attn_groups:
            bump_positions(self.input_buffers.positions, num_reqs)
            self.per_layer[group.name] = group.builder.build_for_drafting(common_attn_metadata, step)
""",
            line=6,
            files={"kernels.py": """
import triton
import triton.language as tl


@triton.jit
def _bump_kernel(pos_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(pos_ptr + offs, tl.load(pos_ptr + offs, mask=mask) + 1, mask=mask)


def bump_positions(pos, n):
    _bump_kernel[(1,)](pos, n, BLOCK=1024)
"""},
        ),
        # Per KV-cache group, a helper of another module hands the shared positions to one
        # that advances the tensor it is given.
        Invalid(
            """
from .prep import prepare_group_inputs

def propose(self, common_attn_metadata, num_reqs):
    for gid, kv_cache_group in enumerate(self.kv_cache_config.kv_cache_groups):
        slots = prepare_group_inputs(self.input_buffers, num_reqs, kv_cache_group)
        self.attn_metadata[gid] = self.builders[gid].build(common_attn_metadata, slots)
""",
            line=5,
            files={"prep.py": """
def _shift(pos, n: int):
    pos[:n] += 1


def prepare_group_inputs(input_buffers, num_reqs, kv_cache_group):
    _shift(input_buffers.positions, num_reqs)
    return kv_cache_group.slots(input_buffers.positions[:num_reqs])
"""},
        ),
        # A local bound to the shared positions, moved by `copy_` once per group.
        Invalid(
            """
def propose(self, common_attn_metadata):
    positions = self.input_buffers.positions
    for gid in range(len(self.kv_cache_groups)):
        positions.copy_(positions + 1)
        self.attn_metadata[gid] = self.builders[gid].build(common_attn_metadata)
""",
            line=4,
        ),
        # The helper advances the positions it is handed with `torch.add(..., out=...)`, once
        # per layer.
        Invalid(
            """
import torch


def advance_positions(positions, num_reqs):
    torch.add(positions, 1, out=positions)


def build(self, common_attn_metadata, num_reqs):
    attn_metadata = {}
    for layer_name in self.attn_layer_names:
        advance_positions(self.positions, num_reqs)
        attn_metadata[layer_name] = self.builder.build(common_attn_metadata)
    return attn_metadata
""",
            line=11,
        ),
        # A base class's helper moves rows of the shared positions (`x[:n] = x[:n] + 1`), called
        # once per KV-cache group.
        Invalid(
            """
class DraftBase:
    def _advance_step_inputs(self, n):
        self.input_buffers.positions[:n] = self.input_buffers.positions[:n] + 1


class Proposer(DraftBase):
    def propose(self, common_attn_metadata, num_reqs):
        for gid, group in enumerate(self.kv_cache_groups):
            self._advance_step_inputs(num_reqs)
            self.attn_metadata[gid] = group.builder.build(common_attn_metadata)
""",
            line=9,
        ),
        # A kernel read by name, given the step's tokens and the proposer's input buffers: the
        # buffers kept on the proposer are what moves.
        Invalid(
            """
from .kernels import update_eagle_inputs


class Proposer:
    def propose(self, common_attn_metadata, draft_tokens, hidden):
        per_layer = {}
        for layer_name in self.attn_layer_names:
            update_eagle_inputs(draft_tokens, hidden, self.input_buffers)
            per_layer[layer_name] = self.builder.build_for_drafting(common_attn_metadata, 1)
        return per_layer
""",
            line=8,
            message_contains="advances `self.input_buffers`",
        ),
        # A name the iteration binds to the proposer's buffer, advanced through it.
        Invalid(
            """
class Proposer:
    def prepare(self, common_attn_metadata, num_reqs):
        for group in self.draft_attn_groups:
            positions = self.input_buffers.positions
            positions[:num_reqs] += 1
            group.builder.build(common_attn_metadata, positions)
""",
            line=5,
            message_contains="advances `self.input_buffers.positions`",
        ),
        # The same through a view the iteration takes.
        Invalid(
            """
class Proposer:
    def prepare(self, common_attn_metadata, num_reqs):
        for group in self.draft_attn_groups:
            positions = self.input_buffers.positions[:num_reqs]
            positions += 1
            group.builder.build(common_attn_metadata, positions)
""",
            line=5,
        ),
        # The shared metadata bound by a tuple assignment in the iteration.
        Invalid(
            """
class Proposer:
    def prepare(self, common_attn_metadata, num_reqs):
        for group in self.draft_attn_groups:
            cad, n = common_attn_metadata, num_reqs
            cad.seq_lens[:n] += 1
            group.builder.build(cad)
""",
            line=5,
        ),
        # The advancing helper called through a `functools.partial`, once per group.
        Invalid(
            """
import functools


def advance_inputs(input_buffers, n):
    input_buffers.positions[:n] += 1


class Proposer:
    def prepare(self, common_attn_metadata, num_reqs):
        bump = functools.partial(advance_inputs, self.input_buffers)
        for group in self.draft_attn_groups:
            bump(num_reqs)
            group.builder.build(common_attn_metadata)
""",
            line=12,
            message_contains="advances `self.input_buffers.positions`",
        ),
        # A slice of a positions parameter, advanced in place once per group.
        Invalid(
            """
def prepare(self, common_attn_metadata, positions, num_reqs):
    for group in self.draft_attn_groups:
        positions[:num_reqs].add_(1)
        group.builder.build(common_attn_metadata, positions)
""",
            line=3,
            message_contains="`positions`",
        ),
        # A `match` on the proposer's own setting runs the same case for every group.
        Invalid(
            """
def prepare(self, common_attn_metadata, num_reqs):
    for group in self.draft_attn_groups:
        match self.method:
            case "mtp":
                self.input_buffers.positions[:num_reqs] += 1
        group.builder.build(common_attn_metadata)
""",
            line=5,
            message_contains="`self.input_buffers.positions`",
        ),
        # A loop's `else:` runs after it: there, the name holds the last group's value.
        Invalid(
            """
def build_per_layer(self, common_attn_metadata):
    per_layer = {}
    for group in self.draft_attn_groups:
        group_md = group.builder.build(common_attn_metadata)
    else:
        for layer_name in self.all_layer_names:
            per_layer[layer_name] = group_md
    return per_layer
""",
            line=7,
            message_contains="last group's metadata only",
        ),
        # Rows of the shared positions moved under a cap, once per group.
        Invalid(
            """
import torch

def build_group_metadata(self, common_attn_metadata, num_reqs):
    out = []
    for gid, group in enumerate(self.kv_cache_groups):
        self.input_buffers.positions[:num_reqs] = torch.clamp(
            self.input_buffers.positions[:num_reqs] + 1, max=self.max_model_len - 1
        )
        out.append(group.builder.build_for_drafting(common_attn_metadata, gid))
    return out
""",
            line=6,
        ),
        # A helper that advances by `copy_` of the old value plus one, called once per builder.
        Invalid(
            """
class HybridProposer:
    def _advance_common(self, common_attn_metadata):
        common_attn_metadata.seq_lens.copy_(common_attn_metadata.seq_lens + 1)

    def build_step(self, common_attn_metadata, step):
        per_group = {}
        for gid, builder in zip(self.kv_cache_group_ids, self.attn_metadata_builders):
            self._advance_common(common_attn_metadata)
            per_group[gid] = builder.build_for_drafting(common_attn_metadata, step)
        return per_group
""",
            line=8,
        ),
        # The wrapper, handed `self.input_buffers`, called once per KV-cache group.
        Invalid(
            """
from .ops import advance_draft_step


class Speculator:
    def build_step(self, num_reqs, common_attn_metadata):
        out = {}
        for gid, group in enumerate(self.kv_cache_config.kv_cache_groups):
            advance_draft_step(num_reqs, self.input_buffers, self.max_model_len)
            out[gid] = self.builders[gid].build_for_drafting(common_attn_metadata, 1)
        return out
""",
            line=8,
            files={"ops.py": _BUFFERS_KERNEL},
        ),
    ]

    @classmethod
    def needs(cls, options: dict[str, Any]) -> Need:
        # both shapes live in a `for`/`while` statement whose header names a group, in a
        # function that names the metadata or an advancing call, or moves an advanced field
        # itself (`x.seq_lens += 1`: the only advance reported without those names)
        return All(AnyOf(FOR_STATEMENT, WHILE_STATEMENT), _group_names(options), AnyOf(*_step_words(options)))

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.groups = _group_names(options)
        self.metadata = Names(options["metadata-names"], case_sensitive=False)
        self.fields = frozenset(options["advanced-fields"])
        self.advancing = frozenset(options["input-advancing-calls"])
        self.forwards = frozenset(options["forward-calls"])
        self.depth = options["helper-depth"]

    def check_function(self, view: FunctionView) -> Iterator[Report]:
        loops = group_loops(view.node, self.groups)
        if not loops:
            return
        # what the prefilter asks of the text: without a metadata name or an advancing call,
        # only a field moved in place is reported (the helper and the local are not told
        # from any other loop's)
        named = names_any(view.node, self.metadata, self.advancing)
        for adv in shared_advances(view, view.node, loops, fields=self.fields, advancing=self.advancing,
                                   forwards=self.forwards, depth=self.depth):
            if not named and adv.kind != "field":
                continue
            header = _header(view, adv.loop)
            what = "what it reaches itself" if adv.shared == STATE else f"`{adv.shared}`"
            by = f"`{adv.via}(...)`" if adv.via else f"`{one_line(view.text(adv.node), 50)}`"
            message = (
                f"{by} advances {what} once per iteration of `{header}` (line {adv.loop.lineno}): "
                f"shared by every group, it moves by the number of groups in one draft step"
            )
            hint = (
                f"Advance {what} once per draft step, before or after `{header}`; inside it, advance "
                f"only each group's own copy (`md = copy.copy(common)`)."
            )
            yield Report(adv.node, message, hint, {"shared": adv.shared, "loop_line": adv.loop.lineno})
        for use in last_group_uses(view, view.node, loops, metadata=self.metadata, forwards=self.forwards,
                                   depth=self.depth):
            header = _header(view, use.loop)
            where = one_line(view.text(use.use), 60)
            message = (
                f"`{where}` hands `{use.name}` to every layer, but after `{header}` (line {use.loop.lineno}) "
                f"it holds the last group's metadata only: the other groups' layers get it"
            )
            hint = (
                f"Give each group's layers their own metadata inside the loop "
                f"(`for name in group.layer_names: per_layer[name] = {use.name}`) and hand on the per-layer dict."
            )
            yield Report(use.use, message, hint, {"name": use.name, "how": use.how, "loop_line": use.loop.lineno})


def _step_words(options: dict[str, Any]) -> tuple[Need, ...]:
    return (Names(options["metadata-names"], case_sensitive=False), Words(*options["input-advancing-calls"]),
            Moved(options["advanced-fields"]))


def _group_names(options: dict[str, Any]) -> Names:
    return Names(options["group-iterables"], case_sensitive=False)


def _header(view: FunctionView, loop) -> str:
    if isinstance(loop, ast.While):
        return one_line(f"while {view.text(loop.test)}", 80)
    prefix = "async for" if isinstance(loop, ast.AsyncFor) else "for"
    return one_line(f"{prefix} {view.text(loop.target)} in {view.text(loop.iter)}", 80)


__all__ = ["AdvanceOncePerStep"]
