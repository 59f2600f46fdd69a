"""Guard `group-metadata`: the per-group attention metadata of every draft step.

vLLM 0.17-0.19 built one metadata per attention group in a loop and type-checked only the
variable left over from the loop (the last group). The invariant checked here is the complete
one, at every draft step: every group's metadata and every per-layer entry is an instance of the
proposer's allow-list (when more than one token is speculated), every layer of every group has an
entry, and that entry is its own group's metadata.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from typing import Any

from . import faults, runtime
from .config import GROUP_METADATA
from .targets import site_name

G = GROUP_METADATA


def _tname(t: Any) -> str:
    return f"{t.__module__}.{t.__qualname__}" if isinstance(t, type) else repr(t)


def _allowed_names(allowed: tuple | None) -> list[str]:
    return [_tname(t) for t in (allowed or ())]


def _num_spec(proposer: Any) -> int | None:
    n = getattr(proposer, "num_speculative_tokens", None)
    return n if isinstance(n, int) else None


def check_groups(
    proposer: Any,
    groups: Sequence[Any],
    per_group: Sequence[Any] | None,
    per_layer: dict[str, Any],
    draft_index: int,
    allowed: tuple | None,
    site: str,
) -> None:
    cls = type(proposer).__qualname__
    num_spec = _num_spec(proposer)
    check_types = allowed is not None and (num_spec is None or num_spec > 1)
    base = {"proposer": cls, "draft_step": draft_index, "num_speculative_tokens": num_spec,
            "allowed_types": _allowed_names(allowed)}
    if per_group is not None and len(per_group) != len(groups):
        runtime.violation(G, "group-count",
                          f"{cls} draft step {draft_index}: {len(per_group)} group metadata for {len(groups)} attention groups",
                          {**base, "groups": len(groups), "metadata": len(per_group)}, site=site)
    for gi, group in enumerate(groups):
        layers = list(getattr(group, "layer_names", []) or [])
        if per_group is not None and gi < len(per_group):
            md = per_group[gi]
        else:
            md = per_layer.get(layers[0]) if layers else None
        if check_types and md is not None and not isinstance(md, allowed):
            runtime.violation(
                G, "disallowed-type",
                f"{cls} draft step {draft_index}: attention group {gi} of {len(groups)} "
                f"(layers {layers[:4]}{'...' if len(layers) > 4 else ''}) has metadata of type "
                f"{_tname(type(md))}, allowed: {', '.join(_allowed_names(allowed))}",
                {**base, "group": gi, "num_groups": len(groups), "layers": layers,
                 "type_found": _tname(type(md))}, site=site)
        for layer in layers:
            if layer not in per_layer:
                runtime.violation(G, "missing-layer-entry",
                                  f"{cls} draft step {draft_index}: layer {layer!r} of attention group {gi} has no metadata entry",
                                  {**base, "group": gi, "layer": layer}, site=site)
                continue
            entry = per_layer[layer]
            if md is not None and entry is not md:
                runtime.violation(
                    G, "entry-not-own-group",
                    f"{cls} draft step {draft_index}: the entry of layer {layer!r} is not the metadata of "
                    f"its own group {gi} (found {_tname(type(entry))})",
                    {**base, "group": gi, "layer": layer, "type_found": _tname(type(entry))}, site=site)
            if check_types and not isinstance(entry, allowed):
                runtime.violation(
                    G, "disallowed-type",
                    f"{cls} draft step {draft_index}: layer {layer!r} of attention group {gi} has metadata "
                    f"of type {_tname(type(entry))}, allowed: {', '.join(_allowed_names(allowed))}",
                    {**base, "group": gi, "layer": layer, "type_found": _tname(type(entry))}, site=site)


def _inject_bad_group(proposer: Any, groups: list, per_group: list, draft_index: int) -> tuple[list, list, tuple | None]:
    allowed = getattr(proposer, "allowed_attn_types", None)
    if draft_index < 1:
        return groups, per_group, allowed
    if allowed is None:
        allowed = tuple({type(m) for m in per_group}) or None
    return [faults.FaultInjectedGroup(), *groups], [faults.FaultInjectedMetadata(), *per_group], allowed


def wrap_build(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    site = site_name(cls, "build_per_group_and_layer_attn_metadata")

    def build_per_group_and_layer_attn_metadata(self, common_attn_metadata, draft_index: int = 0, *args, **kwargs):
        result = orig(self, common_attn_metadata, draft_index, *args, **kwargs)
        try:
            per_group, per_layer = result
        except (TypeError, ValueError):
            return result
        groups = list(getattr(self, "draft_attn_groups", None) or [])
        allowed = getattr(self, "allowed_attn_types", None)
        if "bad-group-metadata" in faults.active():
            groups, per_group, allowed = _inject_bad_group(self, groups, list(per_group), int(draft_index))
            result = (per_group, per_layer)
        runtime.run_check(G, site, check_groups, self, groups, per_group, per_layer, int(draft_index), allowed, site)
        return result

    return build_per_group_and_layer_attn_metadata


# ---- vLLM 0.17-0.19: metadata is built inside propose(); check what reaches set_forward_context.

_active_propose: contextvars.ContextVar[list | None] = contextvars.ContextVar("ic_active_propose", default=None)


def wrap_legacy_propose(orig: Callable[..., Any], cls: type) -> Callable[..., Any]:
    def propose(self, *args, **kwargs):
        token = _active_propose.set([self, 0])
        try:
            return orig(self, *args, **kwargs)
        finally:
            _active_propose.reset(token)

    return propose


def wrap_legacy_set_forward_context(orig: Callable[..., Any], module: Any) -> Callable[..., Any]:
    site = site_name(module, "set_forward_context")

    def set_forward_context(attn_metadata, *args, **kwargs):
        active = _active_propose.get()
        if active is not None and isinstance(attn_metadata, dict):
            proposer, step = active
            active[1] = step + 1
            groups = list(getattr(proposer, "draft_attn_groups", None) or [])
            runtime.run_check(G, site, check_groups, proposer, groups, None, attn_metadata, step,
                              getattr(proposer, "allowed_attn_types", None), site)
        return orig(attn_metadata, *args, **kwargs)

    return set_forward_context
