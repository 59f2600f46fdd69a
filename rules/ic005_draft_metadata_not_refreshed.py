from __future__ import annotations

from typing import Any, Iterator

from invariant_check.analysis.fields import Passed
from invariant_check.analysis.needs import (
    FOR_STATEMENT,
    WHILE_STATEMENT,
    All,
    Names,
    Need,
)
from invariant_check.analysis.needs import Any as AnyOf
from invariant_check.analysis.stale_metadata import MetadataQuery, StaleUse, stale_metadata
from invariant_check.analysis.views import FunctionView
from invariant_check.api.rule import Report, Rule
from invariant_check.api.types import Fix, Invalid, Option, Valid


_INPUTS = """
def update_eagle_inputs(draft_tokens, hidden, input_buffers):
    input_buffers.input_ids[: len(draft_tokens)] = draft_tokens
    input_buffers.positions += 1
    input_buffers.seq_lens += 1


def update_draft_inputs(draft_tokens, input_buffers):
    update_eagle_inputs(draft_tokens, None, input_buffers)
"""

# Persistent metadata a classmethod allocates (what a CUDA graph captured), kept on the drafter.
_GRAPH_META = """
from dataclasses import dataclass

import torch


@dataclass
class GraphDraftMetadata:
    seq_lens: torch.Tensor
    slot_mapping: torch.Tensor

    @classmethod
    def allocate(cls, max_reqs):
        return cls(seq_lens=torch.zeros(max_reqs), slot_mapping=torch.zeros(max_reqs))

    def refresh_from(self, seq_lens, slots, n):
        self.seq_lens[:n].copy_(seq_lens[:n])
        self.slot_mapping[:n].copy_(slots[:n])

    def describe(self):
        return f"{self.seq_lens.shape[0]} rows"
"""

_GRAPH_DRAFTER = """
from .graph_meta import GraphDraftMetadata


class GraphDrafter:
    def __init__(self, max_reqs):
        self.graph_md = GraphDraftMetadata.allocate(max_reqs)

    def run_steps(self, n):
        md = self.graph_md
        for _ in range(self.num_steps - 1):
            self.seq_lens[:n] += 1
            self.slots[:n] += 1
            md.{call}
            with set_forward_context(md, self.vllm_config):
                self.model(input_ids=self.input_ids[:n], positions=self.positions[:n])
"""

_BUILD = "def build_attn_metadata(**kw):\n    return dict(kw)\n"


