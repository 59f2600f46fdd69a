#!/usr/bin/env python3
"""`lint --fix --unsafe-fixes` on real vLLM releases: what it changes, and that the result holds.

Usage:
    python bench/fix_corpus.py [TARBALL_OR_DIR ...] [--workdir DIR] [--diffs DIR]

With no arguments it takes every `vllm-*.tar.xz` in ../shared/corpus (beside the checkout).
Each release's `vllm/` package is unpacked afresh into the work folder (a folder given as a
source is copied there first: the original is never touched), linted, fixed with the real CLI
(`lint --fix --unsafe-fixes --no-cache`), then checked:

- every file the fix changed compiles;
- the fixed tree lints clean of every finding that had a whole fix: what is left are findings
  the first run reported without one, or whose fix said what it leaves (a field it cannot
  compute): never more per rule and file than the first run reported, and no error;
- only files that held a finding changed;
- a second `--fix --unsafe-fixes` changes nothing (the fixes are idempotent);
- no fix was dropped (the CLI's notes on stderr);
- every changed file is as clean under the project's own formatter and linter as the stock
  file: `ruff format --check` passes where it passed on the stock file, and `ruff check`
  reports no rule more often than on the stock file (when ruff is installed; the test extra
  has it). The settings are vLLM's: the release's `pyproject.toml` when the source has one,
  else vLLM 0.33.0's (below; the corpus tarballs hold only the `vllm/` package). They are
  written into the tree before it is fixed, so the fixes read them as they read any
  project's.

`--diffs DIR` also writes each release's unified diff (`DIR/vllm-X.Y.Z.diff`, as `--diff` prints
it) for review. Prints one table row per release; exit status 1 when any check fails, 2 when
there is nothing to check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"

# vLLM 0.33.0's ruff settings (its pyproject.toml: `[tool.ruff.lint]`, `[tool.ruff.format]`;
# no `line-length`, so ruff's 88), for sources without a pyproject.toml of their own
VLLM_RUFF = """\
line-length = 88

[lint]
select = ["D", "E", "F", "UP", "B", "ISC", "SIM", "I", "G", "INP"]
ignore = [
    "D100", "D101", "D102", "D103", "D104", "D105", "D106", "D107",
    "D205", "D209", "D301", "D400", "D401", "D404", "D415",
    "D203", "D213",
    "F405", "F403",
    "E731",
    "B905",
    "B007",
    "UP032",
    "UP042",
]

[lint.pydocstyle]
ignore-var-parameters = true

[format]
docstring-code-format = true
"""


def ruff_cmd() -> list[str] | None:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    if found:
        return [found]
    try:
        import ruff  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "ruff"]


def ruff_settings(tree: Path, source: Path) -> Path:
    """The ruff configuration the tree is checked (and fixed) with: the source's own
    `pyproject.toml` beside its `vllm/`, else vLLM 0.33.0's settings as `ruff.toml`."""
    own = (source / "pyproject.toml") if source.is_dir() else None
    if own is not None and own.is_file():
        target = tree / "pyproject.toml"
        if not target.exists():
            shutil.copyfile(own, target)
        return target
    target = tree / "ruff.toml"
    target.write_text(VLLM_RUFF)
    return target


def ruff_state(ruff: list[str], config: Path, tree: Path, rel: str, data: bytes) -> tuple[int, dict[str, int]]:
    """(lines `ruff format` would change, {rule: count} of `ruff check`) of `data` as the
    file `rel` of the tree (checked from standard input, so stock and fixed bytes are
    checked under the same name and settings)."""
    fmt = subprocess.run(
        [*ruff, "format", "--config", str(config), "--diff", "--stdin-filename", rel, "-"],
        cwd=tree, input=data, capture_output=True,
    )
    changed = sum(
        1 for line in fmt.stdout.decode("utf-8", "replace").splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    )
    chk = subprocess.run(
        [*ruff, "check", "--config", str(config), "--no-cache", "--output-format", "json", "--stdin-filename", rel, "-"],
        cwd=tree, input=data, capture_output=True,
    )
    counts: dict[str, int] = {}
    try:
        for item in json.loads(chk.stdout.decode("utf-8") or "[]"):
            counts[item.get("code") or "?"] = counts.get(item.get("code") or "?", 0) + 1
    except json.JSONDecodeError:
        counts["ruff-failed"] = 1
    return changed, counts


def invariant_check_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("invariant-check")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "invariant_check.cli.commands"]


def fresh_tree(source: Path, workdir: Path) -> tuple[str, Path]:
    match = re.search(r"vllm-(\d+\.\d+\.\d+)", source.name)
    if not match:
        raise SystemExit(f"{source}: cannot tell the release from the name (want vllm-X.Y.Z)")
    version = match.group(1)
    target = workdir / f"vllm-{version}"
    if target.exists():
        shutil.rmtree(target)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        with tarfile.open(source) as tar:
            tar.extractall(workdir, filter="data") if sys.version_info >= (3, 12) else tar.extractall(workdir)
    return version, target


def snapshot(tree: Path) -> dict[str, str]:
    return {
        str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((tree / "vllm").rglob("*.py"))
    }


def run(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*invariant_check_cmd(), "lint", "--no-cache", *args, "vllm"], cwd=tree, capture_output=True, text=True)


