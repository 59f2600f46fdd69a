"""Guard `metadata-coherence`: the common attention metadata a draft step is about to use.

Each draft step advances per-request state (positions, `seq_lens`); every field derived from it
must move with it, or the draft model attends to the wrong tokens (vLLM 0.13/0.14 left
`max_seq_len` behind, PR #32312). Checked where the step's metadata is built, before vLLM's
builders read it (v1: the proposer's `build_per_group_and_layer_attn_metadata`; model runner v2:
what the speculator passes to `build_attn_metadata`), for the rows of the real requests:

- `max-seq-len`: `max_seq_len >= seq_lens[row]`;
- `query-start-loc`: `query_start_loc` non-decreasing over every row (CUDA-graph padding rows
  included), and `query_start_loc[num_reqs] == num_actual_tokens`, the device tensor and its CPU
  copy alike. Where vLLM passes a token count padded for a CUDA graph (v1 draft step 0, whose
  metadata can come straight from the target's build; a padded or FULL-graph v2 build) the end
  check is `query_start_loc[num_reqs] <= num_actual_tokens`;
- `seq-lens-upper-bound`: `seq_lens_cpu_upper_bound[row] >= seq_lens[row]` where present;
- `slot-mapping`: for each decode row (query length 1),
  `slot_mapping[t] == block_table[row, pos // block_size] * block_size + pos % block_size` with
  `t = query_start_loc[row]` and `pos` the position the draft model runs that token at. Rows
  whose slot is vLLM's padding id (-1, "write nothing") are not checked; nor are decode context
  parallel runs (their slots are rank-local).

- `memo-cache`: every memo cache set on the v1 metadata object (a method that returns `self._x`
  once set, learned from the class: `memos.py`) equals what its method computes from the
  current fields (vLLM 0.25-0.33: the draft loop rewrites `query_start_loc`/`num_actual_tokens`
  in place and `token_to_req_indices` keeps mapping every draft token to request 0);
- `dcp-local-seq-lens`: under decode context parallelism (size > 1, rank and interleave known),
  `dcp_local_seq_lens[row] == get_dcp_local_seq_lens(seq_lens)[row]` (vLLM's own function), or of
  `seq_lens_cpu_upper_bound`, which vLLM's model runner computes them from.

And `pad-tail` (model runner v2): after `_copy_request_inputs`, the speculator's `idx_mapping`
rows past the real requests hold -1, the sentinel sampling and slot mapping skip (vLLM PR
#47066: 0.24 left them stale).

Tensors stay on their device: the comparisons are queued and read back when the next proposal
starts (INVARIANT_CHECK_GUARDS_SYNC=eager: at once); nothing runs while a CUDA graph is captured.
"""

from __future__ import annotations

import contextvars
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import deferred, faults, memos, runtime
from .config import METADATA_COHERENCE
from .targets import site_name

G = METADATA_COHERENCE
PAD_SLOT_ID = -1  # vLLM's PADDING_SLOT_ID / PAD_SLOT_ID

_queue = deferred.Queue()


def flush() -> None:
    """Read back the device-side results of earlier draft steps."""
    _queue.flush()


def reset() -> None:
    _queue.clear()
    memos.reset()


# ---------------------------------------------------------------------------- what is checked


@dataclass
class SlotGroup:
    """One KV-cache group's slot mapping with what it must agree with."""

    slot_mapping: torch.Tensor  # [tokens]
    block_table: torch.Tensor  # [rows, blocks]
    block_size: int
    positions: torch.Tensor  # [tokens]: the position each token runs at
    name: str = ""  # "group 1" where there are several


@dataclass(frozen=True)
class DcpFacts:
    """What vLLM's get_dcp_local_seq_lens needs besides seq_lens."""

    size: int
    rank: int
    interleave: int