class DraftMetadataNotRefreshed(Rule):
    """
    ## What it does
    Flags a draft loop that advances the draft inputs (positions, sequence lengths, slot
    mappings) and passes the same attention metadata to the draft model's forward on every
    step, without building it again or refreshing it in between.

    ## Why is this bad?
    Attention metadata is built from the positions and sequence lengths of one step, and
    builders may keep position-dependent state (block-table slices, split plans, sparse
    top-k plans). Reused after the inputs moved, the next step attends with the previous
    step's view of the batch: wrong keys, or an invalid memory access. vLLM's model runner v2
    shipped this from its start: `generate_draft` passed one `attn_metadata` to
    `self.run_model(...)` in `for step in range(1, self.num_speculative_steps)` while
    `update_eagle_inputs(...)` and `compute_slot_mappings(...)` advanced the inputs (the
    experimental runner of 0.13.0, then 0.18.0 to 0.20.0); DeepSeek V4 with MTP > 2 crashed.
    Fixed in 0.21.0 (PR #41162) by building the metadata inside the loop.

    ## Example
    ```python
    for step in range(1, self.num_speculative_steps):
        hidden = self.run_model(num_tokens, attn_metadata, slot_mappings)
        draft_tokens = self.sample(hidden)
        update_eagle_inputs(draft_tokens, hidden, self.input_buffers)
        self.block_tables.compute_slot_mappings(idx_mapping, query_start_loc, pos)
    ```

    ## Use instead
    Build the metadata inside the loop, after the inputs advance:
    ```python
    for step in range(1, self.num_speculative_steps):
        attn_metadata = self._build_draft_attn_metadata(num_reqs, num_tokens)
        hidden = self.run_model(num_tokens, attn_metadata, slot_mappings)
        ...
    ```
    or refresh it in place where the backend allows it:
    ```python
        for group in attn_groups:
            if group.supports_draft_decode_metadata_update:
                group.update_draft_decode_metadata(attn_metadata)
    ```

    ## What it proves
    For every *advance* in a loop, every path from it to a *forward that receives the
    metadata* (following the loop's back edge) passes a *refresh* of that metadata.

    - An advance is a call of an `input-advancing-calls` function, a call of a project
      function that makes one (any module, through imports, `self`, `functools.partial`,
      up to `helper-depth` calls deep), or an increment of a field or local named in
      `advanced-fields` (`common_attn_metadata.seq_lens += 1`, `positions += 1`,
      `positions = positions + 1`, also by a helper, on whatever object it increments:
      `self._next_step()` calling `advance_inputs(self.input_buffers, ...)`). A project
      function with an advancing name counts only if it, or a function it calls, touches an
      advanced field (`input_buffers.positions`, a `positions` parameter): a multi-module
      MTP's `update_draft_inputs`, which shifts token ids between modules at the same
      positions, advances nothing.
    - A forward that receives the metadata is a call named in `forward-calls` with the
      metadata among its arguments (`self.run_model(n, attn_metadata)`,
      `set_forward_context(per_layer_attn_metadata, ...)`), or a call of a project function
      that passes that parameter on to one (`self._generate_draft(n, attn_metadata)`).
      Metadata is a name matching `metadata-names`.
    - A refresh is a new binding of the name (`attn_metadata = build(...)`; not a copy that
      holds the same entries: `dict(md)`, `{**md}`, `{n: md for n in layers}` with `md` not
      built anew in the loop), a store into it
      (`per_layer_attn_metadata[layer] = md`: not when `md` is the object the metadata
      already held and the step never binds it anew, as when the step's own build went to
      another name), `update`/`setdefault` on it, a call named in
      `refresh-calls` that receives it (`builder.update_draft_decode_metadata(attn_metadata)`),
      a call of a project function that passes it to one or stores into it
      (`self._update_draft_decode_metadata(attn_metadata, num_reqs)`), a method of the
      metadata's own class that updates it (the class known from an annotation, a
      constructor, or a factory that makes it: `self.graph_md = Meta.allocate(n)` with a
      `@classmethod` returning `cls(...)`, or a return annotation), or a write to a field of the metadata itself
      (`md.seq_lens += 1` when `md` is what the forward receives: it moves with its inputs in
      place; whether its derived fields move too is IC004's finding). Entering an inner loop that refreshes it (over the
      attention groups) counts as a refresh; so does an advance that also refreshes it.
    - *Aliases.* An update in place through any name bound to the same object counts: a
      local alias (`md = decode_md`), the object every entry of a per-layer dict holds
      (`per_layer = {name: md for name in layers}`, then `md.seq_lens += 1`), an entry taken
      from it (`md_i = per_layer[name]`), a local alias of the dict (`layer_mds[name] = built`).
      Binding one of those names to something else refreshes nothing, and a local that took
      `self.attn_metadata` before the loop does not see `self.attn_metadata` bound anew (by
      the loop or by a method it calls).
    - *`functools.partial`.* A call of a local bound to `functools.partial(f, *args, **kw)` is
      judged as the call of `f` with those arguments: `run = partial(self.run_model, n,
      attn_metadata)` makes `run()` a forward that receives `attn_metadata`.

    A helper that both runs the forward and advances the inputs (`_generate_draft`) is taken
    to run them in that order: the forward of one step, then the inputs of the next.

    Conditions count where the source decides them: a refresh under a condition that only
    reads the loop's counter (`if step == 1:`) covers only those iterations. A refresh under
    any other condition (`if attn_metadata is not None and (self.advance_draft_positions or
    step == 1):`, `if builder.supports_draft_decode_metadata_update:`) is taken to run
    whenever the inputs moved: such conditions say when the backend needs it, which the
    source does not show; but not where the branch without it runs a forward of its own (an
    eager branch that rebuilds beside a CUDA-graph `else:` that replays with the metadata it
    was handed: that path is reported).

    ## On vLLM's release trees
    Reported: the model runner v2 draft loop in 0.18.0 (`eagle/speculator.py:148`), 0.19.0
    (`:203`) and 0.20.0 (`:276`), and the same loop in the experimental v2 runner of 0.13.0
    (`vllm/v1/worker/gpu/spec_decode/eagle.py:144`, metadata built once in `propose()`).
    Not reported: the v1 proposers (they rebuild every group's metadata each step), the v2
    speculators of 0.24.0 to 0.33.0 (rebuild at the top of each step, or
    `_update_draft_decode_metadata`), the multi-module MTP speculator of 0.33.0 (one module
    per step at the same positions).

    ## Code outside the project
    Helpers and base classes imported from vLLM are read where Python would find them: the
    project, `extra-paths`, the Python environment (`--python`, `python = "..."`), then the
    models of vLLM bundled with invariant-check (`invariant-check lint -v` says which). A
    plugin's draft loop that calls vLLM's own helpers is judged through their source when
    vLLM is installed; the bundled models keep only the helpers that write a metadata
    object's fields, so without vLLM a forward or an advance hidden in another vLLM helper
    is not seen (the finding is then missed, never invented).

    ## What it leaves to the runtime guard
    Whether a refresh really regenerates every position-dependent field, helpers the linter
    cannot resolve, and the conditions above: the `metadata-coherence` runtime guard checks
    the common metadata (`max_seq_len`, `query_start_loc`, `seq_lens_cpu_upper_bound`, the
    decode rows' slot mapping against positions and block table) at every draft step's
    metadata build.

    ## Fix
    Unsafe (`--fix --unsafe-fixes`). The metadata is built again inside the draft step, right
    before the forward, as vLLM 0.21.0 builds it on every step. A build of this function
    (`md = build(...)` before the loop, or on the first step only) is repeated there (moved,
    when it sat in the loop). Metadata the callers pass in (vLLM's `generate_draft`) gets a
    `rebuild_<md>=None` parameter, called there while the metadata is set, and each call site in
    the same file passes its own build, evaluated anew at every step: a build bound to a local
    (`md = build(...)`, as vLLM 0.13.0-0.18.0 write it) moves into a function of the caller,
    called there and handed over (`rebuild_md=build_draft_md`), so it is written once; a call
    of the class's own build helper (`self._build_draft_attn_metadata(...)`, vLLM 0.19.0+) or
    a build written in the call is passed again as `lambda: <build>`. No fix when no caller in the
    project builds it, when the build is in another file or is one of several, when what is
    forwarded is a container filled from another name (`{n: md for n in layers}`), or when a name
    it reads changes between the build and the call. A function passed around rather than called (a CUDA graph capture) keeps its
    single build: the parameter's default leaves it as it was.

    ## Options
    - `input-advancing-calls`: last names of calls that advance the draft inputs. Default
      `update_eagle_inputs`, `update_draft_inputs`, `compute_slot_mappings`,
      `eagle_step_update_slot_mapping_and_metadata`.
    - `advanced-fields`: fields (and locals) whose increment advances the inputs. Default
      `seq_lens`, `positions`.
    - `forward-calls`: last names of calls that run the draft model with the metadata.
      Default `model`, `forward`, `draft_model`, `run_model`, `_run_model`,
      `set_forward_context`.
    - `refresh-calls`: last names of calls that rebuild or refresh metadata they receive.
      Default `update_draft_decode_metadata`, `build`, `build_for_drafting`,
      `build_attn_metadata`, `build_per_group_and_layer_attn_metadata`.
    - `metadata-names` (globs, any case): names that hold attention metadata. Default
      `*attn_metadata*`, `*attention_metadata*`, `*attn_md*`, `*_md`, `md`.
    - `helper-depth` (default 4): how many calls deep helpers are followed.
    """

    CODE = "IC005"
    NAME = "draft-metadata-not-refreshed"
    SUMMARY = "A draft loop advances its inputs but runs every step with the same attention metadata."
    HINT = (
        "Rebuild the metadata inside the loop after the inputs advance "
        "(`attn_metadata = self._build_draft_attn_metadata(...)`), or refresh it in place where "
        "the builder allows: `if builder.supports_draft_decode_metadata_update: "
        "builder.update_draft_decode_metadata(attn_metadata)`."
    )
    OPTIONS = {
        "input-advancing-calls": Option(
            ["update_eagle_inputs", "update_draft_inputs", "compute_slot_mappings",
             "eagle_step_update_slot_mapping_and_metadata"],
            "last names of calls that advance the draft inputs",
        ),
        "advanced-fields": Option(["seq_lens", "positions"], "fields and locals whose increment advances the inputs"),
        "forward-calls": Option(
            ["model", "forward", "draft_model", "run_model", "_run_model", "set_forward_context"],
            "last names of calls that run the draft model with the metadata they receive",
        ),
        "refresh-calls": Option(
            ["update_draft_decode_metadata", "build", "build_for_drafting", "build_attn_metadata",
             "build_per_group_and_layer_attn_metadata"],
            "last names of calls that rebuild or refresh the metadata they receive",
        ),
        "metadata-names": Option(
            ["*attn_metadata*", "*attention_metadata*", "*attn_md*", "*_md", "md"],
            "globs for names that hold attention metadata",
        ),
        "helper-depth": Option(4, "how many helper calls deep advances, forwards and refreshes are looked for", int),
    }

    VALID = [
        # The metadata the forward receives is itself advanced in place (IC004 checks that
        # its derived fields, here `max_seq_len`, move with it).
        Valid(
            """
def draft(self, common_attn_metadata, num_steps):
    for _ in range(num_steps):
        common_attn_metadata.seq_lens += 1
        common_attn_metadata.max_seq_len = min(common_attn_metadata.max_seq_len + 1, self.max_model_len)
        self.run_model(common_attn_metadata)
"""
        ),
        # vLLM 0.21.0: the metadata is built inside the loop, after the inputs advanced.
        Valid(
            """
from .inputs import update_eagle_inputs

def generate_draft(self, num_reqs, num_tokens, slot_mappings):
    for step in range(1, self.num_speculative_steps):
        attn_metadata = self.build_draft_attn_metadata(num_reqs, num_tokens)
        hidden = self.run_model(num_tokens, attn_metadata, slot_mappings)
        draft_tokens = self.sample(hidden)
        update_eagle_inputs(draft_tokens, hidden, self.input_buffers)
""",
            files={"inputs.py": _INPUTS},
        ),
        # Refreshed in place where the backend allows it, rebuilt where it does not.
        Valid(
            """
from .inputs import update_draft_inputs

def multi_step(self, num_tokens, attn_metadata):
    for step in range(1, self.num_speculative_steps):
        hidden = self.run_model(num_tokens, attn_metadata)
        update_draft_inputs(self.sample(hidden), self.input_buffers)
        for group in self.attn_groups:
            if group.supports_draft_decode_metadata_update:
                group.update_draft_decode_metadata(attn_metadata)
            else:
                attn_metadata.update(group.build(num_tokens))
""",
            files={"inputs.py": _INPUTS},
        ),
        # Refreshed through a helper of another module.
        Valid(
            """
from .inputs import update_draft_inputs
from .refresh import refresh_decode_metadata

def multi_step(self, num_tokens, attn_metadata):
    for step in range(1, self.num_speculative_steps):
        hidden = self.run_model(num_tokens, attn_metadata)
        update_draft_inputs(self.sample(hidden), self.input_buffers)
        refresh_decode_metadata(self.attn_groups, attn_metadata)
""",
            files={
                "inputs.py": _INPUTS,
                "refresh.py": """
def refresh_decode_metadata(groups, md):
    for group in groups:
        group.update_draft_decode_metadata(md)
""",
            },
        ),
        # vLLM 0.24.0: rebuilt at the top of each step under a backend condition; a helper
        # runs the forward and then advances the inputs.
        Valid(
            """
from .inputs import update_draft_inputs

class Speculator:
    def multi_step_decode(self, num_reqs, num_tokens, skip_attn):
        attn_metadata = None
        for step in range(1, self.num_speculative_steps):
            if not skip_attn and (self.advance_draft_positions or step == 1):
                attn_metadata = self.build_draft_attn_metadata(num_reqs, num_tokens)
            self.generate_draft(num_tokens, attn_metadata)

    def generate_draft(self, num_tokens, attn_metadata):
        hidden = self.run_model(num_tokens, attn_metadata)
        update_draft_inputs(self.sample(hidden), self.input_buffers)
""",
            files={"inputs.py": _INPUTS},
        ),
        # v1 style: the per-layer metadata is refilled from each group's builder every step.
        Valid(
            """
def propose(self, common_attn_metadata, per_layer_attn_metadata):
    for token_index in range(self.num_speculative_tokens - 1):
        common_attn_metadata.seq_lens += 1
        for group in self.draft_attn_groups:
            md = group.builder.build_for_drafting(common_attn_metadata, token_index + 1)
            for layer_name in group.layer_names:
                per_layer_attn_metadata[layer_name] = md
        with set_forward_context(per_layer_attn_metadata, self.vllm_config):
            hidden = self.model(self.input_ids, self.positions)
"""
        ),
        # Each step runs another module at the same positions: shifting token ids advances nothing.
        Valid(
            """
def generate_drafts(self, num_tokens, attn_metadata):
    for step in range(self.num_speculative_steps):
        hidden = self._run_model(num_tokens, attn_metadata, module=step)
        update_draft_inputs(self.sample(hidden), self.input_buffers)

def update_draft_inputs(tokens, input_buffers):
    input_buffers.input_ids[:-1] = input_buffers.input_ids[1:].clone()
    input_buffers.input_ids[-1] = tokens
"""
        ),
        # A `while` loop that rebuilds after advancing positions.
        Valid(
            """
def draft(self, num_tokens):
    step = 0
    md = self.build_md(num_tokens)
    while step < self.num_steps:
        hidden = self.run_model(num_tokens, md)
        self.positions += 1
        md = self.build_md(num_tokens)
        step += 1
"""
        ),
        # The metadata is not a loop input: the helper builds it for each step itself.
        Valid(
            """
from .inputs import update_eagle_inputs

def generate_draft(self, num_tokens):
    for step in range(1, self.num_speculative_steps):
        hidden = self.build_and_run(num_tokens)
        update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)
""",
            files={"inputs.py": _INPUTS},
        ),
        # A metadata object refreshed by a method of its own class; per-step metadata
        # handed out by the loop itself.
        Valid(
            """
from .inputs import update_draft_inputs

class DraftMetadata:
    def advance(self, step):
        self.step = step
        self.seq_lens = self.seq_lens + 1

def draft(self, num_tokens, md: DraftMetadata, per_step_mds):
    for step in range(1, self.num_steps):
        self.run_model(num_tokens, md)
        update_draft_inputs(self.sample(), self.input_buffers)
        md.advance(step)
    for step_md in per_step_mds:
        self.run_model(num_tokens, step_md)
        update_draft_inputs(self.sample(), self.input_buffers)
""",
            files={"inputs.py": _INPUTS},
        ),
        # The forward does not receive the metadata: it is not the loop's to refresh.
        Valid(
            """
from .inputs import update_eagle_inputs

def draft(self, num_tokens, attn_metadata):
    self.prepare(attn_metadata)
    for step in range(self.num_steps):
        hidden = self.model(self.input_ids, self.positions)
        update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)
""",
            files={"inputs.py": _INPUTS},
        ),
        # Updated in place through a local alias of the metadata the forward receives.
        Valid(
            """
def run(self, decode_md, positions, input_ids):
    md = decode_md
    for _ in range(self.num_steps):
        hidden = self.run_model(input_ids, positions, decode_md)
        input_ids = self.sample(hidden)
        positions += 1
        md.seq_lens += 1
        md.max_seq_len = min(md.max_seq_len + 1, self.max_model_len)
        md.slot_mapping = self.slots(md, positions)
"""
        ),
        # Every layer's entry holds one object, updated in place through the name it was
        # built from.
        Valid(
            """
from vllm.forward_context import set_forward_context

def propose(self, common_attn_metadata, input_ids, positions):
    attn_metadata = self.builder.build_for_drafting(common_attn_metadata, 0)
    per_layer_attn_metadata = {name: attn_metadata for name in self.layer_names}
    for _ in range(self.num_speculative_tokens - 1):
        positions += 1
        attn_metadata.seq_lens += 1
        attn_metadata.max_seq_len = min(attn_metadata.max_seq_len + 1, self.max_model_len)
        attn_metadata.slot_mapping = self.slots(positions)
        with set_forward_context(per_layer_attn_metadata, self.vllm_config):
            hidden = self.model(input_ids=input_ids, positions=positions)
        input_ids = self.sample(hidden)
"""
        ),
        # Fresh metadata stored each step through a local alias of the dict the forward gets.
        Valid(
            """
from vllm.forward_context import set_forward_context

def propose(self, common_attn_metadata, per_layer_attn_metadata, input_ids, positions):
    layer_mds = per_layer_attn_metadata
    for step in range(self.num_speculative_tokens - 1):
        positions += 1
        common_attn_metadata.seq_lens += 1
        built = self.builder.build_for_drafting(common_attn_metadata, step + 1)
        for name in self.layer_names:
            layer_mds[name] = built
        with set_forward_context(per_layer_attn_metadata, self.vllm_config):
            hidden = self.model(input_ids=input_ids, positions=positions)
        input_ids = self.sample(hidden)
"""
        ),
        # A name bound each step to metadata built anew, through another local.
        Valid(
            """
def draft(self, num_tokens, attn_metadata):
    for step in range(self.num_steps):
        fresh = self.builder.build_for_drafting(self.common_md, step)
        attn_metadata = fresh
        hidden = self.run_model(num_tokens, attn_metadata)
        self.input_buffers.positions[: self.num_reqs] += 1
"""
        ),
        # The step's own build stored under every layer.
        Valid(
            """
def draft(self, common, positions):
    md = self.builder.build_for_drafting(common, draft_index=0)
    per_layer_md = {name: md for name in self.layer_names}
    for k in range(1, self.num_steps):
        with set_forward_context(per_layer_md, self.vllm_config):
            self.model(positions=positions)
        positions += 1
        fresh = self.builder.build_for_drafting(common, draft_index=k)
        for name in self.layer_names:
            per_layer_md[name] = fresh
"""
        ),
        # A helper of another module moves the inputs and the metadata's own fields with them.
        Valid(
            """
from .steps import advance_decode

def generate(self, input_ids, positions, attn_md):
    for _ in range(self.num_steps):
        hidden = self.model(input_ids, positions, attn_md)
        input_ids = self.sample(hidden)
        advance_decode(attn_md, positions)
""",
            files={"steps.py": """
def advance_decode(md, positions):
    positions += 1
    md.seq_lens += 1
    md.max_seq_len += 1
"""},
        ),
        # A helper of another module writes the metadata's own lengths it is handed, in place,
        # each step: the object moves with the inputs.
        Valid(
            """
from .kernels import advance_seq_lens


def propose(self, md, num_reqs):
    for _ in range(self.num_speculative_tokens - 1):
        self.positions[:num_reqs] += 1
        advance_seq_lens(md.seq_lens, num_reqs)
        hidden = self.model(self.input_ids[:num_reqs], self.positions[:num_reqs], md)
    return hidden
""",
            files={"kernels.py": """
def advance_seq_lens(seq_lens, num_reqs):
    seq_lens[:num_reqs] += 1
"""},
        ),
        # The dict of each step holds the metadata that step built.
        Valid(
            """
def draft(self, common, positions):
    for k in range(self.num_steps):
        attn_metadata = self.builder.build_for_drafting(common, draft_index=k)
        per_layer_attn_metadata = {name: attn_metadata for name in self.layer_names}
        self.model(positions, attn_metadata=per_layer_attn_metadata)
        positions += 1
"""
        ),
        # Each entry built in the comprehension itself.
        Valid(
            """
def draft(self, common, positions):
    for k in range(self.num_steps):
        per_layer_attn_metadata = {
            name: b.build_for_drafting(common, k) for name, b in self.builders.items()
        }
        self.model(positions, attn_metadata=per_layer_attn_metadata)
        positions += 1
"""
        ),
        # Rebuilt at the top of every step after the first: the step an advance leads to.
        Valid(
            """
from .inputs import update_eagle_inputs


class Speculator:
    def generate_draft(self, num_reqs, attn_metadata):
        for step in range(self.num_speculative_steps):
            if step > 0:
                attn_metadata = self.build_draft_attn_metadata(num_reqs)
            hidden = self.run_model(num_reqs, attn_metadata)
            update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)
""",
            files={"inputs.py": _INPUTS},
        ),
        # A merge whose later entries are this step's build.
        Valid(
            """
def draft(self, common, positions, per_layer):
    for k in range(self.num_steps):
        md = self.builder.build_for_drafting(common, draft_index=k)
        per_layer = {**per_layer, **dict.fromkeys(self.layer_names, md)}
        self.model(positions, attn_metadata=per_layer)
        positions += 1
"""
        ),
        # Built by its class's constructor in the step, refreshed by a method of that class.
        Valid(
            """
from .inputs import update_draft_inputs

class DraftMetadata:
    def __init__(self, seq_lens):
        self.seq_lens = seq_lens

    def advance(self, n):
        self.seq_lens[:n] += 1

def draft(self, num_tokens, seq_lens, n):
    md = DraftMetadata(seq_lens.clone())
    for _ in range(1, self.num_steps):
        self.run_model(num_tokens, md)
        update_draft_inputs(self.sample(), self.input_buffers)
        md.advance(n)
""",
            files={"inputs.py": _INPUTS},
        ),
        # Metadata a classmethod of its class allocates, refreshed in place by a method of
        # that class through a local alias.
        Valid(
            _GRAPH_DRAFTER.replace("{call}", "refresh_from(self.seq_lens, self.slots, n)"),
            files={"graph_meta.py": _GRAPH_META},
        ),
    ]
    INVALID = [
        # vLLM 0.18.0-0.20.0 (model runner v2): the same metadata for every draft step.
        Invalid(
            """
from .inputs import update_eagle_inputs

class EagleSpeculator:
    def generate_draft(self, num_reqs, num_tokens, attn_metadata, slot_mappings):
        pos = self.input_buffers.positions[:num_reqs]
        for step in range(1, self.num_speculative_steps):
            hidden = self.run_model(num_tokens, attn_metadata, slot_mappings)
            draft_tokens = self.sample(hidden)
            if step < self.num_speculative_steps - 1:
                update_eagle_inputs(draft_tokens, hidden, self.input_buffers)
                if attn_metadata is not None:
                    self.block_tables.compute_slot_mappings(pos, num_tokens)
""",
            line=6,
            column=9,
            message_contains="`attn_metadata` is passed to `self.run_model(...)`",
            files={"inputs.py": _INPUTS},
        ),
        # The advance sits in a helper of another module, the forward in a method.
        Invalid(
            """
from .steps import next_inputs

class Drafter:
    def draft(self, num_tokens, draft_md):
        for _ in range(self.num_steps):
            hidden = self._step(num_tokens, draft_md)
            next_inputs(self, hidden)

    def _step(self, num_tokens, md):
        return self.run_model(num_tokens, md)
""",
            line=5,
            files={
                "steps.py": """
from .inputs import update_draft_inputs

def next_inputs(drafter, hidden):
    update_draft_inputs(drafter.sample(hidden), drafter.input_buffers)
""",
                "inputs.py": _INPUTS,
            },
        ),
        # Rebuilt only on the first step: the loop counter decides, later steps reuse it.
        Invalid(
            """
from .inputs import update_draft_inputs

def multi_step(self, num_tokens):
    attn_metadata = None
    for step in range(1, self.num_speculative_steps):
        if step == 1:
            attn_metadata = self.build_draft_attn_metadata(num_tokens)
        hidden = self.run_model(num_tokens, attn_metadata)
        update_draft_inputs(self.sample(hidden), self.input_buffers)
""",
            line=5,
            files={"inputs.py": _INPUTS},
        ),
        # Rebuilt before the inputs advance: the forward after the advance reads old metadata.
        Invalid(
            """
from .inputs import update_draft_inputs

def multi_step(self, num_tokens, hidden):
    for step in range(1, self.num_speculative_steps):
        attn_metadata = self.build_draft_attn_metadata(num_tokens)
        update_draft_inputs(self.sample(hidden), self.input_buffers)
        hidden = self.run_model(num_tokens, attn_metadata)
""",
            line=4,
            files={"inputs.py": _INPUTS},
        ),
        # v1 style, the group rebuild deleted: the positions advance, the dict does not change.
        Invalid(
            """
def propose(self, common_attn_metadata, per_layer_attn_metadata):
    for token_index in range(self.num_speculative_tokens - 1):
        common_attn_metadata.seq_lens += 1
        common_attn_metadata.max_seq_len += 1
        with set_forward_context(per_layer_attn_metadata, self.vllm_config):
            hidden = self.model(self.input_ids, self.positions)
""",
            line=2,
            message_contains="`common_attn_metadata.seq_lens += 1`",
        ),
        # A `while` loop; the helper called between the steps only logs the metadata.
        Invalid(
            """
from .inputs import update_eagle_inputs
from .debug import log_metadata

def draft(self, num_tokens, attn_md):
    step = 0
    while step < self.num_steps:
        hidden = self.run_model(num_tokens, attn_md)
        update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)
        log_metadata(attn_md)
        step += 1
""",
            line=6,
            files={
                "inputs.py": _INPUTS,
                "debug.py": """
def log_metadata(md):
    print(md)
""",
            },
        ),
        # Another metadata object is refreshed, not the one the forward receives.
        Invalid(
            """
from .inputs import update_draft_inputs

def multi_step(self, num_tokens, attn_metadata, prefill_attn_metadata):
    for step in range(1, self.num_speculative_steps):
        hidden = self.run_model(num_tokens, attn_metadata)
        update_draft_inputs(self.sample(hidden), self.input_buffers)
        for group in self.attn_groups:
            group.update_draft_decode_metadata(prefill_attn_metadata)
""",
            line=4,
            files={"inputs.py": _INPUTS},
        ),
        # Metadata kept on the instance and passed by keyword.
        Invalid(
            """
from .inputs import update_eagle_inputs

class Drafter:
    def draft(self, num_tokens):
        self.attn_metadata = self.build_md(num_tokens)
        for step in range(self.num_steps):
            hidden = self._run_model(num_tokens, attn_metadata=self.attn_metadata)
            update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)
""",
            line=6,
            message_contains="`self.attn_metadata`",
            files={"inputs.py": _INPUTS},
        ),
        # The forward is a `functools.partial` bound to the metadata before the loop.
        Invalid(
            """
import functools

def generate_draft(self, num_tokens, attn_metadata, slot_mappings):
    run = functools.partial(self.run_model, num_tokens, attn_metadata, slot_mappings)
    for step in range(1, self.num_speculative_steps):
        hidden = run()
        self.input_buffers.positions[: self.num_reqs] += 1
        self.input_buffers.seq_lens[: self.num_reqs] += 1
""",
            line=5,
        ),
        # The advance is two calls deep, on an object the helper finds on `self`.
        Invalid(
            """
from .steps import advance_inputs

class Speculator:
    def _next_step(self, tokens):
        advance_inputs(self.input_buffers, tokens)

    def generate_draft(self, num_tokens, attn_metadata):
        for step in range(1, self.num_speculative_steps):
            hidden = self.run_model(num_tokens, attn_metadata)
            self._next_step(self.sample(hidden))
""",
            line=8,
            files={"steps.py": """
def advance_inputs(input_buffers, tokens):
    input_buffers.input_ids[: len(tokens)] = tokens
    input_buffers.positions[: len(tokens)] += 1
"""},
        ),
        # The positions advance as a local, rebound to itself plus one.
        Invalid(
            """
def draft(self, attn_metadata, input_ids, positions):
    for _ in range(self.num_steps):
        hidden = self.model(input_ids, positions, attn_metadata)
        input_ids = self.sample(hidden)
        positions = positions + 1
""",
            line=2,
        ),
        # A local took `self.attn_metadata` before the loop; the refresh binds the attribute
        # anew, which the local does not see.
        Invalid(
            """
class Speculator:
    def _refresh(self, num_tokens):
        self.attn_metadata = self.build_attn_metadata(num_tokens)

    def generate_draft(self, num_tokens):
        attn_metadata = self.attn_metadata
        for step in range(1, self.num_speculative_steps):
            hidden = self.run_model(num_tokens, attn_metadata)
            self.input_buffers.positions[: self.num_reqs] += 1
            self._refresh(num_tokens)
""",
            line=7,
        ),
        # A helper runs the forward and then advances the inputs; the next step's call runs
        # the forward again with the same metadata.
        Invalid(
            """
class Speculator:
    def _generate_draft(self, num_tokens, attn_metadata):
        hidden = self.run_model(num_tokens, attn_metadata)
        self.input_buffers.positions[: self.num_reqs] += 1

    def multi_step(self, num_tokens, attn_metadata):
        for step in range(1, self.num_speculative_steps):
            self._generate_draft(num_tokens, attn_metadata)
""",
            line=7,
        ),
        # A fresh dict each step, but with the same stale entries.
        Invalid(
            """
def draft(self, per_layer_attn_metadata, positions):
    for _ in range(self.num_steps):
        positions.add_(1)
        per_layer_attn_metadata = dict(per_layer_attn_metadata)
        self.model(positions, attn_metadata=per_layer_attn_metadata)
""",
            line=2,
        ),
        # The step builds new metadata, but the layer dict gets the step-0 object back.
        Invalid(
            """
def draft(self, common, positions):
    md = self.builder.build_for_drafting(common, draft_index=0)
    per_layer_md = {name: md for name in self.layer_names}
    for k in range(1, self.num_steps):
        with set_forward_context(per_layer_md, self.vllm_config):
            self.model(positions=positions)
        positions += 1
        fresh = self.builder.build_for_drafting(common, draft_index=k)
        for name in self.layer_names:
            per_layer_md[name] = md
""",
            line=4,
        ),
        # vLLM 0.13.0: the caller builds the metadata once and hands it to the loop. The fix
        # moves that build into a function of the caller and hands the function over too.
        Invalid(
            """
from typing import Any

from .inputs import update_eagle_inputs
from .metadata import build_attn_metadata


class EagleSpeculator:
    def generate_draft(self, num_reqs: int, attn_metadata: dict[str, Any]) -> None:
        for step in range(1, self.num_speculative_steps):
            hidden = self.run_model(num_reqs, attn_metadata)
            update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)

    def propose(self, num_reqs: int) -> None:
        block_tables = [x[:num_reqs] for x in self.block_tables.input_block_tables]
        attn_metadata = build_attn_metadata(
            num_reqs=num_reqs,
            seq_lens=self.input_buffers.seq_lens[:num_reqs],
            block_tables=block_tables,
        )
        self.generate_draft(num_reqs, attn_metadata)
""",
            line=9,
            files={"inputs.py": _INPUTS, "metadata.py": _BUILD},
        ),
        # vLLM 0.18.0: the build sits in an `if`, the call after it.
        Invalid(
            """
from .inputs import update_eagle_inputs
from .metadata import build_attn_metadata


class EagleSpeculator:
    def generate_draft(self, num_reqs, attn_metadata):
        for step in range(1, self.num_speculative_steps):
            hidden = self.run_model(num_reqs, attn_metadata)
            update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)

    def propose(self, num_reqs, dummy_run=False):
        attn_metadata_updated = None
        if not dummy_run:
            block_tables = [x[:num_reqs] for x in self.block_tables.input_block_tables]
            attn_metadata_updated = build_attn_metadata(
                num_reqs=num_reqs, block_tables=block_tables
            )
        self.generate_draft(num_reqs, attn_metadata_updated)
""",
            line=7,
            files={"inputs.py": _INPUTS, "metadata.py": _BUILD},
        ),
        # The build written in the call: the call site passes it again, evaluated anew.
        Invalid(
            """
from .inputs import update_eagle_inputs
from .metadata import build_attn_metadata


class EagleSpeculator:
    def generate_draft(self, num_reqs, attn_metadata):
        for step in range(1, self.num_speculative_steps):
            hidden = self.run_model(num_reqs, attn_metadata)
            update_eagle_inputs(self.sample(hidden), hidden, self.input_buffers)

    def propose(self, num_reqs):
        self.generate_draft(num_reqs, build_attn_metadata(num_reqs=num_reqs))
""",
            line=7,
            files={"inputs.py": _INPUTS, "metadata.py": _BUILD},
        ),
        # A fresh dict each step, its every entry the metadata built once before the loop.
        Invalid(
            """
def draft(self, common, positions):
    attn_metadata = self.builder.build_for_drafting(common, draft_index=0)
    for _ in range(self.num_steps):
        per_layer_attn_metadata = {name: attn_metadata for name in self.layer_names}
        self.model(positions, attn_metadata=per_layer_attn_metadata)
        positions += 1
""",
            line=3,
        ),
        # The alias is bound to a new dict in the loop: the stores go there, not into the
        # metadata the forward receives.
        Invalid(
            """
def draft(self, common, positions, per_layer_attn_metadata):
    layer_mds = per_layer_attn_metadata
    for k in range(self.num_steps):
        positions += 1
        layer_mds = {}
        for name in self.layer_names:
            layer_mds[name] = self.builder.build_for_drafting(common, draft_index=k)
        with set_forward_context(per_layer_attn_metadata, self.vllm_config):
            self.model(positions=positions)
""",
            line=3,
        ),
        # The same object; the method called reads it and updates nothing.
        Invalid(
            _GRAPH_DRAFTER.replace("{call}", "describe()"),
            line=10,
            files={"graph_meta.py": _GRAPH_META},
        ),
        # The CUDA-graph `else:` replays with the metadata it was handed while the inputs move.
        Invalid(
            """
def generate_draft(self, num_reqs, num_tokens, attn_metadata, slot_mappings):
    for step in range(1, self.num_speculative_steps):
        if not self.use_cuda_graph:
            attn_metadata = self.build_draft_attn_metadata(num_reqs, num_tokens)
            hidden = self.run_model(num_tokens, attn_metadata, slot_mappings)
        else:
            hidden = self.run_model(num_tokens, attn_metadata, slot_mappings)
        self.input_buffers.positions += 1
""",
            line=2,
        ),
    ]

    @classmethod
    def needs(cls, options: dict[str, Any]) -> Need:
        return All(Passed(_metadata_names(options)), AnyOf(FOR_STATEMENT, WHILE_STATEMENT))

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.query = MetadataQuery(
            metadata=_metadata_names(options),
            forwards=frozenset(options["forward-calls"]),
            refreshes=frozenset(options["refresh-calls"]),
            advancing=frozenset(options["input-advancing-calls"]),
            fields=frozenset(options["advanced-fields"]),
            depth=options["helper-depth"],
        )

    def check_function(self, view: FunctionView) -> Iterator[Report]:
        for use in stale_metadata(view, self.query):
            yield _report(view, use)

    def fix(self, report: Report, view: FunctionView) -> Fix | None:
        from ._fixes import ic005

        return ic005.build(self, report, view)


