"""What the guards wrap in vLLM, found by name with fallbacks, and the bookkeeping of patches.

Named targets differ by release (listed in KNOWN_TARGETS). Model classes that own the shared
top-k buffer are not listed: every class that defines `set_skip_topk` or `compact_topk_indices`
in its own body is discovered when its module is imported, so a future model is covered too.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .config import GROUP_METADATA, TOPK_LAYOUT

WRAPPED_MARK = "__invariant_check_wrapped__"

MODEL_PREFIXES = ("vllm.model_executor.models.", "vllm.models.")
SPEC_DECODE_PREFIXES = ("vllm.v1.spec_decode.",)
V2_SPEC_DECODE_PREFIXES = ("vllm.v1.worker.gpu.spec_decode.",)
WATCHED_PREFIXES = MODEL_PREFIXES + SPEC_DECODE_PREFIXES + V2_SPEC_DECODE_PREFIXES

TOPK_METHODS = ("set_skip_topk", "compact_topk_indices")
GROUP_BUILD_METHOD = "build_per_group_and_layer_attn_metadata"
V2_HOOKS = ("on_prefill_begin", "on_prefill_end", "on_multi_step_decode_begin",
            "on_multi_step_decode_end", "capture", "load_draft_model")


@dataclass(frozen=True)
class KnownTarget:
    guard: str
    module: str
    qualname: str
    versions: str
    note: str = ""


# Resolution order matters only for humans reading `invariant-check guards`; every entry that
# exists in the installed vLLM is patched.
KNOWN_TARGETS: tuple[KnownTarget, ...] = (
    KnownTarget(GROUP_METADATA, "vllm.v1.spec_decode.llm_base_proposer",
                "SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata", "0.20-0.33"),
    KnownTarget(GROUP_METADATA, "vllm.v1.spec_decode.dflash",
                "DFlashProposer.build_per_group_and_layer_attn_metadata", "0.20-0.33",
                "overrides without super()"),
    KnownTarget(GROUP_METADATA, "vllm.v1.spec_decode.gemma4",
                "Gemma4Proposer.build_per_group_and_layer_attn_metadata", "0.24-0.33",
                "overrides without super()"),
    KnownTarget(GROUP_METADATA, "vllm.v1.spec_decode.step3p5",
                "Step3p5MTPProposer.build_per_group_and_layer_attn_metadata", "0.24-0.33",
                "overrides without super()"),
    KnownTarget(GROUP_METADATA, "vllm.v1.spec_decode.eagle", "SpecDecodeBaseProposer.propose",
                "0.17-0.19", "legacy: metadata built inside propose(); checked at set_forward_context"),
    KnownTarget(TOPK_LAYOUT, "vllm.v1.spec_decode.llm_base_proposer", "SpecDecodeBaseProposer.load_model",
                "0.20-0.33", "buffer holders checked after the draft model loads"),
    KnownTarget(TOPK_LAYOUT, "vllm.v1.worker.gpu.spec_decode.mtp.speculator", "MTPSpeculator.on_prefill_end",
                "0.32-0.33", "model runner v2 hooks (earlier v2 MTP had no index sharing)"),
    KnownTarget(TOPK_LAYOUT, "vllm.v1.worker.gpu.spec_decode.mtp.speculator", "MTPSpeculator.capture",
                "0.32-0.33", "model runner v2: no false alarm on all-zero ids during capture"),
    KnownTarget(TOPK_LAYOUT, "vllm.v1.worker.gpu.spec_decode.mtp.speculator", "MTPSpeculator.load_draft_model",
                "0.24-0.33", "model runner v2: buffer holders checked after load"),
)


@dataclass
class PatchRecord:
    guard: str
    target: str  # "module:Class.method"
    owner: type
    name: str
    original: Any
    had_own: bool


@dataclass
class Registry:
    patches: dict[tuple[int, str], PatchRecord] = field(default_factory=dict)

    def is_patched(self, target: str) -> bool:
        return any(p.target == target for p in self.patches.values())

    def targets(self) -> list[PatchRecord]:
        return list(self.patches.values())


REGISTRY = Registry()


def target_id(cls: type, name: str) -> str:
    return f"{cls.__module__}:{cls.__qualname__}.{name}"


def patch_method(
    guard: str,
    cls: type,
    name: str,
    make_wrapper: Callable[[Callable[..., Any], type], Callable[..., Any]],
    on_patched: Callable[[str, str], None] | None = None,
) -> bool:
    """Replace cls.name by make_wrapper(original); idempotent, restorable by unpatch_all()."""
    key = (id(cls), name)
    if key in REGISTRY.patches:
        return False
    had_own = name in cls.__dict__
    original = cls.__dict__[name] if had_own else getattr(cls, name, None)
    if original is None:
        return False
    func = original
    if isinstance(original, (staticmethod, classmethod)):
        return False  # none of our targets are; refuse rather than guess the binding
    if getattr(func, WRAPPED_MARK, False) and had_own:
        return False
    wrapper = make_wrapper(func, cls)
    functools.update_wrapper(wrapper, func)
    setattr(wrapper, WRAPPED_MARK, True)
    setattr(cls, name, wrapper)
    tid = target_id(cls, name)
    REGISTRY.patches[key] = PatchRecord(guard, tid, cls, name, original, had_own)
    if on_patched is not None:
        on_patched(guard, tid)
    return True


def unpatch_all() -> int:
    """Restore every attribute we replaced (tests, and `guards` after its dry run)."""
    n = 0
    for rec in list(REGISTRY.patches.values()):
        if rec.had_own:
            setattr(rec.owner, rec.name, rec.original)
        else:
            try:
                delattr(rec.owner, rec.name)
            except AttributeError:
                pass
        n += 1
    REGISTRY.patches.clear()
    return n


def own_classes(module: ModuleType) -> list[type]:
    """Classes defined in this module (not the ones it merely imports)."""
    out = []
    for value in list(vars(module).values()):
        if inspect.isclass(value) and value.__module__ == module.__name__:
            out.append(value)
    return out


def is_watched(name: str) -> bool:
    return name.startswith(WATCHED_PREFIXES)


def defines_topk_hooks(cls: type) -> bool:
    return any(m in cls.__dict__ for m in TOPK_METHODS)


def scan_topk_classes(vllm_root: str) -> list[tuple[str, str]]:
    """(module, class) for every class in vLLM's model packages that defines set_skip_topk or
    compact_topk_indices, found from source without importing anything."""
    import ast
    import os

    found: list[tuple[str, str]] = []
    for sub in ("model_executor/models", "models"):
        base = os.path.join(vllm_root, sub)
        for dirpath, _dirs, files in os.walk(base):
            for fname in sorted(files):
                if not fname.endswith(".py"):
                    continue
                path = os.path.join(dirpath, fname)
                try:
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
                except OSError:
                    continue
                if "def set_skip_topk" not in text and "def compact_topk_indices" not in text:
                    continue
                try:
                    tree = ast.parse(text)
                except SyntaxError:
                    continue
                rel = os.path.relpath(path, os.path.dirname(vllm_root))[:-3].replace(os.sep, ".")
                rel = rel.removesuffix(".__init__")
                for node in tree.body:
                    if isinstance(node, ast.ClassDef) and any(
                        isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name in TOPK_METHODS
                        for b in node.body
                    ):
                        found.append((rel, node.name))
    return sorted(found)