@dataclass
class StepMetadata:
    """The facts of one draft step's common metadata, whatever vLLM version they came from."""

    owner: str  # the proposer/speculator class, for messages
    draft_step: int | None
    num_reqs: int  # real requests
    num_rows: int  # rows in the tensors (more than num_reqs when padded for a CUDA graph)
    num_tokens: int
    tokens_may_be_padded: bool
    max_query_len: int | None  # 1: every row is a decode row
    max_seq_len: int | None
    seq_lens: torch.Tensor | None
    query_start_loc: torch.Tensor | None
    query_start_loc_cpu: torch.Tensor | None
    seq_lens_cpu_upper_bound: torch.Tensor | None
    slot_groups: list[SlotGroup] = field(default_factory=list)
    metadata: Any = None  # the metadata object itself, whose memo caches are checked
    dcp_local_seq_lens: torch.Tensor | None = None
    dcp: DcpFacts | None = None


@dataclass
class _Cond:
    invariant: str
    field: str
    ok: torch.Tensor  # bool, one per element (computed on the tensors' device, no sync)
    relation: str  # "max_seq_len >= seq_lens[row]": what must hold, for the message
    # element index -> (request row, {value name: value}); reads kept tensors, on failure only
    values: Callable[[int], tuple[int, dict[str, Any]]]
    row_label: str = "request row"  # what an element is: a memo over tokens has token rows


def _head(t: torch.Tensor, k: int) -> torch.Tensor:
    # Every tensor op costs a dispatch (microseconds on CPU, a launch on a GPU): skip no-ops.
    return t if t.shape[0] == k else t[:k]


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t if t.device == device else t.to(device, non_blocking=True)


def _conditions(md: StepMetadata, keep: Callable[[torch.Tensor], torch.Tensor]) -> list[_Cond]:
    """keep(t): a tensor the report may read later (a copy when the read-back is deferred:
    vLLM overwrites its persistent buffers by then)."""
    conds: list[_Cond] = []
    n = md.num_reqs
    seq = _head(md.seq_lens, n) if md.seq_lens is not None else None
    if seq is not None and md.max_seq_len is not None and n > 0:
        m, seq_k = md.max_seq_len, keep(seq)
        conds.append(_Cond("max-seq-len", "max_seq_len", seq <= m, "max_seq_len >= seq_lens[row]",
                           lambda i: (i, {"max_seq_len": m, "seq_lens[row]": int(seq_k[i])})))
    for name, qsl in (("query_start_loc", md.query_start_loc), ("query_start_loc_cpu", md.query_start_loc_cpu)):
        if qsl is None or qsl.dim() != 1 or qsl.numel() < n + 1:
            continue
        rows = min(md.num_rows, qsl.numel() - 1)
        q = _head(qsl, rows + 1)
        q_k = keep(q)
        if rows > 0:
            conds.append(_Cond("query-start-loc", name, q[1:] >= q[:-1], f"{name}[row+1] >= {name}[row]",
                               lambda i, q_k=q_k, name=name: (i, {f"{name}[row]": int(q_k[i]),
                                                                 f"{name}[row+1]": int(q_k[i + 1])})))
        end, tokens = q[n : n + 1], md.num_tokens
        padded = md.tokens_may_be_padded
        conds.append(_Cond("query-start-loc", name, end <= tokens if padded else end == tokens,
                           f"{name}[num_reqs] {'<=' if padded else '=='} num_actual_tokens",
                           lambda i, q_k=q_k, name=name, tokens=tokens: (
                               n, {f"{name}[num_reqs]": int(q_k[n]), "num_actual_tokens": tokens})))
    ub = md.seq_lens_cpu_upper_bound
    if ub is not None and seq is not None and ub.numel() >= n and n > 0:
        # non_blocking: no host sync; a pageable source is staged before the call returns.
        ub_dev = _on(_head(ub, n), seq.device)
        seq_k = keep(seq)
        conds.append(_Cond("seq-lens-upper-bound", "seq_lens_cpu_upper_bound", ub_dev >= seq,
                           "seq_lens_cpu_upper_bound[row] >= seq_lens[row]",
                           lambda i: (i, {"seq_lens_cpu_upper_bound[row]": int(ub_dev[i]),
                                          "seq_lens[row]": int(seq_k[i])})))
    for g in md.slot_groups:
        cond = _slot_condition(md, g)
        if cond is not None:
            conds.append(cond)
    dcp = _dcp_condition(md, seq, keep)
    if dcp is not None:
        conds.append(dcp)
    conds += _memo_conditions(md, keep)
    return conds


