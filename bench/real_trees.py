#!/usr/bin/env python3
"""Accuracy of the rules on other engines, plugins and forks: the expected findings, nothing else.

Usage:
    python bench/real_trees.py --trees DIR [--python PATH] [--spec] [NAME ...]

bench/real_trees.json lists the trees (repository, commit, spec-decode paths) and every finding
expected on each, with its verdict (real or latent) and the reason. Each listed tree present as
DIR/<name> (or only the trees NAMEd) is linted whole with the real CLI, from the tree's root
(`lint --no-cache --format json .`), and with `--spec` a second time on its spec-decode paths
alone, where the expected findings under those paths must come out the same. Findings are
compared with the expected ones by rule, path and line (within `--line-tolerance` lines), and a
table is printed. A tree that is absent is listed with the commands that fetch it; the trees'
code is never part of this repository.

`--python` names the interpreter whose invariant-check lints the trees, and whose environment
answers the trees' imports from outside them (default: the one running this script). In a
venv without vLLM the models bundled with invariant-check answer vLLM's imports, which is how
a plugin's tree is linted without vLLM installed.

Exit status 1 on a missed expected finding, any other finding, a linter error or failure, or a
git checkout at another commit; 2 when no tree is present, or on bad arguments or a bad list.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LIST = REPO / "bench" / "real_trees.json"
VERDICTS = ("real", "latent")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
COMMIT = re.compile(r"[0-9a-f]{40}\Z")
RULE = re.compile(r"IC\d{3}\Z")


class BadInput(Exception):
    """A one-line reason the list or the arguments cannot be used."""


def _relative(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
        raise BadInput(f"{where}: want a path relative to the tree root, got {value!r}")
    return posixpath.normpath(value)


def load_trees(path: Path) -> list[dict]:
    """The trees of the list at `path`, checked; BadInput names the first bad entry."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: cannot read the list of trees ({exc})") from None
    trees = doc.get("trees") if isinstance(doc, dict) else None
    if not isinstance(trees, list):
        raise BadInput(f"{path}: want an object with a list `trees`")
    seen = set()
    for i, tree in enumerate(trees):
        where = f"{path}: trees[{i}]"
        if not isinstance(tree, dict):
            raise BadInput(f"{where}: want an object")
        name = tree.get("name")
        if not isinstance(name, str) or not NAME.match(name) or name in seen:
            raise BadInput(f"{where}: `name` {name!r} is not a unique folder name")
        seen.add(name)
        where = f"{path}: tree {name}"
        if not isinstance(tree.get("repository"), str) or not tree["repository"].startswith("https://"):
            raise BadInput(f"{where}: `repository` must be an https URL")
        if not isinstance(tree.get("commit"), str) or not COMMIT.match(tree["commit"]):
            raise BadInput(f"{where}: `commit` must be 40 lower-case hex digits")
        spec = tree.get("spec_paths")
        if not isinstance(spec, list) or not spec:
            raise BadInput(f"{where}: `spec_paths` must be a non-empty list")
        tree["spec_paths"] = [_relative(p, f"{where}: spec_paths") for p in spec]
        expected = tree.get("expected")
        if not isinstance(expected, list):
            raise BadInput(f"{where}: `expected` must be a list")
        for j, exp in enumerate(expected):
            at = f"{where}: expected[{j}]"
            if not isinstance(exp, dict):
                raise BadInput(f"{at}: want an object")
            if not isinstance(exp.get("rule"), str) or not RULE.match(exp["rule"]):
                raise BadInput(f"{at}: `rule` must be a code like IC004")
            exp["path"] = _relative(exp.get("path"), f"{at}: path")
            if not isinstance(exp.get("line"), int) or isinstance(exp["line"], bool) or exp["line"] < 1:
                raise BadInput(f"{at}: `line` must be a positive integer")
            if exp.get("verdict") not in VERDICTS:
                raise BadInput(f"{at}: `verdict` must be one of {', '.join(VERDICTS)}")
            reason = exp.get("reason")
            if not isinstance(reason, str) or not reason.strip() or "\n" in reason:
                raise BadInput(f"{at}: `reason` must be one non-empty line")
    return trees


