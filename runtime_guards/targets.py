"""The one table of what the guards wrap in vLLM.

Each row names a guard, where vLLM keeps the code (a module, or a package prefix for classes that
are discovered), the attribute to wrap, the factory in the guard's module that builds the wrapper,
and the vLLM releases the row was checked against. The import hook patches from this table, and
`invariant-check guards` and docs/guards.md list from it; a new guard is a module plus rows here.

Rows whose owner is "*" are discovered: every class defined in a matching module that the row's
selector accepts (for example every model class that defines `set_skip_topk`), so a class vLLM
adds later is covered too. Version ranges are the releases where the row's target exists; "0.20+"
means from 0.20 through the newest release checked (LATEST_CHECKED), and a test compares every
range with the vLLM sources it can find.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

from .config import GROUP_METADATA, METADATA_COHERENCE, TOPK_LAYOUT

LATEST_CHECKED = "0.33"

MODEL_PREFIXES = ("vllm.model_executor.models.", "vllm.models.")
V1_SPEC_DECODE = "vllm.v1.spec_decode."
V2_SPEC_DECODE = "vllm.v1.worker.gpu.spec_decode."
LEGACY_EAGLE_MODULE = "vllm.v1.spec_decode.eagle"
V1_BASE_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"
V2_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.speculator"
V2_EAGLE_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.eagle.speculator"
V2_MTP_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.mtp.speculator"

GROUP_BUILD_METHOD = "build_per_group_and_layer_attn_metadata"
TOPK_METHODS = ("set_skip_topk", "compact_topk_indices")
V2_TOPK_HOOKS = ("on_prefill_begin", "on_prefill_end", "capture", "load_draft_model")


# ---------------------------------------------------------------------------- selectors
# For "*" rows: which classes of a matching module get the attribute wrapped. For function rows
# (owner ""): whether the module's function is wrapped. Each has the names whose `def` in a
# source file makes the file a candidate, so that `guards` can list targets without importing
# every module of vLLM.


@dataclass(frozen=True)
class Selector:
    describe: str
    accepts: Callable[[object, ModuleType, str], bool]
    source_names: tuple[str, ...] = ()  # empty: the row's own attribute


def _defines(cls: type, module: ModuleType, attr: str) -> bool:
    return attr in vars(cls)


def _topk_model(cls: type, module: ModuleType, attr: str) -> bool:
    return any(m in vars(cls) for m in TOPK_METHODS) and callable(getattr(cls, attr, None))


def _is_v1_proposer(cls: type, module: ModuleType) -> bool:
    return hasattr(cls, GROUP_BUILD_METHOD) or module.__name__ == LEGACY_EAGLE_MODULE


def _v1_proposer(cls: type, module: ModuleType, attr: str) -> bool:
    return attr in vars(cls) and _is_v1_proposer(cls, module)


def _legacy_proposer(cls: type, module: ModuleType, attr: str) -> bool:
    # 0.17-0.19: propose() builds the metadata itself; later eagle.py inherits the builder.
    return attr in vars(cls) and not hasattr(cls, GROUP_BUILD_METHOD)


def _v2_index_sharing(cls: type, module: ModuleType, attr: str) -> bool:
    own = vars(cls)
    return "on_prefill_end" in own and "load_draft_model" in own and callable(getattr(cls, attr, None))


def _function(module: object, mod: ModuleType, attr: str) -> bool:
    return callable(vars(mod).get(attr)) and not inspect.isclass(vars(mod).get(attr))


def _legacy_eagle_module(module: object, mod: ModuleType, attr: str) -> bool:
    return _function(module, mod, attr) and any(
        _legacy_proposer(c, mod, "propose") for c in own_classes(mod)
    )


SELECTORS: dict[str, Selector] = {
    "defines": Selector("every class that defines it", _defines),
    "topk-model": Selector("every class that defines set_skip_topk or compact_topk_indices",
                           _topk_model, TOPK_METHODS),
    "v1-proposer": Selector("every proposer (has the metadata builder) that defines it", _v1_proposer),
    "legacy-proposer": Selector("every class that defines it without the metadata builder",
                                _legacy_proposer),
    "v2-index-sharing": Selector("every speculator that defines on_prefill_end and load_draft_model",
                                 _v2_index_sharing, ("on_prefill_end",)),
    "function": Selector("the module-level function", _function),
    "legacy-eagle-module": Selector("the module-level function, where propose() builds the metadata",
                                    _legacy_eagle_module),
}


# ---------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Target:
    guard: str
    module: str  # a module, or a package prefix ending in "." (owner "*" only)
    owner: str  # a class the module defines; "*": discovered classes; "": a module-level function
    attr: str
    wrap: str  # "<guard module>.<factory>"; factory(original, owner) returns the replacement
    versions: str  # "0.20+", "0.17-0.19"; "" for a discovered row with no expectation
    note: str = ""
    select: str = ""  # a SELECTORS key; default "defines" for "*" rows, "function" for functions
    always: bool = False  # also patched when this guard is off (the compaction swap and faults)
    inherited: bool = False  # a named class may inherit the attribute

    @property
    def discovered(self) -> bool:
        return self.owner == "*"

    @property
    def is_function(self) -> bool:
        return self.owner == ""

    @property
    def selector(self) -> Selector:
        default = "function" if self.is_function else "defines"
        return SELECTORS[self.select or default]

    @property
    def label(self) -> str:
        if self.is_function:
            return f"{self.module}:{self.attr}"
        module = self.module + "*" if self.module.endswith(".") else self.module
        return f"{module}:{self.owner}.{self.attr}"

    def matches_module(self, name: str) -> bool:
        return name.startswith(self.module) if self.module.endswith(".") else name == self.module


def _topk_model_rows() -> Iterable[Target]:
    # vLLM 0.24 added set_skip_topk to DeepSeek MTP without compact_topk_indices (the bug);
    # 0.25 added the compaction and the `vllm.models` package with the V3.2 modules.
    since = {"vllm.model_executor.models.": "0.24+", "vllm.models.": "0.25+"}
    for prefix in MODEL_PREFIXES:
        yield Target(TOPK_LAYOUT, prefix, "*", "compact_topk_indices", "topk_layout.wrap_compact", "0.25+",
                     "swapped for the Triton compaction with INVARIANT_CHECK_COMPACTION=triton",
                     select="defines", always=True)
        yield Target(TOPK_LAYOUT, prefix, "*", "set_skip_topk", "topk_layout.wrap_set_skip_topk", since[prefix])
        yield Target(TOPK_LAYOUT, prefix, "*", "forward", "topk_layout.wrap_forward", since[prefix],
                     select="topk-model")


def _v2_topk_rows() -> Iterable[Target]:
    since = {"on_prefill_begin": "0.32+", "on_prefill_end": "0.32+", "capture": "0.24+", "load_draft_model": "0.24+"}
    notes = {"on_prefill_begin": "request count for the index-sharing steps",
             "on_prefill_end": "request count; compacts the shared buffer",
             "capture": "all-zero dummy ids while capturing are not a violation",
             "load_draft_model": "buffer holders checked after load"}
    for hook in V2_TOPK_HOOKS:
        yield Target(TOPK_LAYOUT, V2_MTP_SPECULATOR, "MTPSpeculator", hook, "topk_layout.wrap_v2_hook",
                     since[hook], notes[hook], inherited=hook == "capture")
        yield Target(TOPK_LAYOUT, V2_SPEC_DECODE, "*", hook, "topk_layout.wrap_v2_hook", "",
                     select="v2-index-sharing")


def _group_build_rows(guard: str, wrap: str) -> Iterable[Target]:
    yield Target(guard, V1_BASE_PROPOSER, "SpecDecodeBaseProposer", GROUP_BUILD_METHOD, wrap, "0.20+")
    yield Target(guard, "vllm.v1.spec_decode.dflash", "DFlashProposer", GROUP_BUILD_METHOD, wrap, "0.20+",
                 "overrides without super()")
    yield Target(guard, "vllm.v1.spec_decode.gemma4", "Gemma4Proposer", GROUP_BUILD_METHOD, wrap, "0.24+",
                 "overrides without super()")
    yield Target(guard, "vllm.v1.spec_decode.step3p5", "Step3p5MTPProposer", GROUP_BUILD_METHOD, wrap, "0.24+",
                 "overrides without super()")
    yield Target(guard, V1_SPEC_DECODE, "*", GROUP_BUILD_METHOD, wrap, "0.20+")


TARGETS: tuple[Target, ...] = (
    # ---- topk-layout: the shared top-k buffer of MTP index sharing
    *_topk_model_rows(),
    Target(TOPK_LAYOUT, V1_BASE_PROPOSER, "SpecDecodeBaseProposer", "load_model", "topk_layout.wrap_load_model",
           "0.20+", "buffer holders checked after the draft model loads"),
    Target(TOPK_LAYOUT, V1_SPEC_DECODE, "*", "load_model", "topk_layout.wrap_load_model", "",
           select="v1-proposer"),
    *_v2_topk_rows(),
    # ---- group-metadata: every attention group's metadata at every draft step
    *_group_build_rows(GROUP_METADATA, "group_metadata.wrap_build"),
    Target(GROUP_METADATA, LEGACY_EAGLE_MODULE, "SpecDecodeBaseProposer", "propose",
           "group_metadata.wrap_legacy_propose", "0.17-0.19", "metadata built inside propose()"),
    Target(GROUP_METADATA, LEGACY_EAGLE_MODULE, "*", "propose", "group_metadata.wrap_legacy_propose", "",
           select="legacy-proposer"),
    Target(GROUP_METADATA, LEGACY_EAGLE_MODULE, "", "set_forward_context",
           "group_metadata.wrap_legacy_set_forward_context", "0.13-0.19",
           "where the legacy propose() hands its metadata over (before 0.17 a proposer has one "
           "attention group: nothing to compare)", select="legacy-eagle-module"),
    # ---- metadata-coherence: the common metadata each draft step is about to use
    *_group_build_rows(METADATA_COHERENCE, "metadata_coherence.wrap_v1_build"),
    Target(METADATA_COHERENCE, V1_BASE_PROPOSER, "SpecDecodeBaseProposer", "propose",
           "metadata_coherence.wrap_propose", "0.20+", "reads back the previous proposal's device checks"),
    Target(METADATA_COHERENCE, V1_SPEC_DECODE, "*", "propose", "metadata_coherence.wrap_propose", "",
           select="v1-proposer"),
    Target(METADATA_COHERENCE, V2_SPECULATOR, "DraftModelSpeculator", "_build_attn_metadata",
           "metadata_coherence.wrap_v2_build_context", "0.32+", "real request count, draft step, graph mode"),
    Target(METADATA_COHERENCE, V2_SPECULATOR, "DraftModelSpeculator", "_build_draft_attn_metadata",
           "metadata_coherence.wrap_v2_build_context", "0.24-0.25", "real request count"),
    Target(METADATA_COHERENCE, V2_EAGLE_SPECULATOR, "EagleSpeculator", "_build_draft_attn_metadata",
           "metadata_coherence.wrap_v2_build_context", "0.19-0.20", "real request count"),
    Target(METADATA_COHERENCE, V2_SPECULATOR, "", "build_attn_metadata",
           "metadata_coherence.wrap_v2_build_attn_metadata", "0.24+", "checks what the speculator passes"),
    Target(METADATA_COHERENCE, V2_EAGLE_SPECULATOR, "", "build_attn_metadata",
           "metadata_coherence.wrap_v2_build_attn_metadata", "0.18-0.20", "checks what the speculator passes"),
    Target(METADATA_COHERENCE, V2_SPECULATOR, "DraftModelSpeculator", "_copy_request_inputs",
           "metadata_coherence.wrap_copy_request_inputs", "0.24+", "pad-tail: idx_mapping past the real requests"),
    Target(METADATA_COHERENCE, V2_SPEC_DECODE, "*", "propose", "metadata_coherence.wrap_propose", "",
           "reads back the previous proposal's device checks"),
)


def targets_of(guard: str) -> list[Target]:
    return [t for t in TARGETS if t.guard == guard]


def modules_named() -> list[str]:
    """The modules named by a row (not prefixes)."""
    return sorted({t.module for t in TARGETS if not t.module.endswith(".")})


_EXACT = frozenset(t.module for t in TARGETS if not t.module.endswith("."))
_PREFIXES = tuple(sorted({t.module for t in TARGETS if t.module.endswith(".")}))


def is_watched(name: str) -> bool:
    # Called by the import hook for every import in the process: keep it to two cheap tests.
    return name.startswith("vllm.") and (name in _EXACT or name.startswith(_PREFIXES))


# ---------------------------------------------------------------------------- resolving rows


def own_classes(module: ModuleType) -> list[type]:
    """Classes defined in this module (not the ones it merely imports)."""
    return [v for v in list(vars(module).values()) if inspect.isclass(v) and v.__module__ == module.__name__]


def owners(target: Target, module: ModuleType) -> list[object]:
    """What `target` wraps in this (already executed) module: classes, or the module itself."""
    if not target.matches_module(module.__name__):
        return []
    if target.is_function:
        return [module] if target.selector.accepts(module, module, target.attr) else []
    if target.discovered:
        return [c for c in own_classes(module) if target.selector.accepts(c, module, target.attr)]
    cls = vars(module).get(target.owner)
    if not inspect.isclass(cls) or cls.__module__ != module.__name__:
        return []
    if target.attr in vars(cls) or (target.inherited and callable(getattr(cls, target.attr, None))):
        return [cls]
    return []


def site_name(owner: object, attr: str) -> str:
    """What a violation's `site` says: the module, the class, the attribute."""
    if isinstance(owner, ModuleType):
        return f"{owner.__name__}.{attr}"
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{attr}"
    return f"{type(owner).__module__}.{type(owner).__qualname__}.{attr}"