def _memo_conditions(md: StepMetadata, keep: Callable[[torch.Tensor], torch.Tensor]) -> list[_Cond]:
    obj = md.metadata
    if obj is None:
        return []
    held = memos.set_memos(obj)
    if not held:
        return []  # the usual case: a getattr per memo
    rows = md.num_tokens
    qcpu = md.query_start_loc_cpu
    if qcpu is not None and qcpu.dim() == 1 and qcpu.numel():
        rows = max(rows, int(qcpu[-1]))
    fresh = memos.recompute(obj, held, rows)
    conds = []
    for m in held:
        if m.field not in fresh:
            continue
        cond = _memo_condition(m, getattr(obj, m.field), fresh[m.field], keep)
        if cond is not None:
            conds.append(cond)
    return conds


def _memo_condition(m: memos.Memo, old: Any, new: Any, keep: Callable[[torch.Tensor], torch.Tensor]) -> _Cond | None:
    source = ", ".join(m.reads) or "the other fields"
    relation = f"memo {m.field} == {m.method}() recomputed from {source}"
    values_of = {"memo": m.field, "method": m.method}
    if not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor):
        same = bool(old == new) if isinstance(old, (int, float, bool, str, tuple)) else True
        return _Cond("memo-cache", m.field, torch.tensor([same]), relation,
                     lambda i: (0, {**values_of, m.field: old, "recomputed": new}), row_label="row")
    rows = new.shape[0] if new.dim() else 1
    if old.dim() != new.dim() or old.shape[1:] != new.shape[1:] or (new.dim() and old.shape[0] < rows):
        # the memo cannot even cover the current layout (vLLM's own assertion would fail)
        return _Cond("memo-cache", m.field, torch.zeros(1, dtype=torch.bool, device=new.device),
                     f"memo {m.field} covers the {rows} rows {m.method}() needs",
                     lambda i: (0, {**values_of, "memo_shape": list(old.shape), "recomputed_shape": list(new.shape)}),
                     row_label="row")
    have = _head(old, rows) if new.dim() else old
    want = _on(new, have.device)
    ok = (have == want).reshape(rows, -1).all(1) if new.dim() else (have == want).reshape(1)
    have_k, want_k = keep(have), keep(want)
    return _Cond("memo-cache", m.field, ok, relation,
                 lambda i: (i, {**values_of, f"{m.field}[row]": _row(have_k, i), "recomputed[row]": _row(want_k, i)}),
                 row_label="row")


def _row(t: torch.Tensor, i: int) -> Any:
    return t[i].tolist() if t.dim() else t.tolist()


_dcp_fn: list[Any] = []


def _get_dcp_local_seq_lens() -> Any:
    """vLLM's own function (vllm.v1.attention.backends.utils), looked up once."""
    if not _dcp_fn:
        try:
            from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens
        except Exception:  # noqa: BLE001 - a vLLM without it: nothing to compare with
            get_dcp_local_seq_lens = None
        _dcp_fn.append(get_dcp_local_seq_lens)
    return _dcp_fn[0]


def _dcp_condition(md: StepMetadata, seq: torch.Tensor | None, keep: Callable[[torch.Tensor], torch.Tensor]) -> _Cond | None:
    local, facts, n = md.dcp_local_seq_lens, md.dcp, md.num_reqs
    if local is None or facts is None or facts.size <= 1 or seq is None or n == 0 or local.numel() < n:
        return None
    fn = _get_dcp_local_seq_lens()
    if fn is None:
        return None
    want = fn(seq, facts.size, facts.rank, facts.interleave)
    have = _on(_head(local, n), want.device)
    ok = have == want
    ub = md.seq_lens_cpu_upper_bound
    relation = f"dcp_local_seq_lens[row] == get_dcp_local_seq_lens(seq_lens, {facts.size}, {facts.rank}, {facts.interleave})[row]"
    if ub is not None and ub.numel() >= n:
        # vLLM's V1 model runner computes the target's local lengths from the optimistic CPU
        # lengths (the upper bound): either is the local length of a layout that exists.
        ok |= have == fn(_on(_head(ub, n), want.device), facts.size, facts.rank, facts.interleave)
        relation += " (or of seq_lens_cpu_upper_bound)"
    have_k, want_k, seq_k = keep(have), keep(want), keep(seq)
    return _Cond("dcp-local-seq-lens", "dcp_local_seq_lens", ok, relation,
                 lambda i: (i, {"dcp_local_seq_lens[row]": int(have_k[i]), "expected[row]": int(want_k[i]),
                                "seq_lens[row]": int(seq_k[i]), "dcp_size": facts.size, "dcp_rank": facts.rank,
                                "cp_kv_cache_interleave_size": facts.interleave}))


