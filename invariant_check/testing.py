"""Runs a rule's VALID/INVALID examples through the real engine (used by the generic test).

An example's code is dedented and its leading newline dropped: `line` counts from its first
code line. `files` are written beside it as other modules of the same tree.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from .lint.engine import Engine
from .api.rule import Rule
from .api.types import Finding, Invalid, Valid

EXAMPLE_FILE = "example.py"


def write_example(root: Path, example: Valid | Invalid) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    main = root / EXAMPLE_FILE
    main.write_text(textwrap.dedent(example.code).lstrip("\n"))
    for name, code in example.files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(code).lstrip("\n"))
    return main


def run_example(
    rule: type[Rule], example: Valid | Invalid, root: Path, *, prefilter: bool = True, every_file: bool = False
) -> list[Finding]:
    """The rule's findings on the example: in the example's own file, or with `every_file` in
    every file of the tree it writes (its `files` too, where an exact test wants none). A rule
    with its own `run_example` (IC902) returns the findings it reports, wherever they are."""
    custom = getattr(rule, "run_example", None)
    if custom is not None:  # a rule whose examples are more than code (IC902: a baseline file)
        return custom(example, root, prefilter=prefilter)
    main = write_example(root, example)
    options: dict[str, Any] = rule.default_options()
    options.update(example.options)
    engine = Engine([rule], {rule.CODE: options}, prefilter=prefilter, jobs=1, root=root, cwd=root)
    files = sorted(root.rglob("*.py"))
    result = engine.lint(files)
    if result.errors:
        raise AssertionError(f"example did not lint cleanly: {result.errors}")
    if every_file:
        return list(result.findings)
    return [f for f in result.findings if f.path == main.name]

