"""The upstream fix of `extend_all_queries_by_N`, applied to the installed vLLM, for tests only.

The fix is not copied here: it is read from the patch in docs/upstream/ and applied to the
installed vLLM's own source of the function, so the tests exercise exactly what the patch does.

- `patched_source(...)`, `new_files(...)`: a unified diff applied to a file's text (exact context
  match, no fuzz), and the files it creates.
- `fixed_function(module, patch_text)`: the module's function as the patch leaves it.
- `register()`: a `vllm.general_plugins` entry point that swaps the function in every vLLM process
  (the CPU platform spawns the workers: a patch applied in the driver alone never reaches them).
- `plugin_env(tmp_dir, ...)`: writes a throw-away distribution (a dist-info folder and this
  module) under `tmp_dir` and returns the environment that puts it on every process's path; the
  installed package never carries it.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import sys
from pathlib import Path

FUNCTION = "extend_all_queries_by_N"
MODULE = "vllm.v1.spec_decode.utils"
TARGET = "vllm/v1/spec_decode/utils.py"
ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "docs" / "upstream" / "0001-spec-decode-advance-the-cpu-upper-bounds-in-extend_all_queries_by_N.patch"
ENV_PATCH = "IC_TEST_EXTEND_FIX_PATCH"
ENV_LOG = "IC_TEST_EXTEND_FIX_LOG"
DIST = "ic_test_extend_fix"

_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def _file_diffs(patch_text: str) -> dict[str, list[str]]:
    """The diff lines of each file (by its new path), from `+++ b/...` to the next file."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in patch_text.splitlines():
        if line.startswith("diff --git "):
            current = None
        elif line.startswith("+++ "):
            path = line[4:].strip()
            current = files.setdefault(path[2:] if path.startswith("b/") else path, [])
        elif current is not None:
            current.append(line)
    return files


def _hunks(lines: list[str]) -> list[tuple[list[str], list[str]]]:
    """(old lines, new lines) of each hunk, as many as its header counts (a format-patch mail's
    trailer after the last hunk is not part of it)."""
    hunks: list[tuple[list[str], list[str]]] = []
    k = 0
    while k < len(lines):
        m = _HUNK.match(lines[k])
        k += 1
        if not m:
            continue
        old_left, new_left = int(m.group(1) or 1), int(m.group(2) or 1)
        old: list[str] = []
        new: list[str] = []
        while (old_left or new_left) and k < len(lines):
            line = lines[k]
            k += 1
            if line.startswith("\\"):
                continue  # "\ No newline at end of file"
            tag, body = line[:1] or " ", line[1:]
            if tag in " -":
                old.append(body)
                old_left -= 1
            if tag in " +":
                new.append(body)
                new_left -= 1
        hunks.append((old, new))
    return hunks


def patched_source(source: str, patch_text: str, path: str = TARGET) -> str:
    """`source` (the text of `path`) with the patch's hunks for `path` applied; ValueError when a
    hunk's context is not found exactly once."""
    diffs = _file_diffs(patch_text)
    if path not in diffs:
        raise ValueError(f"the patch does not change {path}")
    lines = source.splitlines()
    for old, new in _hunks(diffs[path]):
        starts = [i for i in range(len(lines) - len(old) + 1) if lines[i : i + len(old)] == old]
        if len(starts) != 1:
            raise ValueError(f"a hunk of {path} matches {len(starts)} places, not one")
        i = starts[0]
        lines[i : i + len(old)] = new
    return "\n".join(lines) + "\n"


def new_files(patch_text: str) -> dict[str, str]:
    """The files the patch creates, with their text."""
    out: dict[str, str] = {}
    text = patch_text.splitlines()
    for k, line in enumerate(text):
        if line.startswith("--- /dev/null") and k + 1 < len(text) and text[k + 1].startswith("+++ b/"):
            path = text[k + 1][len("+++ b/"):]
            _, new = _hunks(_file_diffs(patch_text)[path])[0]
            out[path] = "\n".join(new) + "\n"
    return out


def fixed_function(module, patch_text: str, name: str = FUNCTION):
    """`module.<name>` as the patch leaves it, compiled in the module's namespace."""
    filename = module.__file__
    source = Path(filename).read_text(encoding="utf-8")
    tree = ast.parse(patched_source(source, patch_text))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace = dict(vars(module))
    exec(compile(ast.Module(body=[node], type_ignores=[]), filename, "exec"), namespace)  # noqa: S102
    return namespace[name]


def _mark(what: str) -> None:
    log = os.environ.get(ENV_LOG)
    if log:
        Path(log).mkdir(parents=True, exist_ok=True)
        (Path(log) / f"{what}-{os.getpid()}").write_text(what)


def register() -> None:
    """vLLM general plugin: swap in the fixed function (no-op without IC_TEST_EXTEND_FIX_PATCH)."""
    patch = os.environ.get(ENV_PATCH)
    if not patch:
        return
    try:
        import importlib

        utils = importlib.import_module(MODULE)
        fixed = fixed_function(utils, Path(patch).read_text(encoding="utf-8"))
        seen = []

        def extend_all_queries_by_N(*args, **kwargs):  # noqa: N802 - vLLM's name
            if not seen:
                seen.append(True)
                _mark("called")
            return fixed(*args, **kwargs)

        utils.extend_all_queries_by_N = extend_all_queries_by_N
        # A module that already imported the name keeps its own binding.
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("vllm.") and getattr(mod, FUNCTION, None) is not None \
                    and mod is not utils:
                setattr(mod, FUNCTION, extend_all_queries_by_N)
        _mark("installed")
    except Exception as exc:  # noqa: BLE001 - the test reads this and fails with the reason
        _mark("error")
        print(f"{DIST}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def plugin_env(tmp_dir: Path, patch: Path = PATCH) -> dict[str, str]:
    """A throw-away distribution under tmp_dir whose `vllm.general_plugins` entry point is
    `register`; the environment that makes every vLLM process load it."""
    tmp_dir = Path(tmp_dir)
    dist_info = tmp_dir / f"{DIST}-0.0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0\n")
    (dist_info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{DIST} = {DIST}:register\n")
    shutil.copyfile(__file__, tmp_dir / f"{DIST}.py")
    path = os.pathsep.join(p for p in (str(tmp_dir), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, ENV_PATCH: str(patch), ENV_LOG: str(tmp_dir / "log")}
