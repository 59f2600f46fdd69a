"""A sys.meta_path finder that lets us patch a vLLM module right after it executes.

Why not import the targets from register(): vLLM 0.31+ scans sys.modules right after loading
plugins, and importing spec-decode modules that early crashes the worker (see the notes). The
hook imports nothing itself; it only wraps the loader of modules vLLM imports anyway.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from importlib.abc import Loader, MetaPathFinder
from types import ModuleType

from . import log

OnLoaded = Callable[[ModuleType], None]


class _PatchingLoader(Loader):
    def __init__(self, inner: Loader, on_loaded: OnLoaded):
        self._inner = inner
        self._on_loaded = on_loaded

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # Give the module its real loader back first: inspect, importlib.resources and
        # torch.compile look at __loader__/__spec__.loader and must see vLLM's own.
        module.__loader__ = self._inner
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._inner
        self._inner.exec_module(module)
        try:
            self._on_loaded(module)
        except Exception as exc:  # noqa: BLE001 - patching must never break an import
            log.error(f"patching {module.__name__} failed: {type(exc).__name__}: {exc}")

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


class GuardImportHook(MetaPathFinder):
    def __init__(self, watch: Callable[[str], bool], on_loaded: OnLoaded):
        self.watch = watch
        self.on_loaded = on_loaded
        self._busy = threading.local()

    def find_spec(self, fullname, path, target=None):
        if not self.watch(fullname):
            return None
        busy = getattr(self._busy, "names", None)
        if busy is None:
            busy = self._busy.names = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or isinstance(finder, GuardImportHook):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, self.on_loaded)
        return spec


_hook: GuardImportHook | None = None


def install(watch: Callable[[str], bool], on_loaded: OnLoaded) -> GuardImportHook:
    """Install (once) and patch the watched modules that are already imported."""
    global _hook
    if _hook is None or _hook not in sys.meta_path:
        _hook = GuardImportHook(watch, on_loaded)
        sys.meta_path.insert(0, _hook)
    else:
        _hook.watch, _hook.on_loaded = watch, on_loaded
    for name, module in list(sys.modules.items()):
        if module is not None and watch(name):
            try:
                on_loaded(module)
            except Exception as exc:  # noqa: BLE001
                log.error(f"patching {name} failed: {type(exc).__name__}: {exc}")
    return _hook


def uninstall() -> None:
    global _hook
    if _hook is not None and _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
    _hook = None
