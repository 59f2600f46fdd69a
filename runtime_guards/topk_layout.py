"""Guard `topk-layout`: the shared top-k index buffer of MTP index sharing.

Step 0 of a proposal runs the indexer on a multi-token batch and leaves one row per query token
in the buffer ("per-token" layout). Steps 1+ run with `skip_topk` on and read one row per
request, so the rows must first be gathered to the front (`compact_topk_indices`, "per-request"
layout). A reuse-mode forward while the layout is per-token is the vLLM 0.23/0.24 bug.

Tensor checks are device-agnostic. On CPU they are evaluated at once. On an accelerator the
comparisons stay on the device and are read back at the start of the next proposal, where vLLM
has already synchronised; while a CUDA graph is being captured no value is read at all.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from invariant_check.compaction.modules import find_topk_holders, read_buffers

from . import deferred, faults, runtime
from .config import TOPK_LAYOUT
from .targets import site_name

G = TOPK_LAYOUT


@dataclass
class _Deferred:
    flags: torch.Tensor  # bool, one per condition, computed on the device
    labels: list[str]
    invariant: str
    message: str
    values: dict[str, Any]
    detail: Callable[[], dict[str, Any]] | None = None


@dataclass
class LayoutState:
    model_class: str
    skip: bool | None = None
    layout: str = "unknown"  # "per-token" | "per-request" | "unknown"
    step: int = -1  # draft step of the last forward in this proposal
    tokens: int | None = None  # query tokens of step 0
    requests: int | None = None
    query_start_loc: torch.Tensor | None = None
    compactions: int = 0
    reported_order: bool = False
    proposals: int = 0
    capturing: bool = False  # set by the v2 speculator's capture()
    hint_requests: int | None = None  # num_reqs passed to the v2 speculator hooks
    pending: deferred.Queue = field(default_factory=deferred.Queue)
    buffers: list[tuple[str, torch.Tensor]] | None = None


_states: weakref.WeakKeyDictionary[Any, LayoutState] = weakref.WeakKeyDictionary()


def state_for(model: Any) -> LayoutState:
    st = _states.get(model)
    if st is None:
        st = LayoutState(model_class=type(model).__qualname__)
        _states[model] = st
    return st


def reset_states() -> None:
    _states.clear()


# ---------------------------------------------------------------------------- helpers


def find_holders(model: Any) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of every holder of a top-k buffer under the model (the compaction's finder)."""
    out = []
    for h in find_topk_holders(model):
        t = h.tensor()
        if t is not None:
            out.append((h.name, t))
    return out


def distinct_buffers(model: Any) -> list[tuple[str, torch.Tensor]]:
    """The buffers the indexer writes and attention reads: exactly what the compaction gathers."""
    return read_buffers(find_topk_holders(model))


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - meta/fake tensors
        ptr = id(t)
    return (str(t.device), ptr)


def _layer_key(path: str) -> str:
    parts = path.split(".")
    for i, p in enumerate(parts[:-1]):
        if p == "layers" and i + 1 < len(parts):
            return ".".join(parts[: i + 2])
    return ""


def check_holders(model: Any, site: str) -> None:
    """Within each MTP layer, every holder that is read must share one storage; layout-only
    holders must match it in device, dtype and width."""
    # The v2 runner repoints the readers at the target's buffer and leaves the sparse-index
    # group's layout-only holder on the draft's own, which is fine; a different device, dtype or
    # width would not be.
    groups: dict[str, list[tuple[str, torch.Tensor, bool]]] = {}
    for h in find_topk_holders(model):
        t = h.tensor()
        if t is not None:
            groups.setdefault(_layer_key(h.name), []).append((h.name, t, h.read))
    for layer, entries in groups.items():
        holders = [(p, t) for p, t, _ in entries]
        read = [(p, t) for p, t, r in entries if r]
        layout_only = [(p, t) for p, t, r in entries if not r]
        desc = {p: {"data_ptr": _storage_key(t)[1], "shape": list(t.shape), "dtype": str(t.dtype),
                    "device": str(t.device)} for p, t in holders}
        storages = {_storage_key(t) for _, t in read}
        if len(storages) > 1:
            runtime.violation(
                G, "holders-share-storage",
                f"{type(model).__qualname__}: the holders of the top-k index buffer in "
                f"{layer or 'the draft model'} point at {len(storages)} different storages; the "
                "indexer would write one buffer and the sparse attention read another",
                {"layer": layer, "holders": desc},
                site=site,
            )
        if read:
            ref = read[0][1]
            bad = [p for p, t in layout_only
                   if t.device != ref.device or t.dtype != ref.dtype or t.shape[1:] != ref.shape[1:]]
            if bad:
                runtime.violation(
                    G, "holders-share-storage",
                    f"{type(model).__qualname__}: {', '.join(bad)} in {layer or 'the draft model'} "
                    f"does not match the top-k buffer's device/dtype/width ({ref.device}, {ref.dtype}, "
                    f"{list(ref.shape[1:])})",
                    {"layer": layer, "holders": desc},
                    site=site,
                )
    st = _states.get(model)
    if st is not None:
        st.buffers = None


