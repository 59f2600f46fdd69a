"""Applies the target table (targets.TARGETS) to each vLLM module as it finishes importing, and
keeps what it replaced so that everything can be restored."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from . import import_hook, runtime
from .config import GuardConfig
from .targets import LEGACY_EAGLE_MODULE, TARGETS, Target, is_watched, owners, target_id

__all__ = ["LEGACY_EAGLE_MODULE", "REGISTRY", "install", "on_module_loaded", "patch_method", "uninstall",
           "unpatch_all"]

WRAPPED_MARK = "__invariant_check_wrapped__"
GUARDS_MARK = "__invariant_check_guards__"  # the guards in a wrapper chain

Factory = Callable[[Callable[..., Any], Any], Callable[..., Any]]


@dataclass
class PatchRecord:
    guard: str
    target: str  # "module:Class.attr" or "module:function"
    owner: Any  # a class, or a module for module-level functions
    name: str
    original: Any
    had_own: bool


@dataclass
class Registry:
    records: list[PatchRecord] = field(default_factory=list)
    keys: set[tuple[int, str, str]] = field(default_factory=set)

    def is_patched(self, target: str) -> bool:
        return any(p.target == target for p in self.records)

    def targets(self) -> list[PatchRecord]:
        return list(self.records)


REGISTRY = Registry()


def patch_method(
    guard: str,
    owner: Any,
    name: str,
    make_wrapper: Factory,
    on_patched: Callable[[str, str], None] | None = None,
) -> bool:
    """Replace owner.name (a class attribute or a module function) by make_wrapper(original,
    owner). Several guards may wrap one attribute; each guard once. Restored by unpatch_all()."""
    key = (id(owner), name, guard)
    if key in REGISTRY.keys:
        return False
    had_own = name in vars(owner)
    original = vars(owner)[name] if had_own else getattr(owner, name, None)
    if original is None or isinstance(original, (staticmethod, classmethod)):
        return False  # none of our targets are; refuse rather than guess the binding
    if not had_own and guard in getattr(original, GUARDS_MARK, ()):
        return False  # inherited from a class this guard already wraps: one check per call
    wrapper = make_wrapper(original, owner)
    functools.update_wrapper(wrapper, original)
    setattr(wrapper, WRAPPED_MARK, True)
    setattr(wrapper, GUARDS_MARK, frozenset(getattr(original, GUARDS_MARK, ())) | {guard})
    setattr(owner, name, wrapper)
    REGISTRY.keys.add(key)
    tid = target_id(owner, name)
    REGISTRY.records.append(PatchRecord(guard, tid, owner, name, original, had_own))
    if on_patched is not None:
        on_patched(guard, tid)
    return True


def unpatch_all() -> int:
    """Restore every attribute we replaced, newest first (stacked guards unwind in order)."""
    n = 0
    for rec in reversed(REGISTRY.records):
        if rec.had_own:
            setattr(rec.owner, rec.name, rec.original)
        else:
            try:
                delattr(rec.owner, rec.name)
            except AttributeError:
                pass
        n += 1
    REGISTRY.records.clear()
    REGISTRY.keys.clear()
    return n


_factories: dict[str, Factory] = {}


def factory(target: Target) -> Factory:
    """The wrapper factory a row names, e.g. "topk_layout.wrap_compact" (imported on first use:
    the guard modules import torch)."""
    fn = _factories.get(target.wrap)
    if fn is None:
        module_name, _, attr = target.wrap.rpartition(".")
        fn = getattr(importlib.import_module(f"{__package__}.{module_name}"), attr)
        _factories[target.wrap] = fn
    return fn


def _on_patched(guard: str, target: str) -> None:
    rep = runtime.reporter()
    if rep is not None:
        rep.patched(guard, target)


def wanted(target: Target, cfg: GuardConfig) -> bool:
    return cfg.on(target.guard) or (target.always and cfg.installs)


def apply(module: ModuleType, cfg: GuardConfig, on_patched: Callable[[str, str], None] | None = _on_patched) -> int:
    """Patch every row of the table that applies to this module; returns how many were patched."""
    n = 0
    for target in TARGETS:
        if not target.matches_module(module.__name__) or not wanted(target, cfg):
            continue
        for owner in owners(target, module):
            n += patch_method(target.guard, owner, target.attr, factory(target), on_patched)
    return n


def on_module_loaded(module: ModuleType) -> None:
    cfg = runtime.config()
    if cfg is not None:
        apply(module, cfg)


def install(cfg: GuardConfig) -> None:
    runtime.activate(cfg)
    import_hook.install(is_watched, on_module_loaded)


def uninstall() -> None:
    import_hook.uninstall()
    unpatch_all()
    runtime.deactivate()
