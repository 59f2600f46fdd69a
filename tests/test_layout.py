"""The layout's floors (docs/development.md, "The linter's layout"): no module imports one on a
floor above its own, and every module of the package sits on a floor.

Imports under `if TYPE_CHECKING:` never run and do not count; nor do the imports of a rule's
`run_example` hook, which the tests call to run an example through the engine, as
`invariant_check.testing` does.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = "invariant_check"
# bottom first: a module imports its own floor and those below
FLOORS = [
    ("leaves", {PKG, f"{PKG}.globs", f"{PKG}.models"}),
    ("project model", {f"{PKG}.analysis"}),
    ("rule API", {f"{PKG}.api", f"{PKG}.rules"}),
    ("settings", {f"{PKG}.settings"}),
    ("adoption", {f"{PKG}.adoption"}),
    ("output", {f"{PKG}.formats"}),
    ("lint run", {f"{PKG}.lint"}),
    ("harness", {f"{PKG}.testing"}),
    ("runtime", {f"{PKG}.runtime_guards", f"{PKG}.compaction"}),
    ("fixes", {f"{PKG}.fixing"}),
    ("commands", {f"{PKG}.cli", f"{PKG}.__main__", f"{PKG}.server"}),  # the command line, the language server
]
# where the repository's folders install (pyproject.toml's package-dir)
ROOTS = {PKG: PKG, "rules": f"{PKG}.rules", "runtime_guards": f"{PKG}.runtime_guards"}


def floor_of(module: str) -> int | None:
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            covers = module == prefix or (prefix != PKG and module.startswith(prefix + "."))
            if covers and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def modules() -> list[tuple[Path, str, bool]]:
    out = []
    for top, dotted in ROOTS.items():
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO / top)
            if rel.parts and rel.parts[0] == "models" and top == PKG:
                continue  # the bundled upstream sources: data, never imported
            parts = [dotted, *rel.with_suffix("").parts]
            is_pkg = parts[-1] == "__init__"
            out.append((path, ".".join(parts[:-1] if is_pkg else parts), is_pkg))
    return out


def imports_of(path: Path, module: str, is_pkg: bool):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skip.update(range(sub.lineno, sub.end_lineno + 1))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "run_example":
            skip.update(range(node.lineno, node.end_lineno + 1))
    package = module if is_pkg else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PKG or alias.name.startswith(PKG + "."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == PKG:  # `from invariant_check import x`: the floor of x
                for alias in node.names:
                    yield node.lineno, f"{PKG}.{alias.name}"
            elif target.startswith(PKG + "."):
                yield node.lineno, target


def test_every_module_sits_on_a_floor():
    unplaced = [m for _, m, _ in modules() if floor_of(m) is None]
    assert not unplaced, f"place these modules on a floor of tests/test_layout.py and docs/development.md: {unplaced}"


def test_no_import_climbs_a_floor():
    climbs = []
    for path, module, is_pkg in modules():
        mine = floor_of(module)
        for line, target in imports_of(path, module, is_pkg):
            theirs = floor_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                climbs.append(f"{path.relative_to(REPO)}:{line}: {module} ({FLOORS[mine][0]}) imports "
                              f"{target} ({FLOORS[theirs][0]})")
    assert not climbs, "\n".join(climbs)


def test_the_check_sees_an_upward_import(tmp_path):
    # the check itself can fail: imports of higher floors from the rule API are reported
    path = tmp_path / "rule.py"
    path.write_text("from ..lint.engine import Engine\nfrom invariant_check import testing\n")
    found = list(imports_of(path, "invariant_check.api.rule", False))
    assert found == [(1, "invariant_check.lint.engine"), (2, "invariant_check.testing")]
    assert all(floor_of(target) > floor_of("invariant_check.api.rule") for _, target in found)


def test_type_checking_imports_do_not_count(tmp_path):
    path = tmp_path / "rule.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..lint.engine import Engine\n")
    assert list(imports_of(path, "invariant_check.api.rule", False)) == []