def _num_tokens(args: tuple, kwargs: dict) -> int | None:
    for key in ("input_ids", "positions", "inputs_embeds"):
        t = kwargs.get(key)
        if isinstance(t, torch.Tensor):
            return int(t.shape[-1] if key == "positions" and t.dim() == 2 else t.shape[0])
    for t in args[:2]:
        if isinstance(t, torch.Tensor):
            return int(t.shape[0] if t.dim() == 1 else t.shape[-1])
    return None


def _query_start_loc() -> torch.Tensor | None:
    fc = sys.modules.get("vllm.forward_context")
    if fc is None:
        return None
    try:
        if hasattr(fc, "is_forward_context_available") and not fc.is_forward_context_available():
            return None
        md = fc.get_forward_context().attn_metadata
    except Exception:  # noqa: BLE001 - no forward context (dummy runs, unit tests)
        return None
    items = md.values() if isinstance(md, dict) else (md if isinstance(md, list) else [md])
    for m in items:
        if isinstance(m, dict):
            m = next(iter(m.values()), None)
        qsl = getattr(m, "query_start_loc", None)
        if isinstance(qsl, torch.Tensor) and qsl.dim() == 1 and qsl.numel() >= 2:
            return qsl
    return None


def _report_or_defer(st: LayoutState, d: _Deferred, site: str) -> None:
    st.pending.submit(d.flags, lambda failed_idx: _report(d, [d.labels[i] for i in failed_idx], site))


def _report(d: _Deferred, failed: list[str], site: str) -> None:
    if failed:
        values = dict(d.values)
        values["failed_conditions"] = failed
        if d.detail is not None:
            try:
                values.update(d.detail())
            except Exception:  # noqa: BLE001 - the detail is a courtesy, the verdict stands
                pass
        runtime.violation(G, d.invariant, f"{d.message}: {', '.join(failed)}", values, site=site)


def flush(model: Any, site: str = "flush") -> None:
    """Read back deferred device checks (called where vLLM has already synchronised)."""
    st = _states.get(model)
    if st is not None:
        st.pending.flush()


# ---------------------------------------------------------------------------- events


def on_set_skip(model: Any, skip: bool, site: str) -> None:
    st = state_for(model)
    if not skip:
        flush(model, site)
        # Order alone, for when forwards are not observable (compiled draft models): a proposal
        # that switched to reuse mode without a single compaction read per-token rows.
        if st.skip is True and st.compactions == 0 and not st.reported_order and st.step == -1:
            runtime.violation(
                G, "reuse-before-compaction",
                f"{st.model_class}: proposal {st.proposals} switched to reuse mode (set_skip_topk(True)) "
                "and ended without compact_topk_indices; its reuse steps read per-token rows",
                {"model_class": st.model_class, "proposal": st.proposals, "tokens": st.tokens},
                site=site,
            )
        st.proposals += 1
        st.step = -1
        st.compactions = 0
        st.reported_order = False
        # A graph-replayed step 0 shows no forward: never compare against the last proposal's batch.
        st.query_start_loc = None
        st.requests = None
    st.skip = skip


def on_forward(model: Any, args: tuple, kwargs: dict, site: str) -> None:
    st = state_for(model)
    if st.skip is None:
        return  # index sharing is not in use for this model
    n = _num_tokens(args, kwargs)
    st.step += 1
    if not st.skip:
        qsl = _query_start_loc()
        st.query_start_loc = qsl
        st.requests = int(qsl.numel() - 1) if qsl is not None else st.hint_requests
        st.tokens = n
        if n is None:
            st.layout = "unknown"
        elif st.requests is not None:
            st.layout = "per-token" if n > st.requests else "per-request"
        else:
            st.layout = "per-token" if n > 1 else "per-request"
        return
    if st.layout == "per-token" and not st.reported_order:
        st.reported_order = True
        runtime.violation(
            G, "reuse-before-compaction",
            f"{st.model_class}: draft step {st.step} runs in reuse mode (skip_topk on) and reads one "
            f"top-k row per request ({n} requests/rows), but the shared buffer still holds one row "
            f"per query token of step 0 ({st.tokens} tokens"
            + (f", {st.requests} requests" if st.requests is not None else "")
            + "): compact_topk_indices(token_indices_to_sample) was not called after step 0",
            {"model_class": st.model_class, "step": st.step, "num_tokens": st.tokens,
             "num_requests": st.requests, "reuse_batch": n, "proposal": st.proposals},
            site=site,
        )