def linter_cmd(python: str) -> list[str]:
    exe = Path(python).with_name("invariant-check")
    return [str(exe)] if exe.is_file() else [python, "-m", "invariant_check.cli.commands"]


def describe_linter(python: str) -> str:
    version = subprocess.run([*linter_cmd(python), "--version"], capture_output=True, text=True)
    if version.returncode != 0:
        raise BadInput(f"{python}: cannot run invariant-check ({(version.stderr.strip().splitlines() or ['no output'])[-1]})")
    probe = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
                           capture_output=True, text=True)
    if probe.stdout.strip() == "True":
        where = "vLLM installed there: it answers vLLM's imports"
    else:
        where = "no vLLM there: the bundled models answer vLLM's imports"
    return f"{version.stdout.strip()}, run by {python} ({where})"


def checked_out_commit(tree: Path) -> str | None:
    """HEAD of a git checkout, or None when the tree is not one (e.g. a `git archive` extract)."""
    if not (tree / ".git").exists():
        return None
    proc = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def lint(python: str, tree: Path, targets: list[str], jobs: int) -> tuple[dict, float]:
    """The JSON report of one lint run from the tree's root, and its wall time in seconds."""
    start = time.perf_counter()
    proc = subprocess.run(
        [*linter_cmd(python), "lint", "--no-cache", "--format", "json", "--jobs", str(jobs), *targets],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    try:
        doc = json.loads(proc.stdout) if proc.returncode in (0, 1, 2) else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "findings" not in doc:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"invariant-check exited {proc.returncode}: {last}")
    return doc, elapsed


