#!/usr/bin/env python3
"""Learns the derived fields of the upstream metadata classes from real releases and writes
`invariant_check/learned/DERIVATIONS.json`, the table the analysis starts from when the
linted project does not show a derivation itself (see `invariant_check/analysis/derivations.py`).

Every module of every release is read (not the package's own tests); a derivation is kept when the field and a source are
both declared fields of one class of the family in that release (a data class that holds a
batch's token layout: sequence or context lengths, query offsets, positions, slots or block
tables, see `derivations.holds_layout`), and, for `built` and `advanced-with` evidence, when
the source is such a layout field itself (`derivations.in_family`) and at least two different
functions show it (over all releases: one function that happens to compute one keyword from
another is not yet the code's rule). A memo is the class's own code: one is enough.

    python scripts/gen_derivations.py              # from ../shared/corpus/vllm-*.tar.xz
    python scripts/gen_derivations.py --check      # exit 1 when the checked-in table differs
    python scripts/gen_derivations.py --source DIR_OR_TARBALL ...
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from gen_models import SGLANG_RELEASES, _version_key, default_wheel_cache, find_sglang_wheel, read_release  # noqa: E402

from invariant_check.analysis import derivations as D  # noqa: E402

OUT = REPO / "invariant_check" / "learned" / "DERIVATIONS.json"
MIN_FUNCTIONS = 2
TESTS = {"test", "tests", "testing"}


def _learn_release(job: tuple[Path, str]) -> tuple[str, list[dict], list[list[str]]]:
    """(version, derivations found, declared fields of each class of the family)."""
    source, package = job
    version, files = read_release(source, package)
    found: list[dict] = []
    classes: list[list[str]] = []
    for rel, data in sorted(files.items()):
        if TESTS & set(rel.split("/")[:-1]):
            continue  # a package's own tests build objects to exercise them, not by its rules
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                declared = D.declared_fields(node)
                if len(declared) >= 2 and D.holds_layout(declared):
                    classes.append(sorted(declared))
        for d in D.learn_tree(tree, rel, project=False):
            found.append(d.to_json())
    return version, found, classes


def _function(d: dict) -> str:
    # the function the evidence sits in (its file and name, not its line: the same function
    # in two releases is one piece of evidence)
    return d["where"].rsplit(":", 1)[0] + "::" + d.get("function", "")


def generate(sources: list[Path], package: str = "vllm") -> dict:
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_learn_release, [(s, package) for s in sources]))
    releases = sorted((r[0] for r in results), key=_version_key)
    # the metadata classes: data classes (declared fields) that hold a batch's token layout
    # (`derivations.holds_layout`)
    holders = {frozenset(fields) for r in results for fields in r[2]}
    by_field: dict[str, list[frozenset[str]]] = {}
    for fs in holders:
        for f in fs:
            by_field.setdefault(f, []).append(fs)
    pairs: dict[tuple[str, str], dict] = {}
    for version, found, _ in sorted(results, key=lambda r: _version_key(r[0])):
        for d in found:
            field = d["field"]
            for source in d["sources"]:
                if not any((source in fs or D.variant_of(source) in fs) for fs in by_field.get(field, ())):
                    continue  # not two fields of one metadata class: a keyword of a call, a local
                rec = pairs.setdefault((field, source), {"kinds": set(), "functions": set(), "first": None, "releases": set(), "lead": False})
                rec["kinds"].add(d["kind"])
                rec["lead"] = rec["lead"] or d.get("lead", False)
                rec["functions"].add(_function(d))
                rec["releases"].add(version)
                if rec["first"] is None or (d["kind"] == "memo" and rec["first"][1]["kind"] != "memo"):
                    rec["first"] = (version, d)
    # a field advanced together with others follows the one that feeds cached state (a memo's
    # source) or the one advanced first
    memo_sources = {source for (_, source), rec in pairs.items() if "memo" in rec["kinds"]}
    out = []
    for (field, source), rec in sorted(pairs.items()):
        if "memo" not in rec["kinds"] and len(rec["functions"]) < MIN_FUNCTIONS:
            continue
        if "memo" not in rec["kinds"] and not D.holds_layout([source]):
            continue  # computed beside the layout, not from it: a draft step never moves it
        if rec["kinds"] == {"advanced-with"} and not (source in memo_sources or D.variant_of(source) in memo_sources):
            continue
        version, first = rec["first"]
        kind = "memo" if "memo" in rec["kinds"] else ("built" if "built" in rec["kinds"] else "advanced-with")
        rs = sorted(rec["releases"], key=_version_key)
        more = len(rec["functions"]) - 1
        out.append({
            "field": field,
            "sources": [source],
            "kind": kind,
            "where": f"{package} {version} {first['where']}",
            "how": first["how"] + (f" (and {more} other function{'s' if more > 1 else ''})" if more else ""),
            "releases": f"{rs[0]}-{rs[-1]}" if len(rs) > 1 else rs[0],
        })
    for d in out:
        d["engine"] = package
    return {"generated-from": [f"{package} {v}" for v in releases], "derivations": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", nargs="*", type=Path, help="vLLM release tarballs or unpacked release folders")
    ap.add_argument("--sglang-wheel", nargs="*", type=Path, help="SGLang wheels (default: as scripts/gen_models.py finds them)")
    ap.add_argument("--no-download", action="store_true", help="never run pip download for the SGLang wheel")
    ap.add_argument("--check", action="store_true", help="exit 1 when the checked-in table differs from a fresh one")
    args = ap.parse_args(argv)
    sources = args.source or sorted((REPO.parent / "shared" / "corpus").glob("vllm-*.tar.xz"))
    if not sources:
        print("gen_derivations: no release sources (../shared/corpus/vllm-*.tar.xz or --source)", file=sys.stderr)
        return 2
    table = generate(sources, "vllm")
    wheels = list(args.sglang_wheel or [])
    why = ""
    if not wheels:
        for version in SGLANG_RELEASES:
            wheel, why = find_sglang_wheel(version, default_wheel_cache(), not args.no_download)
            if wheel is None:
                break
            wheels.append(wheel)
    if wheels and not why:
        sglang = generate(wheels, "sglang")
    else:
        # keep what the checked-in table learned from SGLang (as gen_models keeps its models)
        old = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {}
        sglang = {"generated-from": [g for g in old.get("generated-from", []) if g.startswith("sglang")],
                  "derivations": [d for d in old.get("derivations", []) if d.get("engine") == "sglang"]}
        print(f"gen_derivations: NOTE: the SGLang part was {'not checked' if args.check else 'not regenerated'}, kept as checked in: {why}", file=sys.stderr)
    table["generated-from"] += sglang["generated-from"]
    table["derivations"] += sglang["derivations"]
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print("gen_derivations: the learned table is stale; run scripts/gen_derivations.py", file=sys.stderr)
            return 1
        print("gen_derivations: learned derivations up to date")
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"gen_derivations: {len(table['derivations'])} derivations from {', '.join(table['generated-from'])} -> {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