@dataclass
class _CompactCtx:
    ids: torch.Tensor
    n: int
    snapshots: list[tuple[str, torch.Tensor, torch.Tensor]]
    check_values: bool


def before_compact(model: Any, slot_ids: Any, site: str) -> _CompactCtx | None:
    st = state_for(model)
    cls = st.model_class
    if not isinstance(slot_ids, torch.Tensor):
        runtime.violation(G, "compaction-input", f"{cls}: compact_topk_indices got {type(slot_ids).__name__}, not a tensor",
                          {"type": type(slot_ids).__name__}, site=site)
        return None
    shape_problems = []
    if slot_ids.dim() != 1:
        shape_problems.append(f"slot ids must be 1-D, got shape {list(slot_ids.shape)}")
    if slot_ids.dtype.is_floating_point or slot_ids.dtype == torch.bool or slot_ids.is_complex():
        shape_problems.append(f"slot ids must be integers, got {slot_ids.dtype}")
    n = int(slot_ids.numel())
    if st.requests is not None and n != st.requests and not st.capturing:
        shape_problems.append(f"{n} slot ids for {st.requests} requests")
    if st.buffers is None:
        st.buffers = distinct_buffers(model)
    rows = min((int(b.shape[0]) for _, b in st.buffers), default=None)
    if rows is not None and n > rows:
        shape_problems.append(f"{n} slot ids but the buffer has only {rows} rows")
    if st.compactions >= 1 and st.layout == "per-request":
        runtime.violation(
            G, "compacted-twice",
            f"{cls}: compact_topk_indices called again in proposal {st.proposals} on a buffer that is "
            "already compacted; a second gather reads rows of the compacted layout and corrupts it",
            {"model_class": cls, "proposal": st.proposals, "compactions": st.compactions + 1}, site=site)
    if shape_problems:
        runtime.violation(G, "compaction-input", f"{cls}: bad compaction input: " + "; ".join(shape_problems),
                          {"model_class": cls, "shape": list(slot_ids.shape), "dtype": str(slot_ids.dtype),
                           "num_requests": st.requests, "buffer_rows": rows}, site=site)
        return None
    check_values = not (st.capturing or deferred.capturing())
    # A copy: v2 passes a view of a persistent buffer that the next step overwrites, and the
    # deferred report reads these ids later.
    ids = slot_ids.detach().to(torch.long, copy=True)
    if check_values and n > 0:
        labels = ["slot ids >= 0", "slot_ids[i] >= i", "slot ids strictly increasing"]
        arange = torch.arange(n, device=ids.device)
        conds = [ids.min() >= 0, (ids >= arange).all(),
                 (ids[1:] > ids[:-1]).all() if n > 1 else torch.ones((), dtype=torch.bool, device=ids.device)]
        if rows is not None:
            labels.append(f"max slot id < buffer rows ({rows})")
            conds.append(ids.max() < rows)
        qsl = st.query_start_loc
        if qsl is not None and qsl.numel() - 1 == n and qsl.device == ids.device:
            q = qsl.detach().long()
            labels.append("each slot id inside its own request's query range")
            conds.append(((ids >= q[:-1]) & (ids < q[1:])).all())
        flags = torch.stack([c.reshape(()) for c in conds])

        def detail(ids=ids, qsl=qsl) -> dict[str, Any]:
            d = {"slot_ids": ids[:64].tolist()}
            if qsl is not None:
                d["query_start_loc"] = qsl[:65].tolist()
            return d

        _report_or_defer(st, _Deferred(flags, labels, "compaction-input",
                                       f"{cls}: compact_topk_indices slot ids ({n} requests) violate",
                                       {"model_class": cls, "num_requests": n, "num_tokens": st.tokens,
                                        "buffer_rows": rows, "step": st.step}, detail), site)
    snapshots = []
    if check_values and n > 0 and st.buffers:
        for path, buf in st.buffers:
            safe = ids.clamp(0, int(buf.shape[0]) - 1)  # an out-of-range gather would kill a CUDA context
            snapshots.append((path, buf, buf.index_select(0, safe).clone()))
    return _CompactCtx(ids, n, snapshots, check_values)


