"""Decides, for each vLLM module as it finishes importing, what to wrap in it."""

from __future__ import annotations

import logging
from types import ModuleType

from . import import_hook, runtime
from .config import GROUP_METADATA, TOPK_LAYOUT, GuardConfig
from .targets import (
    GROUP_BUILD_METHOD,
    MODEL_PREFIXES,
    SPEC_DECODE_PREFIXES,
    V2_SPEC_DECODE_PREFIXES,
    defines_topk_hooks,
    is_watched,
    own_classes,
    patch_method,
)

logger = logging.getLogger("invariant_check.guards")

LEGACY_EAGLE_MODULE = "vllm.v1.spec_decode.eagle"
V2_HOOKS = ("on_prefill_begin", "on_prefill_end", "capture", "load_draft_model")


def _on_patched(guard: str, target: str) -> None:
    rep = runtime.reporter()
    if rep is not None:
        rep.patched(guard, target)


def _patch_topk_model_class(cls: type, cfg: GuardConfig) -> None:
    from . import topk_layout

    guard_on = cfg.on(TOPK_LAYOUT)
    if "compact_topk_indices" in cls.__dict__:
        # The Triton swap (and the test faults) work through the same wrapper, with or
        # without the checks.
        patch_method(TOPK_LAYOUT, cls, "compact_topk_indices",
                     lambda f, c: topk_layout.wrap_compact(f, c, check=guard_on), _on_patched)
    if not guard_on:
        return
    if "set_skip_topk" in cls.__dict__:
        patch_method(TOPK_LAYOUT, cls, "set_skip_topk", topk_layout.wrap_set_skip_topk, _on_patched)
    if callable(getattr(cls, "forward", None)):
        patch_method(TOPK_LAYOUT, cls, "forward", topk_layout.wrap_forward, _on_patched)


def on_module_loaded(module: ModuleType) -> None:
    cfg = runtime.config()
    if cfg is None:
        return
    name = module.__name__
    classes = own_classes(module)
    if name.startswith(MODEL_PREFIXES):
        for cls in classes:
            if defines_topk_hooks(cls):
                _patch_topk_model_class(cls, cfg)
        return
    if name.startswith(SPEC_DECODE_PREFIXES):
        _patch_spec_decode(module, classes, cfg)
        return
    if name.startswith(V2_SPEC_DECODE_PREFIXES) and cfg.on(TOPK_LAYOUT):
        from . import topk_layout

        for cls in classes:
            if cls.__name__ == "MTPSpeculator" or ("on_prefill_end" in cls.__dict__ and "load_draft_model" in cls.__dict__):
                for hook in V2_HOOKS:
                    if callable(getattr(cls, hook, None)):
                        patch_method(TOPK_LAYOUT, cls, hook,
                                     lambda f, c, h=hook: topk_layout.wrap_v2_hook(f, c, h), _on_patched)


def _patch_spec_decode(module: ModuleType, classes: list[type], cfg: GuardConfig) -> None:
    if cfg.on(GROUP_METADATA):
        from . import group_metadata

        for cls in classes:
            if GROUP_BUILD_METHOD in cls.__dict__:
                patch_method(GROUP_METADATA, cls, GROUP_BUILD_METHOD, group_metadata.wrap_build, _on_patched)
        if module.__name__ == LEGACY_EAGLE_MODULE:
            # 0.17-0.19: propose() builds the metadata itself; newer eagle.py inherits the builder.
            legacy = [c for c in classes if "propose" in c.__dict__ and not hasattr(c, GROUP_BUILD_METHOD)]
            for cls in legacy:
                patch_method(GROUP_METADATA, cls, "propose", group_metadata.wrap_legacy_propose, _on_patched)
            sfc = getattr(module, "set_forward_context", None)
            if legacy and callable(sfc) and not getattr(sfc, "__invariant_check_wrapped__", False):
                wrapped = group_metadata.wrap_legacy_set_forward_context(sfc, module.__name__)
                wrapped.__invariant_check_wrapped__ = True  # type: ignore[attr-defined]
                module.set_forward_context = wrapped  # type: ignore[attr-defined]
                _on_patched(GROUP_METADATA, f"{module.__name__}:set_forward_context")
    if cfg.on(TOPK_LAYOUT):
        from . import topk_layout

        for cls in classes:
            if "load_model" in cls.__dict__ and (
                hasattr(cls, GROUP_BUILD_METHOD) or module.__name__ == LEGACY_EAGLE_MODULE
            ):
                patch_method(TOPK_LAYOUT, cls, "load_model", topk_layout.wrap_load_model, _on_patched)


def install(cfg: GuardConfig) -> None:
    runtime.activate(cfg)
    import_hook.install(is_watched, on_module_loaded)


def uninstall() -> None:
    from .targets import unpatch_all

    import_hook.uninstall()
    unpatch_all()
    runtime.deactivate()