def _slot_condition(md: StepMetadata, g: SlotGroup) -> _Cond | None:
    n, qsl, bs = md.num_reqs, md.query_start_loc, g.block_size
    table = g.block_table
    if (qsl is None or n == 0 or bs <= 0 or g.slot_mapping.numel() == 0 or g.positions.numel() == 0
            or table.dim() != 2 or table.shape[0] < n or table.shape[1] == 0):
        return None
    dev = g.slot_mapping.device
    q = _on(_head(qsl, n + 1), dev)
    last_token = min(g.slot_mapping.numel(), g.positions.numel()) - 1
    tok = q[:-1].clamp(0, last_token).long()
    pos = _on(g.positions, dev)[tok]
    slot = g.slot_mapping[tok]
    blocks = pos // bs
    block_id = _on(_head(table, n), dev).gather(1, blocks.clamp(0, table.shape[1] - 1).unsqueeze(1)).squeeze(1)
    expected = block_id * bs + pos % bs
    ok = (slot == expected) & (blocks < table.shape[1])
    ok |= slot == PAD_SLOT_ID
    if md.max_query_len != 1:  # not every row is a decode row: the others are not checked
        ok |= (q[1:] - q[:-1]) != 1
    label = f"slot_mapping{' (' + g.name + ')' if g.name else ''}"
    rule = f"block_table[row, pos // {bs}] * {bs} + pos % {bs}"
    return _Cond("slot-mapping", label, ok, f"slot_mapping[t] == {rule}",
                 lambda i: (i, {"slot_mapping[t]": int(slot[i]), rule: int(expected[i]), "token": int(tok[i]),
                                "position": int(pos[i])}))


def check(md: StepMetadata, site: str) -> None:
    """Evaluate (on CPU, or in eager mode) or queue every condition of this step."""
    if deferred.capturing():
        return
    probe = md.seq_lens if md.seq_lens is not None else md.query_start_loc
    now = probe is None or deferred.immediate(probe)
    conds = _conditions(md, (lambda t: t) if now else (lambda t: t.clone()))
    by_device: dict[torch.device, list[_Cond]] = {}
    for c in conds:
        by_device.setdefault(c.ok.device, []).append(c)
    for group in by_device.values():
        # One vector for all conditions: one reduction (or one read-back) per step, and the
        # failing conditions found from its slices only when something failed.
        flags = torch.cat([c.ok if c.ok.dim() == 1 else c.ok.reshape(-1) for c in group])
        if now:
            if not bool(flags.all()):
                _report(md, [c for c in group if not bool(c.ok.all())], site)
            continue
        bounds, start = [], 0
        for c in group:
            bounds.append((start, start + c.ok.numel()))
            start += c.ok.numel()

        def on_failed(indices: list[int], group=group, bounds=bounds) -> None:
            failed = {next(k for k, (lo, hi) in enumerate(bounds) if lo <= i < hi) for i in indices}
            _report(md, [group[k] for k in sorted(failed)], site)

        _queue.submit(flags, on_failed)


def _report(md: StepMetadata, failed: list[_Cond], site: str) -> None:
    for c in failed:
        bad = (~c.ok).nonzero().flatten()
        row, values = c.values(int(bad[0]) if bad.numel() else 0)
        step = "?" if md.draft_step is None else md.draft_step
        shown = ", ".join(f"{k} = {v}" for k, v in values.items())
        runtime.violation(
            G, c.invariant,
            f"{md.owner} draft step {step}, {c.row_label} {row}: {c.relation} does not hold ({shown}; "
            f"{int(bad.numel())} of {c.ok.numel()} rows)",
            {"field": c.field, "draft_step": md.draft_step, "row": row, **values, "bad_rows": int(bad.numel()),
             "num_reqs": md.num_reqs, "num_actual_tokens": md.num_tokens, "owner": md.owner},
            site=site)