def _metadata_names(options: dict[str, Any]) -> Names:
    return Names(options["metadata-names"], case_sensitive=False)


# -- words ---------------------------------------------------------------------------------------
def _report(view: FunctionView, use: StaleUse) -> Report:
    md = use.metadata
    fwd_call = use.forward.node
    adv = use.advance
    adv_text = _event_text(view, adv)
    fwd_text = f"{view.text(fwd_call.func)}(...)"
    message = (
        f"`{md}` is passed to `{fwd_text}` on every step of this loop, but `{adv_text}` "
        f"advances the draft inputs and `{md}` is neither rebuilt nor refreshed before the "
        f"next forward: that step attends with the previous step's metadata"
    )
    hint = (
        f"Rebuild `{md}` inside the loop after the inputs advance (e.g. "
        f"`{md} = self._build_draft_attn_metadata(...)` before `{fwd_text}`), or refresh it in "
        f"place where the backend allows it: `if builder.supports_draft_decode_metadata_update: "
        f"builder.update_draft_decode_metadata({md})`."
    )
    data = {"metadata": md, "advance": adv_text, "forward": fwd_text, "advance_line": adv.node.lineno, "forward_line": fwd_call.lineno}
    return Report(use.loop.node, message, hint, data)


def _event_text(view: FunctionView, node) -> str:
    if node.kind == "call":
        return f"{view.text(node.node.func)}(...)"
    return view.text(node.node)


__all__ = ["DraftMetadataNotRefreshed"]