def after_compact(model: Any, ctx: _CompactCtx | None, site: str) -> None:
    st = state_for(model)
    if ctx is not None:
        for path, buf, expected in ctx.snapshots:
            got = buf[: ctx.n]
            flags = (got == expected).all().reshape(1)

            def detail(got=got, expected=expected) -> dict[str, Any]:
                bad = (got != expected).any(dim=1).nonzero().flatten()[:16].tolist()
                return {"wrong_rows": bad}

            _report_or_defer(st, _Deferred(
                flags, [f"buffer {path} rows [0, {ctx.n}) equal the rows that were at slot_ids"],
                "compaction-result",
                f"{st.model_class}: compaction result wrong for {path} (shape {list(buf.shape)})",
                {"model_class": st.model_class, "buffer": path, "num_requests": ctx.n,
                 "slot_ids": ctx.ids[:64].tolist() if deferred.immediate(ctx.ids) else None}, detail), site)
        st.requests = ctx.n
    st.layout = "per-request"
    st.compactions += 1


# ---------------------------------------------------------------------------- wrappers


def wrap_set_skip_topk(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    site = site_name(cls, "set_skip_topk")

    def set_skip_topk(self, skip, *args, **kwargs):
        result = orig(self, skip, *args, **kwargs)
        runtime.run_check(G, site, on_set_skip, self, bool(skip), site)
        return result

    return set_skip_topk


def wrap_forward(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    site = site_name(cls, "forward")

    def forward(self, *args, **kwargs):
        # Under torch.compile the wrapper is traced once; Python-side tracking would not replay.
        if not deferred.compiling():
            runtime.run_check(G, site, on_forward, self, args, kwargs, site)
        return orig(self, *args, **kwargs)

    return forward


def _triton_compaction() -> Callable[..., Any] | None:
    cfg = runtime.config()
    if cfg is None or cfg.compaction != "triton":
        return None
    from invariant_check import compaction

    def swapped(model: Any, slot_ids: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        # vLLM calls compact_topk_indices only with index sharing on: a model with no top-k
        # buffer to gather there is the silent missed compaction, so the swap never passes
        # missing_ok (NoTopkBufferError names the model; INVARIANT_CHECK_COMPACTION=vllm keeps
        # vLLM's own method).
        compaction.compact_topk_indices_(model, slot_ids, missing_ok=False)

    return swapped


def wrap_compact(orig: Callable[..., Any], cls: type, *, check: bool | None = None) -> Callable[..., Any]:
    site = site_name(cls, "compact_topk_indices")
    if check is None:
        # Patched whenever the plugin is on (the Triton swap and the faults work through it);
        # the checks only with this guard on.
        cfg = runtime.config()
        check = cfg is None or cfg.on(G)

    def compact_topk_indices(self, slot_ids, *args, **kwargs):
        active = faults.active()
        if "drop-compaction" in active:
            return None  # fault injection: the call is gone, as in vLLM 0.23/0.24
        if "wrong-slot-ids" in active:
            slot_ids = faults.wrong_slot_ids(slot_ids)
        ctx = runtime.run_check(G, site, before_compact, self, slot_ids, site) if check else None
        impl = _triton_compaction() or orig
        ids = faults.wrong_rows_ids(slot_ids) if "wrong-rows" in active else slot_ids
        result = impl(self, ids, *args, **kwargs)
        if "double-compaction" in active:
            impl(self, ids, *args, **kwargs)
        if check:
            runtime.run_check(G, site, after_compact, self, ctx, site)
        return result

    return compact_topk_indices


def wrap_load_model(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    site = site_name(cls, "load_model")

    def load_model(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)
        model = getattr(self, "model", None)
        if model is not None:
            runtime.run_check(G, site, check_holders, model, site)
        return result

    return load_model


def _inner_model(draft_model: Any) -> Any:
    return getattr(draft_model, "model", draft_model)


def wrap_v2_hook(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    name = orig.__name__
    site = site_name(cls, name)

    if name == "load_draft_model":
        def hook(self, *args, **kwargs):
            result = orig(self, *args, **kwargs)
            if result is not None:
                runtime.run_check(G, site, check_holders, result, site)
            return result
        return hook

    if name == "capture":
        def hook(self, *args, **kwargs):
            # capture() runs compaction with all-zero dummy ids: not a violation.
            st = _speculator_state(self)
            if st is not None:
                st.capturing = True
            try:
                return orig(self, *args, **kwargs)
            finally:
                if st is not None:
                    st.capturing = False
        return hook

    def hook(self, num_reqs=None, *args, **kwargs):
        # The v2 runner may replay the draft prefill as a CUDA graph (no Python forward), so
        # the request count comes from the hook's own argument.
        if isinstance(num_reqs, int):
            st = _speculator_state(self)
            if st is not None:
                st.hint_requests = num_reqs
                if name == "on_prefill_end" and st.skip is False and st.step == -1:
                    st.requests = num_reqs
        return orig(self, num_reqs, *args, **kwargs)

    return hook


def _speculator_state(spec: Any) -> LayoutState | None:
    model = getattr(spec, "model", None)
    inner = getattr(model, "model", None)
    return state_for(inner) if inner is not None else None