# ---------------------------------------------------------------------------- v1 proposer


def _v1_positions(proposer: Any) -> torch.Tensor | None:
    # The buffer the draft model's positions are read from (`_get_positions`); M-RoPE keeps the
    # text position in row 0.
    if getattr(proposer, "uses_mrope", False):
        mrope = getattr(proposer, "mrope_positions", None)
        return mrope[0] if isinstance(mrope, torch.Tensor) else None
    pos = getattr(proposer, "positions", None)
    return pos if isinstance(pos, torch.Tensor) else None


def v1_step(proposer: Any, cad: Any, draft_index: int) -> StepMetadata:
    seq = getattr(cad, "seq_lens", None)
    qsl = getattr(cad, "query_start_loc", None)
    num_reqs = int(getattr(cad, "num_reqs", 0) or (seq.shape[0] if isinstance(seq, torch.Tensor) else 0))
    groups = []
    positions = _v1_positions(proposer)
    slot = getattr(cad, "slot_mapping", None)
    table = getattr(cad, "block_table_tensor", None)
    block_size = getattr(proposer, "block_size", -1)
    dcp_local = _tensor(getattr(cad, "dcp_local_seq_lens", None))
    if (positions is not None and isinstance(slot, torch.Tensor) and isinstance(table, torch.Tensor)
            and table.dim() == 2 and isinstance(block_size, int) and block_size > 0
            and dcp_local is None):
        groups.append(SlotGroup(slot, table, block_size, positions))
    return StepMetadata(
        owner=type(proposer).__qualname__,
        draft_step=draft_index,
        num_reqs=num_reqs,
        num_rows=num_reqs,
        num_tokens=int(getattr(cad, "num_actual_tokens", 0)),
        max_query_len=_int(getattr(cad, "max_query_len", None)),
        # Step 0 may use the target's metadata as is, whose token count vLLM pads for CUDA graphs;
        # the draft steps set num_actual_tokens to the batch size themselves.
        tokens_may_be_padded=draft_index == 0,
        max_seq_len=getattr(cad, "max_seq_len", None),
        seq_lens=seq if isinstance(seq, torch.Tensor) else None,
        query_start_loc=qsl if isinstance(qsl, torch.Tensor) else None,
        query_start_loc_cpu=_tensor(getattr(cad, "query_start_loc_cpu", None)),
        seq_lens_cpu_upper_bound=_tensor(getattr(cad, "seq_lens_cpu_upper_bound", None)),
        slot_groups=groups,
        metadata=cad,
        dcp_local_seq_lens=dcp_local,
        dcp=_v1_dcp(proposer) if dcp_local is not None else None,
    )


def _v1_dcp(proposer: Any) -> DcpFacts | None:
    """The DCP size, rank and interleave the draft's attention runs with: what its metadata
    builders recorded (vLLM's builders keep `dcp_world_size`, most `dcp_rank`; 1 for a replicated
    draft cache), the rest from vLLM's DCP group and the proposer's parallel config, as vLLM
    reads them. None when something is unknown: nothing is guessed."""
    parallel = getattr(getattr(proposer, "vllm_config", None), "parallel_config", None)
    size = rank = interleave = None
    for group in getattr(proposer, "draft_attn_groups", None) or ():
        for builder in getattr(group, "metadata_builders", None) or ():
            size = _int(getattr(builder, "dcp_world_size", None))
            if size is not None:
                rank = _int(getattr(builder, "dcp_rank", None))
                interleave = next((v for v in (_int(getattr(builder, a, None)) for a in _INTERLEAVE) if v), None)
                break
        if size is not None:
            break
    if size is None and parallel is not None:
        size = _int(getattr(parallel, "decode_context_parallel_size", None))
    state = sys.modules.get("vllm.distributed.parallel_state")
    group = getattr(state, "_DCP", None)  # what get_dcp_group() returns once initialised
    if size is None:
        size = _int(getattr(group, "world_size", None))
    if size is None or size <= 1:
        return None
    if rank is None:
        rank = _int(getattr(group, "rank_in_group", None))
    if interleave is None:
        interleave = _int(getattr(parallel, "cp_kv_cache_interleave_size", None))
    if rank is None or interleave is None or interleave <= 0:
        return None
    return DcpFacts(size, rank, interleave)