def under(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def match(expected: list[dict], findings: list[dict], tolerance: int) -> tuple[list, list, list]:
    """(expected, finding) pairs, the expected ones not found, and the findings left over.

    Each expected finding takes the nearest unclaimed finding of the same rule and path within
    `tolerance` lines, so a site that moved a line or two still counts and two sites close
    together are not both claimed by one finding.
    """
    left = [dict(f, path=posixpath.normpath(f["path"])) for f in findings]
    found, missing = [], []
    for exp in sorted(expected, key=lambda e: (e["path"], e["line"], e["rule"])):
        near = [f for f in left if f["rule"] == exp["rule"] and f["path"] == exp["path"]
                and abs(f["line"] - exp["line"]) <= tolerance]
        if near:
            best = min(near, key=lambda f: abs(f["line"] - exp["line"]))
            left.remove(best)
            found.append((exp, best))
        else:
            missing.append(exp)
    return found, missing, left


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these trees (default: every listed tree)")
    parser.add_argument("--trees", type=Path, required=True, metavar="DIR", help="the folder holding DIR/<name>")
    parser.add_argument("--python", default=sys.executable, metavar="PATH",
                        help="the interpreter whose invariant-check lints (default: this one)")
    parser.add_argument("--spec", action="store_true", help="also lint each tree's spec-decode paths alone")
    parser.add_argument("--expected", type=Path, default=DEFAULT_LIST, metavar="FILE",
                        help="the list of trees and expected findings (default: bench/real_trees.json)")
    parser.add_argument("--jobs", type=int, default=1, help="passed to `lint --jobs` (default: 1)")
    parser.add_argument("--line-tolerance", type=int, default=3, metavar="N",
                        help="an expected finding matches a finding up to N lines away (default: 3)")
    args = parser.parse_args()
    try:
        trees = load_trees(args.expected)
        unknown = sorted(set(args.names) - {t["name"] for t in trees})
        if unknown:
            raise BadInput(f"{args.expected}: no tree named {', '.join(unknown)}")
        python = args.python if "/" in args.python else (shutil.which(args.python) or args.python)
        if not Path(python).is_file():
            raise BadInput(f"--python {args.python}: no such interpreter")
        linter = describe_linter(python)
    except BadInput as exc:
        print(f"real_trees: {exc}", file=sys.stderr)
        return 2
    if args.names:
        trees = [t for t in trees if t["name"] in args.names]

    print(f"linter: {linter}")
    rows, notes = [], []
    totals = []  # per whole-tree run: files checked, parsed, seconds, found, expected, others, errors
    failed = False
    present = unverified = 0
    for tree in trees:
        name, commit = tree["name"], tree["commit"]
        root = args.trees / name
        if not root.is_dir():
            rows.append((name, commit[:12], "absent", "-", "-", "-", "-"))
            target = shlex.quote(str(args.trees / name))
            notes.append(f"  {name}: absent; get it with:\n"
                         f"    git clone {tree['repository']} {target} && git -C {target} checkout {commit}")
            continue
        present += 1
        head = checked_out_commit(root)
        if head is None:
            unverified += 1
        elif head != commit:
            failed = True
            notes.append(f"  {name}: CHECKOUT at {head}, not the listed {commit}")
        scopes = [("", ["."], tree["expected"])]
        if args.spec:
            paths = [p for p in tree["spec_paths"] if (root / p).exists()]
            for p in tree["spec_paths"]:
                if p not in paths:
                    failed = True
                    notes.append(f"  {name}: SPEC PATH {p} is not in the tree")
            if paths:
                scopes.append((", spec paths", paths, [e for e in tree["expected"] if under(e["path"], paths)]))
        for label, targets, expected in scopes:
            try:
                doc, elapsed = lint(python, root, targets, args.jobs)
            except RuntimeError as exc:
                failed = True
                rows.append((name + label, commit[:12], "-", "-", f"0/{len(expected)}", "-", "linter failed"))
                notes.append(f"  {name}{label}: LINTER FAILED: {exc}")
                continue
            found, missing, others = match(expected, doc["findings"], args.line_tolerance)
            errors = doc.get("errors", [])
            failed |= bool(missing or others or errors)
            summary = doc.get("summary", {})
            rows.append((name + label, commit[:12], f"{summary.get('files_checked', '?')} / {summary.get('files_parsed', '?')}",
                         f"{elapsed:.2f} s", f"{len(found)}/{len(expected)}", len(others), len(errors)))
            if not label:
                totals.append((summary.get("files_checked", 0), summary.get("files_parsed", 0), elapsed,
                               len(found), len(expected), len(others), len(errors)))
            for exp, got in found:
                moved = f" (listed at line {exp['line']})" if got["line"] != exp["line"] else ""
                notes.append(f"  {name}{label}: found {exp['rule']} {exp['path']}:{got['line']}{moved}, {exp['verdict']}")
            for exp in missing:
                notes.append(f"  {name}{label}: MISSING {exp['rule']} {exp['path']}:{exp['line']} ({exp['verdict']})")
            for f in others:
                notes.append(f"  {name}{label}: OTHER {f['rule']} {f['path']}:{f['line']}: {f['message']}")
            for e in errors:
                where = f"{e.get('path')}:{e['line']}" if e.get("line") else str(e.get("path"))
                notes.append(f"  {name}{label}: ERROR {where}: {e.get('message')}")

    if len(totals) > 1:
        checked, parsed, seconds, n_found, n_expected, n_others, n_errors = (sum(c) for c in zip(*totals))
        rows.append((f"total, {len(totals)} whole trees", "", f"{checked} / {parsed}", f"{seconds:.2f} s",
                     f"{n_found}/{n_expected}", n_others, n_errors))
    header = ("tree", "commit", "files (checked / parsed)", "time", "expected found", "other findings", "errors")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    if notes:
        print("\n".join(notes))
    if unverified:
        print(f"note: {unverified} of {present} present trees are not git checkouts; taken to be at the listed commit")
    absent = len(trees) - present
    if not present:
        print(f"RESULT: NOTHING TO CHECK (no listed tree under {args.trees})")
        return 2
    print(f"RESULT: {'FAIL' if failed else 'PASS'} ({present} tree{'s' if present != 1 else ''} linted, {absent} absent)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
