#!/usr/bin/env python3
"""Accuracy of the rules on real vLLM releases: every known bug site found, nothing else.

Usage:
    python bench/corpus_accuracy.py [TARBALL_OR_DIR ...] [--compare-prefilter]

With no arguments it takes every `vllm-*.tar.xz` in ../shared/corpus (beside the checkout).
Each tree's `vllm/` package is linted with the real CLI (`--no-cache`), findings are compared
with the known sites listed in the corpus README and the issues, and with the further findings
judged real instances (`DEFENDED`, each with its reason), and a table is printed. With
`--compare-prefilter` each tree is linted a second time with the prefilter disabled (every
file parsed) and the two sets of findings must be identical. Exit status 1 on any miss,
any other finding or any prefilter difference; 2 when there is nothing to check.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"

# The known sites of ../shared/corpus/README.md and the issues: (rule, path inside the tree, line).
EXPECTED: dict[str, set[tuple[str, str, int]]] = {
    "0.13.0": {
        ("IC004", "vllm/v1/spec_decode/eagle.py", 448),  # PR #32312: max_seq_len left stale
    },
    "0.18.0": {
        ("IC001", "vllm/v1/spec_decode/eagle.py", 494),
        ("IC001", "vllm/v1/spec_decode/eagle.py", 510),
        ("IC005", "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py", 148),  # PR #41162
    },
    "0.19.0": {
        ("IC001", "vllm/v1/spec_decode/eagle.py", 491),
        ("IC001", "vllm/v1/spec_decode/eagle.py", 507),
        ("IC005", "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py", 203),
    },
    "0.20.0": {
        ("IC005", "vllm/v1/worker/gpu/spec_decode/eagle/speculator.py", 276),
    },
    "0.24.0": {
        ("IC002", "vllm/v1/spec_decode/llm_base_proposer.py", 534),
        ("IC003", "vllm/model_executor/models/deepseek_mtp.py", 130),
    },
    "0.25.0": set(),
    "0.33.0": {
        # the V1 draft loop rewrites the layout in place and rebuilds from it each step, the
        # memo caches kept (findings 3); its kernel advances `seq_lens`, never the DCP
        # lengths (findings 2)
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 672),
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 790),
    },
}

# Findings beyond the listed sites that were read and judged real instances of the rule's
# invariant (the reasons are in the rule pages, docs/rules/IC004-*.md and IC005-*.md). They are
# expected too, and counted apart from the known sites.
_EXTEND = "extend_all_queries_by_N: the copy advances seq_lens, not the CPU lengths / upper bound"
_TREE = "propose_tree: the copy advances seq_lens, keeps max_seq_len (latent: tree attention recomputes it)"
_LAYOUT = "a proposer's copy of the V1 draft loop: the layout rewritten in place, the memo caches kept (findings 3)"
_LOOP_MEMO = "the V1 draft loop rewrites the layout in place and rebuilds from it each step: the memo caches keep the old layout (findings 3)"
_LOOP_DCP = "the V1 draft loop's kernel advances seq_lens in place, never dcp_local_seq_lens (findings 2)"
DEFENDED: dict[str, dict[tuple[str, str, int], str]] = {
    "0.13.0": {
        ("IC004", "vllm/v1/spec_decode/eagle.py", 760): _TREE,
        ("IC005", "vllm/v1/worker/gpu/spec_decode/eagle.py", 144): "the v2 runner's first draft loop (PR #41162's bug)",
    },
    "0.18.0": {
        ("IC004", "vllm/v1/spec_decode/eagle.py", 1023): _TREE,
        ("IC004", "vllm/v1/spec_decode/utils.py", 306): _EXTEND,
        ("IC004", "vllm/v1/spec_decode/eagle.py", 529): _LOOP_MEMO,
        ("IC004", "vllm/v1/spec_decode/eagle.py", 561): _LOOP_DCP,
    },
    "0.19.0": {
        ("IC004", "vllm/v1/spec_decode/eagle.py", 1018): _TREE,
        ("IC004", "vllm/v1/spec_decode/utils.py", 282): _EXTEND,
        ("IC004", "vllm/v1/spec_decode/eagle.py", 526): _LOOP_MEMO,
        ("IC004", "vllm/v1/spec_decode/eagle.py", 558): _LOOP_DCP,
    },
    "0.20.0": {
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 1072): _TREE,
        ("IC004", "vllm/v1/spec_decode/utils.py", 296): _EXTEND,
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 537): _LOOP_MEMO,
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 569): _LOOP_DCP,
    },
    "0.24.0": {
        ("IC004", "vllm/v1/spec_decode/utils.py", 295): _EXTEND,
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 596): _LOOP_MEMO,
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 706): _LOOP_DCP,
        ("IC004", "vllm/v1/spec_decode/step3p5.py", 380): _LAYOUT,
    },
    "0.25.0": {
        ("IC004", "vllm/v1/spec_decode/utils.py", 295): _EXTEND,
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 663): _LOOP_MEMO,
        ("IC004", "vllm/v1/spec_decode/llm_base_proposer.py", 786): _LOOP_DCP,
        ("IC004", "vllm/v1/spec_decode/step3p5.py", 378): _LAYOUT,
    },
    "0.33.0": {
        ("IC004", "vllm/v1/spec_decode/utils.py", 416): _EXTEND,
        ("IC004", "vllm/v1/spec_decode/step3p5.py", 375): _LAYOUT,
    },
}


def invariant_check_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("invariant-check")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "invariant_check.cli.commands"]


def unpack(source: Path, workdir: Path) -> tuple[str, Path]:
    match = re.search(r"vllm-(\d+\.\d+\.\d+)", source.name)
    if not match:
        raise SystemExit(f"{source}: cannot tell the release from the name (want vllm-X.Y.Z)")
    version = match.group(1)
    if source.is_dir():
        return version, source
    target = workdir / f"vllm-{version}"
    if not (target / "vllm").is_dir():
        with tarfile.open(source) as tar:
            tar.extractall(workdir, filter="data") if sys.version_info >= (3, 12) else tar.extractall(workdir)
    return version, target


def lint(tree: Path, *extra: str) -> tuple[list[dict], list[dict], float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [*invariant_check_cmd(), "lint", "--no-cache", "--format", "json", *extra, "vllm"],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1, 2) or not proc.stdout.strip():
        raise SystemExit(f"{tree}: invariant-check failed ({proc.returncode}): {proc.stderr.strip()}")
    doc = json.loads(proc.stdout)
    return doc["findings"], doc["errors"], elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", type=Path)
    parser.add_argument("--compare-prefilter", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "invariant-check-corpus")
    args = parser.parse_args()
    sources = args.sources or sorted(DEFAULT_CORPUS.glob("vllm-*.tar.xz"))
    if not sources:
        print(f"corpus_accuracy: no corpus found (looked in {DEFAULT_CORPUS}); nothing to check")
        return 2
    args.workdir.mkdir(parents=True, exist_ok=True)
    failed = False
    rows = []
    others_listed = []
    for source in sources:
        version, tree = unpack(source, args.workdir)
        findings, errors, elapsed = lint(tree)
        got = {(f["rule"], f["path"], f["line"]) for f in findings}
        expected = EXPECTED.get(version)
        if expected is None:
            expected = set()
            print(f"note: {version} has no known sites listed; every finding counts as other")
        defended = set(DEFENDED.get(version, {}))
        found = expected & got
        defended_found = defended & got
        missing = (expected | defended) - got
        others = sorted(got - expected - defended)
        prefilter = "-"
        if args.compare_prefilter:
            full, _, full_elapsed = lint(tree, "--no-prefilter")
            same = {(f["rule"], f["path"], f["line"], f["message"]) for f in full} == {
                (f["rule"], f["path"], f["line"], f["message"]) for f in findings
            }
            prefilter = f"same ({full_elapsed:.1f} s unfiltered)" if same else "DIFFERENT"
            failed |= not same
        failed |= bool(missing or others or errors)
        rows.append(
            (version, f"{len(found)}/{len(expected)}", f"{len(defended_found)}/{len(defended)}", len(others), len(errors), f"{elapsed:.2f} s", prefilter)
        )
        for rule, path, line in sorted(missing):
            others_listed.append(f"  {version}: MISSING {rule} at {path}:{line}")
        for rule, path, line in others:
            msg = next(f["message"] for f in findings if (f["rule"], f["path"], f["line"]) == (rule, path, line))
            others_listed.append(f"  {version}: OTHER {rule} {path}:{line}: {msg}")
        for e in errors:
            others_listed.append(f"  {version}: ERROR {e['path']}: {e['message']}")

    header = ("release", "known sites found", "defended instances found", "other findings", "errors", "lint time", "prefilter vs every file parsed")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    if others_listed:
        print("\n".join(others_listed))
    print("RESULT:", "FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