# where vLLM's builders keep the interleave (flash-attn and MLA; FlashInfer)
_INTERLEAVE = ("cp_kv_cache_interleave_size", "dcp_kv_cache_interleave_size")


def _tensor(value: Any) -> torch.Tensor | None:
    return value if isinstance(value, torch.Tensor) else None


STEP0_MAX_SEQ_LEN = "_invariant_check_step0_max_seq_len"


def _stale_max_seq_len(proposer: Any, cad: Any, draft_index: int) -> None:
    """Fault: the 0.13/0.14 draft loop, where seq_lens advanced and max_seq_len did not."""
    if draft_index == 0:
        setattr(proposer, STEP0_MAX_SEQ_LEN, getattr(cad, "max_seq_len", None))
        return
    stale = getattr(proposer, STEP0_MAX_SEQ_LEN, None)
    if stale is not None:
        cad.max_seq_len = stale


def wrap_v1_build(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    site = site_name(cls, "build_per_group_and_layer_attn_metadata")

    def build_per_group_and_layer_attn_metadata(self, common_attn_metadata, draft_index: int = 0, *args, **kwargs):
        if common_attn_metadata is not None:
            if "stale-max-seq-len" in faults.active():
                _stale_max_seq_len(self, common_attn_metadata, int(draft_index))
            runtime.run_check(G, site, lambda: check(v1_step(self, common_attn_metadata, int(draft_index)), site))
        return orig(self, common_attn_metadata, draft_index, *args, **kwargs)

    return build_per_group_and_layer_attn_metadata


def wrap_propose(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    site = site_name(cls, "propose")

    def propose(self, *args, **kwargs):
        if len(_queue):
            runtime.run_check(G, site, flush)  # vLLM synchronised since the last proposal
        return orig(self, *args, **kwargs)

    return propose


# ---------------------------------------------------------------------------- model runner v2


@dataclass
class _V2Context:
    speculator: Any
    num_reqs: int | None
    step: int | None
    full_graph: bool


_v2_context: contextvars.ContextVar[_V2Context | None] = contextvars.ContextVar("ic_v2_build", default=None)


def wrap_v2_build_context(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    """The speculator's own metadata method knows what build_attn_metadata is not told: the real
    request count (before CUDA-graph padding), the draft step, the graph mode."""
    try:
        sig: inspect.Signature | None = inspect.signature(orig)
    except (TypeError, ValueError):
        sig = None

    def build(self, *args, **kwargs):
        ctx = None
        if sig is not None:
            try:
                bound = sig.bind(self, *args, **kwargs).arguments
                cg_mode = getattr(bound.get("batch_desc"), "cg_mode", None)
                ctx = _V2Context(self, _int(bound.get("num_reqs")), _int(bound.get("step")),
                                 getattr(cg_mode, "name", None) == "FULL")
            except TypeError:
                ctx = None
        token = _v2_context.set(ctx)
        try:
            return orig(self, *args, **kwargs)
        finally:
            _v2_context.reset(token)

    return build


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def v2_step(bound: dict[str, Any], ctx: _V2Context | None) -> StepMetadata | None:
    if bound.get("for_cudagraph_capture"):
        return None
    rows = _int(bound.get("num_reqs"))
    num_tokens = _int(bound.get("num_tokens"))
    if rows is None or num_tokens is None:
        return None
    real = ctx.num_reqs if ctx is not None and ctx.num_reqs is not None else rows
    padded = ctx is None or ctx.num_reqs is None or ctx.full_graph or rows != real
    seq = _tensor(bound.get("seq_lens"))
    qsl = _tensor(bound.get("query_start_loc_gpu"))
    groups: list[SlotGroup] = []
    positions = _tensor(bound.get("positions"))
    spec = ctx.speculator if ctx is not None else None
    tables = getattr(spec, "block_tables", None)
    block_sizes = getattr(tables, "block_sizes", None)
    if positions is not None and isinstance(block_sizes, (list, tuple)) and getattr(tables, "cp_size", 1) == 1:
        slots = bound.get("slot_mappings")
        block_tables = bound.get("block_tables") or []
        for i, (bt, bs) in enumerate(zip(block_tables, block_sizes)):
            if slots is None or i >= len(slots) or not isinstance(bt, torch.Tensor) or not isinstance(bs, int):
                continue
            groups.append(SlotGroup(slots[i], bt, bs, positions, f"group {i}" if len(block_sizes) > 1 else ""))
    return StepMetadata(
        owner=type(spec).__qualname__ if spec is not None else "speculator",
        draft_step=ctx.step if ctx is not None else None,
        num_reqs=real,
        num_rows=rows,
        num_tokens=num_tokens,
        tokens_may_be_padded=padded,
        max_query_len=_int(bound.get("max_query_len")),
        max_seq_len=_int(bound.get("max_seq_len")),
        seq_lens=seq,
        query_start_loc=qsl,
        query_start_loc_cpu=_tensor(bound.get("query_start_loc_cpu")),
        seq_lens_cpu_upper_bound=_tensor(bound.get("seq_lens_cpu_upper_bound")),
        slot_groups=groups,
        dcp_local_seq_lens=_tensor(bound.get("dcp_local_seq_lens")),
        dcp=_v2_dcp(spec, tables),
    )


def _v2_dcp(spec: Any, tables: Any) -> DcpFacts | None:
    # what the speculator itself passes to prepare_dcp_local_seq_lens (0.32+)
    size = _int(getattr(spec, "dcp_size", None))
    rank, step = _int(getattr(tables, "cp_rank", None)), _int(getattr(tables, "cp_interleave", None))
    if size is None or size <= 1 or rank is None or step is None or step <= 0:
        return None
    return DcpFacts(size, rank, step)


def wrap_v2_build_attn_metadata(orig: Callable[..., Any], module: Any) -> Callable[..., Any]:
    site = site_name(module, "build_attn_metadata")
    sig = inspect.signature(orig)

    def build_attn_metadata(*args, **kwargs):
        def run() -> None:
            md = v2_step(sig.bind(*args, **kwargs).arguments, _v2_context.get())
            if md is not None:
                check(md, site)

        runtime.run_check(G, site, run)
        return orig(*args, **kwargs)

    return build_attn_metadata


def check_pad_tail(speculator: Any, num_reqs: int, dummy_run: bool, site: str) -> None:
    idx = getattr(speculator, "idx_mapping", None)
    if not isinstance(idx, torch.Tensor) or idx.dim() != 1 or deferred.capturing():
        return
    start = 0 if dummy_run else num_reqs
    tail = idx[start:]
    if tail.numel() == 0:
        return
    owner = type(speculator).__qualname__
    ok = tail == -1
    tail = tail.clone()

    def report(_failed: list[int]) -> None:
        bad = (~ok).nonzero().flatten()
        i = int(bad[0]) if bad.numel() else 0
        row = start + i
        runtime.violation(
            G, "pad-tail",
            f"{owner}: idx_mapping[{row}] = {int(tail[i])} past the {num_reqs} real requests "
            f"({int(bad.numel())} of {tail.numel()} padded rows); padded rows must hold -1, or the "
            "draft step samples into and writes the KV cache of a stale request slot",
            {"field": "idx_mapping", "draft_step": None, "row": row, "idx_mapping[row]": int(tail[i]),
             "expected": -1, "num_reqs": num_reqs, "rows": int(idx.numel()), "dummy_run": dummy_run,
             "owner": owner},
            site=site)

    _queue.submit(ok.all().reshape(1), report)


def wrap_copy_request_inputs(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    site = site_name(cls, "_copy_request_inputs")
    sig = inspect.signature(orig)
    # Since vLLM marks padded rows for slot mapping too (a `dummy_run` parameter came with it),
    # every padded row must hold -1; before (0.25) only where draft logits are kept.
    always = "dummy_run" in sig.parameters

    def _copy_request_inputs(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)

        def run() -> None:
            bound = sig.bind(self, *args, **kwargs).arguments
            num_reqs = _int(bound.get("num_reqs"))
            if num_reqs is None:
                return
            if always or getattr(self, "draft_logits", None) is not None:
                check_pad_tail(self, num_reqs, bool(bound.get("dummy_run", False)), site)

        runtime.run_check(G, site, run)
        return result

    return _copy_request_inputs
