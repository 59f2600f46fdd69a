#!/usr/bin/env python3
"""How fast `invariant-check lint` is on a real tree, next to a floor and a plain libcst linter.

One run prints one table, on a private copy of the tree:
  - ours, cold (fresh cache folder) and warm (second run, same cache), whole tree;
  - ours on one file, as pre-commit runs it (a new process, interpreter start included), with
    the whole tree's cache warm (the project facts cached): the file unchanged, the file just
    edited (re-analysed, the rest of the project from the cache), and a new file with a finding;
  - a 50,000-line file holding a trigger, next to a bare `libcst.parse_module` of it;
  - peak memory of a cold run;
  - `ruff check --select E9 --no-cache` on the same tree: the floor for reading every file;
  - Fixit 2 with two trivial rules equivalent to ours: what a libcst linter costs without
    prefiltering and caching (optional: --fixit PATH);
and the ratios between them. Wall times are medians over --repeat runs; CPU time is user +
system of the whole process tree, which stays meaningful when other jobs share the cores.

With --scaling (or --scaling-only), also: one generated file of N candidate definitions of one
shape (N = 500, 2,000, 5,000 by default), for several shapes, one per rule's candidates (see
SCALING_SHAPES): lint time must grow linearly with the number of candidates.

    .venv/bin/python bench/lint_speed.py                      # vLLM 0.33.0 in /tmp/corpus
    .venv/bin/python bench/lint_speed.py ../shared/corpus/vllm-0.24.0.tar.xz
    .venv/bin/python bench/lint_speed.py --fixit /tmp/fixit-venv/bin/fixit --fixit-sample 300
    .venv/bin/python bench/lint_speed.py --per-rule --profile  # where the time goes
    .venv/bin/python bench/lint_speed.py --scaling-only        # generated files of N candidates

Fixit belongs in its own virtualenv (it pins its own libcst), e.g.
    python3 -m venv /tmp/fixit-venv && /tmp/fixit-venv/bin/pip install 'fixit>=2'

Exit status: 0 when every target is met, 1 when one is missed, 2 when a timed run could not do
its job (a lint that exited 2, or a positive control that did not find its finding: then the
times measure nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TREE = Path("/tmp/corpus/vllm-0.33.0/vllm")
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"
DEFAULT_UNPACK = Path("/tmp/corpus")
# A known IC003 site (README of the corpus) and two clean files of 0.33.0: one that no rule's
# trigger matches (read, never parsed) and one that is parsed (it calls set_skip_topk).
FINDING_FILE = Path("/tmp/corpus/vllm-0.24.0/vllm/model_executor/models/deepseek_mtp.py")
CLEAN_FILES = ("__init__.py", "v1/worker/gpu/spec_decode/mtp/speculator.py")
SYNTHETIC_FINDING = """\
import torch.nn as nn