def lint_json(tree: Path) -> tuple[list[dict], list[dict]]:
    proc = run(tree, "--format", "json")
    if proc.returncode not in (0, 1, 2) or not proc.stdout.strip():
        raise SystemExit(f"{tree}: invariant-check failed ({proc.returncode}): {proc.stderr.strip()}")
    doc = json.loads(proc.stdout)
    return doc["findings"], doc["errors"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", type=Path)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "invariant-check-fix-corpus")
    parser.add_argument("--diffs", type=Path, help="write each release's diff to DIR/vllm-X.Y.Z.diff")
    args = parser.parse_args()
    sources = args.sources or sorted(DEFAULT_CORPUS.glob("vllm-*.tar.xz"))
    if not sources:
        print(f"fix_corpus: no corpus found (looked in {DEFAULT_CORPUS}); nothing to check")
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.diffs:
        args.diffs.mkdir(parents=True, exist_ok=True)
    rows, problems = [], []
    ruff = ruff_cmd()
    for source in sources:
        version, tree = fresh_tree(source, args.workdir)
        config = ruff_settings(tree, source)
        before, errors_before = lint_json(tree)
        held = {f["path"] for f in before}
        pristine = snapshot(tree)
        stock = {p: (tree / p).read_bytes() for p in held if (tree / p).is_file()}
        if args.diffs:
            diff = run(tree, "--diff", "--unsafe-fixes")
            (args.diffs / f"vllm-{version}.diff").write_text(diff.stdout)
        start = time.perf_counter()
        fixed = run(tree, "--fix", "--unsafe-fixes", "--show-fixes")
        elapsed = time.perf_counter() - start
        after = snapshot(tree)
        changed = sorted(p for p in after if after[p] != pristine.get(p))
        # what the CLI says it fixed, and any fix it dropped
        n_fixed = sum(1 for line in fixed.stdout.splitlines() if re.match(r"\s+\S+:\d+:\d+: IC\d+ ", line))
        dropped = [line for line in fixed.stderr.splitlines() if "fix dropped" in line or "did not converge" in line]
        not_compiling = []
        for rel in changed:
            try:
                compile((tree / rel).read_bytes(), rel, "exec", dont_inherit=True)
            except SyntaxError as exc:
                not_compiling.append(f"{rel}: {exc.msg} (line {exc.lineno})")
        style_problems = []
        if ruff is not None:
            for rel in changed:
                if rel not in stock:
                    continue
                fmt0, chk0 = ruff_state(ruff, config, tree, rel, stock[rel])
                fmt1, chk1 = ruff_state(ruff, config, tree, rel, (tree / rel).read_bytes())
                if fmt1 > fmt0:
                    style_problems.append(
                        f"{rel}: `ruff format` would change {fmt1} line(s) of the fixed file, {fmt0} of the stock one"
                    )
                worse = {c: n for c, n in chk1.items() if n > chk0.get(c, 0)}
                if worse:
                    what = ", ".join(f"{c} {chk0.get(c, 0)} -> {n}" for c, n in sorted(worse.items()))
                    style_problems.append(f"{rel}: `ruff check` reports more on the fixed file: {what}")
        remaining, errors = lint_json(tree)
        # a finding with no fix stays (the rule pages say which get none); any other is left
        # by a fix that did not remove it, or is new
        # by rule and file: a partial fix (it says what it leaves) changes the message of the
        # finding it leaves, and line numbers move when a fix above them adds lines
        def key_of(f: dict) -> tuple[str, str]:
            return f["rule"], f["path"]

        pool: dict[tuple[str, str], int] = {}
        for f in before:
            key = key_of(f)
            pool[key] = pool.get(key, 0) + 1
        unexpected = []
        for f in remaining:
            key = key_of(f)
            if pool.get(key, 0) > 0:
                pool[key] -= 1
            else:
                unexpected.append(f)
        unfixed = len(remaining) - len(unexpected)
        remaining = unexpected
        outside = [p for p in changed if p not in held]
        second = run(tree, "--fix", "--unsafe-fixes")
        again = sorted(p for p, h in snapshot(tree).items() if h != after.get(p))
        if second.returncode not in ((0, 1) if unfixed else (0,)):
            problems.append(f"  {version}: a second --fix exits {second.returncode}: {second.stderr.strip()[:200]}")
        ok = not (
            not_compiling or remaining or errors or outside or again or dropped or errors_before
            or second.returncode not in ((0, 1) if unfixed else (0,))
            or style_problems
        )
        style = "not checked (no ruff)" if ruff is None else ("yes" if not style_problems else "NO")
        rows.append((
            version, len(before), n_fixed, len(changed), "yes" if not not_compiling else "NO", style,
            f"{len(remaining) + len(errors)} (+{unfixed} with no fix)", "yes" if not outside else "NO", len(again), f"{elapsed:.1f} s",
        ))
        for item in style_problems:
            problems.append(f"  {version}: STYLE {item}")
        for item in not_compiling:
            problems.append(f"  {version}: DOES NOT COMPILE {item}")
        for f in remaining:
            problems.append(f"  {version}: LEFT {f['rule']} {f['path']}:{f['line']}: {f['message'][:100]}")
        for e in errors + errors_before:
            problems.append(f"  {version}: ERROR {e['path']}: {e['message']}")
        for p in outside:
            problems.append(f"  {version}: CHANGED A FILE WITHOUT FINDINGS {p}")
        for p in again:
            problems.append(f"  {version}: NOT IDEMPOTENT {p}")
        for line in dropped:
            problems.append(f"  {version}: {line}")
        if not ok and not problems:
            problems.append(f"  {version}: failed")
    if ruff is None:
        print("fix_corpus: ruff is not installed: the fixed files' style was not checked (pip install ruff)")
    header = ("release", "findings", "fixed", "files changed", "compiles", "as clean under ruff", "left after fixing", "only files with findings", "changed by a second run", "fix time")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    if problems:
        print("\n".join(problems))
    print("RESULT:", "FAIL" if problems else "PASS")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