def target_id(owner: object, attr: str) -> str:
    """How a patched attribute is listed: "module:Class.attr" or "module:function"."""
    if isinstance(owner, ModuleType):
        return f"{owner.__name__}:{attr}"
    return f"{owner.__module__}:{owner.__qualname__}.{attr}"  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- versions

_VERSION = re.compile(r"(\d+)\.(\d+)")


def parse_version(text: str | None) -> tuple[int, int] | None:
    m = _VERSION.match(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def version_range(spec: str) -> tuple[tuple[int, int], tuple[int, int] | None] | None:
    """"0.20+" -> ((0, 20), None); "0.17-0.19" -> ((0, 17), (0, 19)); "" -> None."""
    spec = spec.strip()
    if not spec:
        return None
    if spec.endswith("+"):
        low = parse_version(spec[:-1])
        return (low, None) if low else None
    low_text, _, high_text = spec.partition("-")
    low, high = parse_version(low_text), parse_version(high_text or low_text)
    return (low, high) if low and high else None


def expected_in(target: Target, version: str | None) -> bool | None:
    """Whether `target` should exist in this vLLM release; None when the row claims nothing."""
    rng, ver = version_range(target.versions), parse_version(version)
    if rng is None or ver is None:
        return None
    low, high = rng
    return ver >= low and (high is None or ver <= high)


def versions_text(target: Target) -> str:
    rng = version_range(target.versions)
    if rng is None:
        return "any (discovered)"
    if rng[1] is None:
        return f"{target.versions[:-1]}-{LATEST_CHECKED}"
    return target.versions


# ---------------------------------------------------------------------------- source scan


def candidate_modules(vllm_root: str, target: Target) -> list[str]:
    """Modules under a "*" row's prefix whose source defines one of the selector's names at
    class level, found without importing anything (the row's selector decides after import)."""
    import ast

    if not target.module.endswith("."):
        return [target.module]
    names = target.selector.source_names or (target.attr,)
    pkg_dir = os.path.join(os.path.dirname(vllm_root), *target.module.rstrip(".").split("."))
    found = []
    for dirpath, _dirs, files in os.walk(pkg_dir):
        for fname in sorted(files):
            if not fname.endswith(".py"):
                continue
            path = os.path.join(dirpath, fname)
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError):
                continue
            if not any(f"def {n}" in text for n in names):
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            if any(isinstance(node, ast.ClassDef) and any(
                    isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name in names for b in node.body)
                   for node in tree.body):
                rel = os.path.relpath(path, os.path.dirname(vllm_root))[:-3].replace(os.sep, ".")
                found.append(rel.removesuffix(".__init__"))
    return sorted(set(found))


# ---------------------------------------------------------------------------- docs


def markdown_table(guard: str | None = None) -> str:
    """The targets as a Markdown table (docs/guards.md embeds it; a test keeps it current)."""
    lines = ["| Guard | Target | vLLM | Note |", "|---|---|---|---|"]
    for t in TARGETS:
        if guard is not None and t.guard != guard:
            continue
        if t.discovered:
            where = f"`{t.module}*`: {t.selector.describe}, `.{t.attr}`"
        else:
            where = f"`{t.label}`"
        note = t.note + ("; patched whenever the plugin is on" if t.always else "")
        lines.append(f"| {t.guard} | {where} | {versions_text(t)} | {note} |")
    return "\n".join(lines)