class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
"""

# Two Fixit rules that do what our rules' per-file part does at its simplest: IC003's class
# check and the call site IC002 starts from. Deliberately trivial, so Fixit's cost is the
# framework's (parse every file, metadata, one visitor per rule), not the rules'.
FIXIT_RULES = '''\
import libcst as cst
from fixit import LintRule


class SwitchWithoutCompaction(LintRule):
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        names = {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)}
        if "set_skip_topk" in names and "compact_topk_indices" not in names:
            self.report(node.name, "set_skip_topk without compact_topk_indices")


class SkipTopkCall(LintRule):
    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "set_skip_topk":
            self.report(node, "set_skip_topk call")
'''

# Targets (issues 2 and 8), on the 2-core development machine.
TARGET_COLD_VS_RUFF = 3.0
TARGET_WARM_S = 0.5
TARGET_ONE_FILE_S = 0.4
TARGET_PEAK_MB = 300
TARGET_BIG_VS_LIBCST = 2.0
BIG_LINES = 50_000
# Issue 14: 2,000 candidates in one file lint in at most 5x the time of 500; 5,000 in under 60 s.
TARGET_SCALING_RATIO = 5.0
TARGET_SCALING_MAX_S = 60.0
SCALING_SIZES = (500, 2_000, 5_000)


@dataclass
class Run:
    wall: float
    cpu: float
    rc: int
    stdout: str
    stderr: str


@dataclass
class Series:
    runs: list[Run] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def wall_min(self) -> float:
        return min(r.wall for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run(cmd, cwd=None, env=None, timeout=None) -> Run:
    # Children's CPU is accounted to us once they are reaped: the difference is this run's.
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    res = subprocess.run([str(c) for c in cmd], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    return Run(wall, _children_cpu() - cpu0, res.returncode, res.stdout, res.stderr)


def repeat(n: int, make_cmd, **kw) -> Series:
    s = Series()
    for i in range(n):
        cmd = make_cmd(i)
        s.runs.append(run(cmd, **kw))
    return s


# -- tree -----------------------------------------------------------------------------------------

def _unpack(tarball: Path, dest: Path) -> Path:
    with tarfile.open(tarball) as tf:
        top = tf.getmembers()[0].name.split("/")[0]
        target = dest / top
        if not target.exists():
            print(f"unpacking {tarball} -> {dest}", file=sys.stderr)
            dest.mkdir(parents=True, exist_ok=True)
            kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tf.extractall(dest, **kw)
    return target / "vllm" if (target / "vllm").is_dir() else target


def resolve_tree(arg: str | None, corpus: Path, unpack_to: Path) -> Path:
    if arg and re.search(r"\.tar(\.(xz|gz|bz2))?$|\.tgz$", arg):
        return _unpack(Path(arg), unpack_to)
    tree = Path(arg) if arg else DEFAULT_TREE
    if tree.is_dir():
        return tree
    # /tmp/corpus/vllm-0.33.0/vllm missing: unpack vllm-0.33.0.tar.xz from the shared corpus.
    release = tree.parent.name if tree.name == "vllm" else tree.name
    tarball = corpus / f"{release}.tar.xz"
    if tarball.is_file():
        return _unpack(tarball, tree.parent.parent if tree.name == "vllm" else tree.parent)
    sys.exit(f"no tree at {tree} and no {tarball} to unpack")


def py_files(tree: Path) -> list[Path]:
    return sorted(p for p in tree.rglob("*.py") if p.is_file())


# -- memory ---------------------------------------------------------------------------------------

# The dedicated parent: ru_maxrss of RUSAGE_CHILDREN is the largest single process among its
# reaped descendants (our main process or one parse worker), unpolluted by ruff or Fixit.
MEM_HELPER = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)\n"
)


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
                out += kids
                todo += kids
        except OSError:
            continue
    return out


def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_memory(cmd) -> dict:
    """Largest single process (exact, from the kernel) and the process tree's sum, sampled
    from /proc every 10 ms: RSS (counts pages that forked workers share with the parent once
    per process, so an upper bound) and PSS (shares them out, the honest total)."""
    helper = subprocess.Popen([sys.executable, "-c", MEM_HELPER, *map(str, cmd)], stdout=subprocess.PIPE, text=True)
    peak_rss = peak_pss = peak_procs = 0
    while helper.poll() is None:
        pids = _descendants(helper.pid)
        peak_rss = max(peak_rss, sum(_status_kb(p, "VmRSS:") for p in pids))
        peak_pss = max(peak_pss, sum(_pss_kb(p) for p in pids))
        peak_procs = max(peak_procs, len(pids))
        time.sleep(0.01)
    maxrss_kb, rc = helper.stdout.read().split()
    return {
        "max_single_mb": int(maxrss_kb) / 1024,
        "tree_rss_mb": peak_rss / 1024,
        "tree_pss_mb": peak_pss / 1024,
        "procs": peak_procs,
        "rc": int(rc),
    }


# -- helpers --------------------------------------------------------------------------------------

def summary_of(r: Run) -> dict:
    try:
        return json.loads(r.stdout)["summary"]
    except (ValueError, KeyError, TypeError):
        return {}


def version_of(cmd) -> str:
    try:
        r = run([*cmd, "--version"])
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError):
        return "?"


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "invariant_check", "rules"],
                               check=False, cwd=REPO, capture_output=True, text=True).stdout.strip()
        untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", "invariant_check", "rules"],
                                   check=False, cwd=REPO, capture_output=True, text=True).stdout.strip()
        return rev + (" + uncommitted changes in invariant_check/ or rules/" if dirty or untracked else "")
    except OSError:
        return "?"


def fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x:.2f} s" if x < 10 else f"{x:.1f} s")


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "MISSED")


def importtime_top(stderr: str, n: int = 10) -> list[tuple[str, float]]:
    """Top-level imports (those not nested in another) by cumulative microseconds."""
    tops = []
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) == 1:
            tops.append((m.group(4), int(m.group(2)) / 1e6))
    return sorted(tops, key=lambda t: -t[1])[:n]


# -- generated candidates ---------------------------------------------------------------------------

# One file of N definitions that a rule analyses ("candidates"), for each rule's kind of
# candidate: a cost per candidate that grows with the file (a scan of every definition, or of
# the whole text, per candidate) shows as a 2,000/500 ratio far above 4. Half of the candidates
# of most shapes are findings, the other half the fixed code, so both verdicts are reached;
# some carry multi-line docstrings (prose the needs skip).
SCALING_HEAD = """\
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class CommonAttentionMetadata:
    seq_lens: torch.Tensor
    max_seq_len: int
    seq_lens_cpu: torch.Tensor


def update_draft_inputs(draft_tokens, input_buffers):
    input_buffers.input_ids[: len(draft_tokens)] = draft_tokens
    input_buffers.positions += 1
    input_buffers.seq_lens += 1
"""


def _ic004_functions(i: int) -> str:
    # the shape of issue 14: three-line functions, each advancing its parameter (its callers
    # are looked up: none)
    return f"def step_{i}(md):\n    md.seq_lens += 1\n    return md\n"


def _ic004_helpers(i: int) -> str:
    # N classes with a helper of the same name that advances its parameter, called by a
    # typed method: the helper's callers are looked up among N call sites of that name
    fix = "        md.max_seq_len += 1\n        md.seq_lens_cpu += 1\n" if i % 2 else ""
    return (f"class Drafter{i}:\n"
            f"    def advance(self, md):\n"
            f"        md.seq_lens += 1\n{fix}\n"
            f"    def propose(self, md: CommonAttentionMetadata):\n"
            f"        for _ in range(self.num_steps):\n"
            f"            self.advance(md)\n"
            f"            self.run_model(md)\n")


def _ic002_switches(i: int) -> str:
    compact = "        self.model.model.compact_topk_indices(token_indices_to_sample)\n" if i % 2 else ""
    return (f"class Proposer{i}:\n"
            f'    """Drafts with top-k reuse.\n\n    Steps after the first reuse the shared buffer.\n    """\n\n'
            f"    def propose(self, token_indices_to_sample):\n"
            f"        hidden = self.model(**self.inputs)\n"
            f"        self.model.model.set_skip_topk(True)\n{compact}"
            f"        for _ in range(self.num_steps - 1):\n"
            f"            hidden = self.model(**self.inputs)\n"
            f"        return hidden\n")


def _ic003_classes(i: int) -> str:
    # a third with the compaction method; bases alternate between a known outside class and
    # a name nothing binds (the short-name fallback searches the project for it)
    base = "nn.Module" if i % 2 else "MissingBase"
    compact = ("\n    def compact_topk_indices(self, slot_ids):\n"
               "        self.buf[: slot_ids.numel()] = self.buf[slot_ids]\n") if i % 3 == 0 else ""
    return f"class Predictor{i}({base}):\n    def set_skip_topk(self, skip):\n        self.skip = skip\n{compact}"


def _ic005_loops(i: int) -> str:
    rebuild = "        attn_metadata = self.build_draft_attn_metadata(num_tokens)\n" if i % 2 else ""
    return (f"def draft_{i}(self, num_tokens, attn_metadata):\n"
            f'    """Runs the draft steps.\n\n    Each step advances the inputs.\n    """\n'
            f"    for step in range(1, self.num_steps):\n{rebuild}"
            f"        hidden = self.run_model(num_tokens, attn_metadata)\n"
            f"        update_draft_inputs(self.sample(hidden), self.input_buffers)\n")


def _ic001_loops(i: int) -> str:
    # the metadata of every group is handed on (returned), the type checked after the loop
    # (a finding) or in it (fixed)
    check = "if not isinstance(attn_metadata, FlashAttentionMetadata):\n{pad}    raise ValueError('unsupported')\n"
    inside = check.format(pad="        ") if i % 2 == 0 else ""
    after = check.format(pad="    ") if i % 2 else ""
    return (f"def build_{i}(self, groups):\n"
            f"    per_layer = {{}}\n"
            f"    for group in groups:\n"
            f"        attn_metadata = group.build()\n"
            f"{'        ' + inside if inside else ''}"
            f"        for name in group.layer_names:\n"
            f"            per_layer[name] = attn_metadata\n"
            f"{'    ' + after if after else ''}"
            f"    return per_layer\n")


# name -> (what a candidate is, the file's head, one candidate's code)
SCALING_SHAPES = {
    "ic004-functions": ("IC004: function advancing `md.seq_lens` (issue 14's shape)", "", _ic004_functions),
    "ic004-helpers": ("IC004: class whose `advance` helper is called by a typed method", SCALING_HEAD, _ic004_helpers),
    "ic002-switches": ("IC002: class whose `propose` switches to top-k reuse", SCALING_HEAD, _ic002_switches),
    "ic003-classes": ("IC003: class defining `set_skip_topk`", SCALING_HEAD, _ic003_classes),
    "ic005-loops": ("IC005: draft loop passing metadata", SCALING_HEAD, _ic005_loops),
    "ic001-loops": ("IC001: type check after a loop", SCALING_HEAD, _ic001_loops),
}


def scaling_file(shape: str, n: int) -> str:
    _, head, one = SCALING_SHAPES[shape]
    return head + "\n\n" + "\n\n".join(one(i) for i in range(n))


def scaling_section(ours, shapes: list[str], sizes: list[int], repeat: int, timeout: float, jobs: list[str],
                    workdir: Path, env: dict) -> bool:
    """Lint one generated file per shape and size (a fresh project folder each, no cache);
    print the table and the verdicts; True when every bar is met."""
    print("\n## Generated candidates: lint time against their number\n")
    print(f"One file of N candidates per shape, `invariant-check lint --no-cache` in a folder of its own "
          f"(interpreter start included); {repeat} run(s) each, median shown; a run over {timeout:g} s is stopped.")
    print(f"Targets: {sizes[1] if len(sizes) > 1 else '?'}/{sizes[0]} candidates at most "
          f"{TARGET_SCALING_RATIO:g} x the time; every size under {TARGET_SCALING_MAX_S:g} s.\n")
    header = f"| {'shape':<16} | {'N':>6} | {'lines':>7} | {'wall':>8} | {'CPU':>8} | findings |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    times: dict[tuple[str, int], tuple[float | None, float | None]] = {}
    for shape in shapes:
        for n in sizes:
            folder = workdir / "scaling" / f"{shape}-{n}"
            folder.mkdir(parents=True, exist_ok=True)
            text = scaling_file(shape, n)
            (folder / "candidates.py").write_text(text)
            walls, cpus, found = [], [], "?"
            for _ in range(repeat):
                try:
                    r = run([ours, "lint", "--no-cache", *jobs, "--format", "json", "candidates.py"], cwd=folder, env=env,
                            timeout=timeout)
                except subprocess.TimeoutExpired:
                    walls, cpus, found = [], [], "stopped"
                    break
                walls.append(r.wall)
                cpus.append(r.cpu)
                summ = summary_of(r)
                found = str(summ.get("findings", f"rc {r.rc}"))
                if r.rc not in (0, 1):
                    found = f"rc {r.rc}: {(r.stderr or r.stdout).strip()[-200:]}"
            wall = statistics.median(walls) if walls else None
            cpu = statistics.median(cpus) if cpus else None
            times[shape, n] = (wall, cpu)
            shown_wall = fmt_s(wall) if wall is not None else f"> {timeout:g} s"
            print(f"| {shape:<16} | {n:>6,} | {text.count(chr(10)) + 1:>7,} | {shown_wall:>8} | {fmt_s(cpu):>8} | {found} |", flush=True)
    ok_all = True
    print("\nVerdicts (ratio of CPU time, the steadier one on shared cores; wall ratio beside it):")
    for shape in shapes:
        parts = []
        if len(sizes) > 1:
            (w0, c0), (w1, c1) = times[shape, sizes[0]], times[shape, sizes[1]]
            if c0 and c1:
                ratio = c1 / c0
                ok = ratio <= TARGET_SCALING_RATIO
                parts.append(f"{sizes[1]:,}/{sizes[0]:,}: {ratio:.1f} x CPU ({w1 / w0:.1f} x wall), "
                             f"target <= {TARGET_SCALING_RATIO:g} x: {verdict(ok)}")
            else:
                ok = False
                parts.append(f"{sizes[1]:,}/{sizes[0]:,}: not measured (stopped): {verdict(False)}")
            ok_all &= ok
        largest = sizes[-1]
        w, _ = times[shape, largest]
        ok = w is not None and w < TARGET_SCALING_MAX_S
        parts.append(f"{largest:,} candidates: {fmt_s(w) if w is not None else f'> {timeout:g} s'} wall, "
                     f"target < {TARGET_SCALING_MAX_S:g} s: {verdict(ok)}")
        ok_all &= ok
        print(f"- {shape}: " + "; ".join(parts))
    return ok_all


# -- sections -------------------------------------------------------------------------------------

def profile_section(exe: Path, tree: Path, one_file: Path, workdir: Path) -> None:
    print("\n## Where the time goes\n")
    r = run([sys.executable, "-X", "importtime", exe, "lint", "--no-cache", one_file], cwd=workdir)
    tops = importtime_top(r.stderr)
    total = sum(t for _, t in importtime_top(r.stderr, 10_000))
    print(f"Imports of one `lint <file>` run (python -X importtime): {total:.3f} s in all; largest top-level:")
    for name, t in tops:
        print(f"  {t:7.3f} s  {name}")

    # What each rule's needs pick, without parsing: definitions and megabytes to parse.
    code = textwrap.dedent(r"""
        import json, sys, time
        from pathlib import Path
        from invariant_check.analysis.project import Project
        from invariant_check.lint.analyze import Plan
        from invariant_check.api.registry import all_rules
        tree = Path(sys.argv[1])
        rules = [r for r in all_rules().values() if not r.EMITTED_BY_ENGINE]
        plan = Plan.build(rules, {r.CODE: r.default_options() for r in rules})
        project = Project(tree.parent)
        out = {r.CODE: {"files": 0, "definitions": 0, "mb": 0.0, "need": plan.needs[r.CODE].describe()} for r in plan.rules}
        t0 = time.perf_counter()
        for f in sorted(tree.rglob("*.py")):
            data = f.read_bytes()
            codes = plan.codes_for(data)
            if not codes:
                continue
            module = project.module_at(f, data)
            for rule in plan.rules:
                need = plan.needs[rule.CODE]
                if rule.CODE not in codes or not need.holds(module.source.text):
                    continue
                chunks = list(module.leaf_chunks(need))
                if chunks:
                    out[rule.CODE]["files"] += 1
                    out[rule.CODE]["definitions"] += len(chunks)
                    out[rule.CODE]["mb"] += sum(c.end - c.start for c in chunks) / 1e6
        out["_seconds"] = time.perf_counter() - t0
        print(json.dumps(out))
    """)
    r = run([sys.executable, "-c", code, tree], cwd=workdir)
    if r.rc == 0:
        data = json.loads(r.stdout)
        print(f"\nWhat each rule's needs pick (one process, {data.pop('_seconds'):.2f} s, no parse):")
        for c, d in data.items():
            print(f"  {c}: {d['definitions']} definitions in {d['files']} files, {d['mb']:.2f} MB to parse; needs {d['need']}")
    else:
        print("needs breakdown failed:\n" + r.stderr[-2000:])

    # Time per stage, in one process, without a profiler's distortion (nested stages count in
    # their callers too).
    code = textwrap.dedent(r"""
        import functools, sys, time
        t0 = time.perf_counter()
        import invariant_check.cli.commands as cli
        import invariant_check.lint.engine as E, invariant_check.lint.analyze as A, invariant_check.lint.cache as C
        import invariant_check.analysis.project as P, invariant_check.lint.discovery as D, invariant_check.lint.finalize as F
        from invariant_check import registry
        t1 = time.perf_counter()
        registry.all_rules()
        t2 = time.perf_counter()
        acc = {}
        def wrap(obj, name, label):
            f = getattr(obj, name, None)
            if f is None:
                return
            @functools.wraps(f)
            def g(*a, **k):
                t = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    n, s = acc.get(label, (0, 0.0))
                    acc[label] = (n + 1, s + time.perf_counter() - t)
            setattr(obj, name, g)
        wrap(D, "discover", "discover files")
        wrap(C.Cache, "load", "cache load")
        wrap(C.Cache, "save", "cache save")
        wrap(E.Engine, "_scan", "scan: read, hash, needs on the bytes")
        wrap(A, "_pick", "pick: outline, needs on each definition")
        wrap(P.Module, "statements", "parse (ast), also of other modules")
        wrap(P.Module, "chunk_facts", "facts of definitions")
        wrap(A, "_checked", "rules (their queries, with what they parse)")
        wrap(E, "finalize", "finalize: suppressions")
        t3 = time.perf_counter()
        try:
            cli.main(sys.argv[1:], standalone_mode=False)
        except SystemExit:
            pass
        t4 = time.perf_counter()
        print(f"  {t1 - t0:6.3f} s  import the CLI, engine and analysis layer")
        print(f"  {t2 - t1:6.3f} s  import the rules")
        print(f"  {t4 - t3:6.3f} s  the lint command, of which:")
        for label, (n, s) in sorted(acc.items(), key=lambda kv: -kv[1][1]):
            if s >= 0.0005:
                print(f"  {s:6.3f} s    {label} (x{n})")
    """)
    r = run([sys.executable, "-c", code, "lint", "--cache-dir", workdir / "phases-cache", "-j", "1", "--format", "json",
             "--output", workdir / "phases.json", tree], cwd=tree.parent)
    print("\nStages of a cold run in one process (-j 1, wall, no profiler):")
    print(r.stderr[-3000:] if "Traceback" in r.stderr else "", end="")
    print(r.stdout, end="")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", nargs="?", help=f"folder or .tar.xz to lint [default: {DEFAULT_TREE}, unpacked from the corpus if missing]")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="where the vllm-*.tar.xz live [%(default)s]")
    ap.add_argument("--unpack-to", type=Path, default=DEFAULT_UNPACK, help="where tarballs are unpacked [%(default)s]")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown [%(default)s]")
    ap.add_argument("--invariant-check", type=Path, help="our executable [default: beside this Python, else on PATH]")
    ap.add_argument("--ruff", type=Path, help="ruff executable [default: beside this Python, else on PATH]")
    ap.add_argument("--fixit", type=Path, help="Fixit 2 executable, from its own venv; skipped when absent")
    ap.add_argument("--fixit-sample", type=int, default=0, metavar="N",
                    help="lint only N files spread over the tree with Fixit and extrapolate by bytes (0: the whole tree)")
    ap.add_argument("--one-file", type=Path, action="append", help="file(s) for the pre-commit measurement [default: a known IC003 site and two clean files]")
    ap.add_argument("--per-rule", action="store_true", help="also: a cold run per rule (--select), to see which rule costs what")
    ap.add_argument("--profile", action="store_true", help="also: import times, prefilter hits per rule, cProfile shares of a cold run")
    ap.add_argument("--jobs", "-j", type=int, help="passed to our linter")
    ap.add_argument("--scaling", action="store_true", help="also: generated files of N candidates per shape (linear cost)")
    ap.add_argument("--scaling-only", action="store_true", help="only the generated-candidate runs (no tree needed)")
    ap.add_argument("--sizes", default=",".join(map(str, SCALING_SIZES)),
                    help="candidate counts for --scaling, comma-separated; the first two give the ratio [%(default)s]")
    ap.add_argument("--shapes", default=",".join(SCALING_SHAPES),
                    help=f"candidate shapes for --scaling, comma-separated, of: {', '.join(SCALING_SHAPES)} [all]")
    ap.add_argument("--scaling-timeout", type=float, default=180.0, help="seconds after which one generated-file run is stopped [%(default)s]")
    args = ap.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SCALING_SHAPES]
    if unknown:
        sys.exit(f"unknown shape(s): {', '.join(unknown)}; known: {', '.join(SCALING_SHAPES)}")
    sizes = [int(n) for n in args.sizes.split(",") if n]

    here = Path(sys.executable).parent
    ours = args.invariant_check or (here / "invariant-check" if (here / "invariant-check").exists() else shutil.which("invariant-check"))
    ruff = args.ruff or (here / "ruff" if (here / "ruff").exists() else shutil.which("ruff"))
    if not ours:
        sys.exit("invariant-check not found: install the project (pip install -e .) or pass --invariant-check")
    jobs = ["-j", str(args.jobs)] if args.jobs else []
    if args.scaling_only:
        return scaling_only(ours, shapes, sizes, args, jobs)
    tree = resolve_tree(args.tree, args.corpus, args.unpack_to).resolve()
    files = py_files(tree)
    total_bytes = sum(f.stat().st_size for f in files)

    work = Path(tempfile.mkdtemp(prefix="ic-bench-"))
    env = dict(os.environ, NO_COLOR="1")
    env.pop("INVARIANT_CHECK_CACHE_DIR", None)
    # as installed tools run: with their modules' bytecode cached (pip writes it on install)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([str(ours), "rules"], env=env, capture_output=True, check=False)
    try:
        # A private copy: the one-file rows edit a file and add one.
        copy = work / "copy" / tree.parent.name / tree.name
        shutil.copytree(tree, copy, ignore=shutil.ignore_patterns("__pycache__"))
        tree = copy
        files = py_files(tree)
        # Read every file once first, so that every tool below finds them in the OS page cache.
        t0 = time.perf_counter()
        for f in files:
            f.read_bytes()
        read_all = time.perf_counter() - t0
        load0 = os.getloadavg()

        rows = []  # (what, wall, wall_min, cpu, target, ok)
        ruff_s = None
        if ruff:
            ruff_series = repeat(args.repeat, lambda i: [ruff, "check", "--select", "E9", "--no-cache", "--quiet", tree], cwd=work, env=env)
            ruff_s = ruff_series.wall
            rows.append(("ruff check --select E9 --no-cache (floor)", ruff_series, "", None))

        # from the project root, as a developer runs it (paths shown as in the one-file runs)
        project_root = tree.parent

        def lint_cmd(cache: Path | None, *extra):
            cache_args = ["--cache-dir", cache] if cache else ["--no-cache"]
            return [ours, "lint", *cache_args, *jobs, "--format", "json", *extra, tree.name]

        cold = repeat(args.repeat, lambda i: lint_cmd(work / f"cache-cold-{i}"), cwd=project_root, env=env)
        warm_cache = work / "cache-cold-0"
        warm = repeat(args.repeat, lambda i: lint_cmd(warm_cache), cwd=project_root, env=env)
        nocache = repeat(1, lambda i: lint_cmd(None), cwd=project_root, env=env)
        cold_sum, warm_sum = summary_of(cold.runs[0]), summary_of(warm.runs[0])
        rc_note = {r.rc for r in cold.runs + warm.runs}
        cold_target = TARGET_COLD_VS_RUFF * ruff_s if ruff_s else None
        rows.append(("ours, cold (fresh cache folder)", cold, f"< {TARGET_COLD_VS_RUFF:g} x ruff = {fmt_s(cold_target)}",
                     cold.wall <= cold_target if cold_target else None))
        rows.append(("ours, warm (same cache, second run)", warm, f"< {TARGET_WARM_S} s", warm.wall < TARGET_WARM_S))
        rows.append(("ours, --no-cache", nocache, "", None))

        # One file as pre-commit runs it: a new process per commit, interpreter start included,
        # run from the project root with the whole tree's cache warm (the project facts cached).
        one_rows = []
        picks = [("1 clean file, unchanged", tree / rel) for rel in CLEAN_FILES if (tree / rel).is_file()]
        if args.one_file:
            picks = [(f"file {p.name}", p.resolve()) for p in args.one_file]
        for label, path in picks:
            s_warm = repeat(args.repeat, lambda i, path=path: [ours, "lint", "--cache-dir", warm_cache, path], cwd=project_root, env=env)
            one_rows.append((label, s_warm))
        # the same file just edited: re-analysed, its dependencies' facts from the cache
        edited = tree / CLEAN_FILES[-1]
        if edited.is_file():
            original = edited.read_bytes()
            runs = Series()
            for i in range(args.repeat):
                edited.write_bytes(original + f"\n# edited {i}\n".encode())
                runs.runs.append(run([ours, "lint", "--cache-dir", warm_cache, edited], cwd=project_root, env=env))
            edited.write_bytes(original)
            one_rows.append((f"1 file just edited: {CLEAN_FILES[-1]}", runs))
        # a new file with a finding
        new_file = tree / "model_executor" / "models" / "zz_bench_predictor.py"
        new_file.parent.mkdir(parents=True, exist_ok=True)
        new_file.write_text(SYNTHETIC_FINDING)
        s_new = repeat(args.repeat, lambda i: [ours, "lint", "--cache-dir", warm_cache, new_file], cwd=project_root, env=env)
        new_file.unlink()
        one_rows.append((f"1 new file with a finding (rc {s_new.runs[0].rc})", s_new))
        for label, series in one_rows:
            rows.append((f"{label}, whole-tree cache warm", series, f"< {TARGET_ONE_FILE_S} s", series.wall < TARGET_ONE_FILE_S))

        # A 50,000-line file that holds a trigger, against a bare libcst parse of it.
        big_dir = work / "big"
        big_dir.mkdir()
        big = big_dir / "big.py"
        filler = "".join(f"value_{i} = {i} + {i} * 2  # line {i}\n" for i in range(BIG_LINES - 6))
        big.write_text(filler + SYNTHETIC_FINDING)
        big_ours = repeat(args.repeat, lambda i: [ours, "lint", "--no-cache", "--format", "json", big], cwd=big_dir, env=env)
        big_libcst = repeat(args.repeat, lambda i: [sys.executable, "-c", "import sys, libcst; libcst.parse_module(open(sys.argv[1], 'rb').read())", big], cwd=big_dir)
        big_imports = repeat(args.repeat, lambda i: [sys.executable, "-c", "import libcst"], cwd=big_dir)
        big_mem = peak_memory([ours, "lint", "--no-cache", "--format", "json", big])
        big_target = TARGET_BIG_VS_LIBCST * big_libcst.wall
        rows.append((f"{BIG_LINES:,}-line file with a finding (rc {big_ours.runs[0].rc})", big_ours,
                     f"< {TARGET_BIG_VS_LIBCST:g} x libcst parse = {fmt_s(big_target)}", big_ours.wall <= big_target))
        rows.append(("  bare libcst.parse_module of it (python start and import included)", big_libcst, "", None))

        baseline = repeat(args.repeat, lambda i: [sys.executable, "-c", "pass"], cwd=work)
        imports = repeat(args.repeat, lambda i: [sys.executable, "-c", "import click"], cwd=work)
        cli_import = repeat(args.repeat, lambda i: [sys.executable, "-c", "import invariant_check.cli.commands"], cwd=work)
        rows.append(("  for reference: python -c pass", baseline, "", None))
        rows.append(("  for reference: python -c 'import click'", imports, "", None))
        rows.append(("  for reference: python -c 'import libcst'", big_imports, "", None))
        rows.append(("  for reference: python -c 'import invariant_check.cli.commands'", cli_import, "", None))

        mem = peak_memory([ours, "lint", "--cache-dir", work / "cache-mem", *jobs, "--format", "json", tree])

        fixit_note = None
        fixit_s = None
        if args.fixit:
            if not args.fixit.exists():
                fixit_note = f"Fixit: skipped, {args.fixit} does not exist"
            else:
                (work / "fixit").mkdir()
                (work / "fixit" / "bench_rules.py").write_text(FIXIT_RULES)
                if args.fixit_sample and args.fixit_sample < len(files):
                    step = len(files) / args.fixit_sample
                    sample = [files[int(i * step)] for i in range(args.fixit_sample)]
                    sample_bytes = sum(f.stat().st_size for f in sample)
                    # Start-up (imports, process pool) does not grow with the tree: measure it on
                    # two tiny files (two, so that Fixit starts its pool) and scale only the rest.
                    for name in ("a.py", "b.py"):
                        (work / "fixit" / name).write_text("x = 1\n")
                    base = run([args.fixit, "--rules", ".bench_rules", "lint", "a.py", "b.py"], cwd=work / "fixit", env=env)
                    r = run([args.fixit, "--rules", ".bench_rules", "lint", *sample], cwd=work / "fixit", env=env)
                    scale = total_bytes / sample_bytes
                    fixit_s = base.wall + max(r.wall - base.wall, 0.0) * scale
                    fixit_cpu = base.cpu + max(r.cpu - base.cpu, 0.0) * scale
                    label = (f"Fixit 2, 2 trivial rules: EXTRAPOLATED from {len(sample)} files "
                             f"({100 * sample_bytes / total_bytes:.0f} % of the bytes; measured {fmt_s(r.wall)}, "
                             f"start-up {fmt_s(base.wall)})")
                    est = Series([Run(fixit_s, fixit_cpu, r.rc, "", "")])
                else:
                    r = run([args.fixit, "--rules", ".bench_rules", "lint", tree], cwd=work / "fixit", env=env)
                    fixit_s = r.wall
                    label = "Fixit 2, 2 trivial rules, whole tree"
                    est = Series([r])
                if r.rc not in (0, 1):
                    fixit_note = f"Fixit exited {r.rc}: {r.stderr[-500:]}"
                rows.append((label, est, "", None))
        else:
            fixit_note = "Fixit: skipped (pass --fixit PATH to a Fixit 2 executable in its own venv)"

        per_rule = []
        if args.per_rule:
            listed = run([ours, "rules", "--format", "json"], cwd=work, env=env)
            for rule in json.loads(listed.stdout):
                s = repeat(1, lambda i, code=rule["code"]: lint_cmd(work / f"cache-{code}", "--select", code), cwd=project_root, env=env)
                per_rule.append((rule["code"], s, summary_of(s.runs[0])))

        load1 = os.getloadavg()

        # -- report ------------------------------------------------------------------------------
        print("# invariant-check lint speed\n")
        print(f"- tree: {tree} ({len(files)} .py files, {total_bytes / 1e6:.1f} MB)")
        print(f"- {version_of([ours])} at git {git_rev()}; {version_of([ruff]) if ruff else 'ruff: not found'}"
              + (f"; {version_of([args.fixit])}" if args.fixit and args.fixit.exists() else ""))
        print(f"- {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
              f"load average {load0[0]:.2f} before / {load1[0]:.2f} after; {args.repeat} runs each, median shown")
        print(f"- reading every file in this process: {read_all:.2f} s (cold OS cache at most); all tools then find them in the OS cache")
        print(f"- files checked / parsed: cold {cold_sum.get('files_checked', '?')} / {cold_sum.get('files_parsed', '?')}, "
              f"warm {warm_sum.get('files_checked', '?')} / {warm_sum.get('files_parsed', '?')}; exit codes {sorted(rc_note)}"
              f"; findings {cold_sum.get('findings', '?')}, errors {cold_sum.get('errors', '?')}")
        # Exit statuses: a timed run that could not lint (2) timed nothing. The positive controls
        # must find what they hold (exit 1), the clean files nothing (exit 0).
        def statuses(label, series, allowed):
            bad = sorted({r.rc for r in series.runs} - set(allowed))
            if bad:
                err = next((r.stderr or r.stdout for r in series.runs if r.rc in bad), "").strip()[-300:]
                problems.append(f"{label}: exit {bad}, wanted {sorted(allowed)}: {err}")

        problems: list[str] = []
        for what, series, _target, _ok in rows:
            statuses(what, series, (0, 1))
        statuses("1 new file with a finding (positive control)", s_new, (1,))
        statuses(f"{BIG_LINES:,}-line file with a finding (positive control)", big_ours, (1,))
        for label, series in one_rows:
            if label.startswith("1 clean file") or label.startswith("1 file just edited"):
                statuses(label, series, (0,))
        if cold_sum.get("errors"):
            problems.append(f"the cold run could not lint {cold_sum.get('errors')} file(s)")
        print()
        w = max(len(r[0]) for r in rows)
        print(f"| {'what':<{w}} | {'wall (median)':>13} | {'wall (min)':>10} | {'CPU':>8} | target | |")
        print(f"|{'-' * (w + 2)}|{'-' * 15}|{'-' * 12}|{'-' * 10}|---|---|")
        for what, s, target, ok in rows:
            print(f"| {what:<{w}} | {fmt_s(s.wall):>13} | {fmt_s(s.wall_min):>10} | {fmt_s(s.cpu):>8} | {target} | {verdict(ok)} |")
        print()
        ok_mem = mem["tree_pss_mb"] < TARGET_PEAK_MB and mem["max_single_mb"] < TARGET_PEAK_MB
        print(f"Peak memory of a cold run (target < {TARGET_PEAK_MB} MB): {verdict(ok_mem)}")
        print(f"- largest single process: {mem['max_single_mb']:.0f} MB (ru_maxrss of RUSAGE_CHILDREN in a dedicated parent; exact)")
        print(f"- whole process tree, up to {mem['procs']} processes, sampled every 10 ms: "
              f"PSS {mem['tree_pss_mb']:.0f} MB (shared pages split between processes), "
              f"RSS sum {mem['tree_rss_mb']:.0f} MB (counts pages shared by forked workers once per process)")
        print(f"- the {BIG_LINES:,}-line file: largest process {big_mem['max_single_mb']:.0f} MB")
        print()
        print("Ratios:")
        if ruff_s:
            print(f"- ours cold / ruff: {cold.wall / ruff_s:.1f} x (target <= {TARGET_COLD_VS_RUFF:g} x); ours warm / ruff: {warm.wall / ruff_s:.2f} x")
        print(f"- {BIG_LINES:,}-line file, ours / bare libcst parse: {big_ours.wall / big_libcst.wall:.2f} x (target <= {TARGET_BIG_VS_LIBCST:g} x)")
        if fixit_s:
            print(f"- Fixit / ours cold: {fixit_s / cold.wall:.0f} x; Fixit / ours warm: {fixit_s / warm.wall:.0f} x")
        if fixit_note:
            print(f"- {fixit_note}")
        if per_rule:
            print("\nOne cold run per rule (--select):")
            for code, s, summ in per_rule:
                print(f"- {code}: {fmt_s(s.wall)} wall, {fmt_s(s.cpu)} CPU, {summ.get('files_parsed', '?')} files parsed")
        if args.profile:
            profile_section(ours, tree, tree / CLEAN_FILES[-1], work)
        if args.scaling and not scaling_section(ours, shapes, sizes, args.repeat, args.scaling_timeout, jobs, work, env):
            problems.append("the scaling section failed")
        missed = [what for what, _s, _t, ok in rows if ok is False] + ([] if ok_mem else ["peak memory"])
        print()
        for problem in problems:
            print(f"FAIL {problem}")
        if missed:
            print(f"targets MISSED: {'; '.join(m.strip() for m in missed)}")
        print("RESULT:", "FAIL" if problems else ("targets missed" if missed else "ok"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # 2: a timed run could not do its job (nothing was measured); 1: a target was missed
    return 2 if problems else (1 if missed else 0)


def scaling_only(ours, shapes: list[str], sizes: list[int], args, jobs: list[str]) -> int:
    work = Path(tempfile.mkdtemp(prefix="ic-bench-"))
    env = dict(os.environ, NO_COLOR="1")
    env.pop("INVARIANT_CHECK_CACHE_DIR", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([str(ours), "rules"], env=env, capture_output=True, check=False)
    try:
        load0 = os.getloadavg()
        print("# invariant-check lint speed: generated candidates\n")
        print(f"- {version_of([ours])} at git {git_rev()}")
        print(f"- {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
              f"load average {load0[0]:.2f} at the start")
        ok = scaling_section(ours, shapes, sizes, args.repeat, args.scaling_timeout, jobs, work, env)
        print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
