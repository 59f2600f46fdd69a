"""Overhead of invariant-check's runtime guards (a benchmark, not a test).

1. Guards off: run register() with INVARIANT_CHECK_GUARDS unset in a fresh interpreter, import
   every target module, and compare every function attribute of every class in them with a run
   where register() was never called: nothing may differ and no import hook may be installed.
2. Cost per guarded call on the real DeepSeek V3.2 MTP predictor of the installed vLLM (CPU,
   index_topk 2048 as in the released model): set_skip_topk, compact_topk_indices, the forward
   wrapper's bookkeeping, build_per_group_and_layer_attn_metadata (group-metadata alone, and
   with metadata-coherence checking a real CommonAttentionMetadata of n requests per draft step),
   the v2 speculator's metadata build and `_copy_request_inputs` (pad-tail); then per draft
   proposal (3 speculative tokens) with all guards on versus off.

Usage: .venv/bin/python bench/guards_overhead.py [--repeat N] [--allow-import-failure MODULE]

Exit 0 when the guards-off proof holds (it compared something, guards off replaced nothing,
guards on replaced something, every target module imported or was allowed not to), 1 when not,
2 when a snapshot interpreter failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SNAPSHOT = r"""
import hashlib, importlib, inspect, json, os, sys
if os.environ.get("BENCH_REGISTER") == "1":
    from invariant_check.runtime_guards import plugin
    plugin.register()
from invariant_check.runtime_guards.targets import TARGETS, candidate_modules, modules_named
import importlib.util
root = list(importlib.util.find_spec("vllm").submodule_search_locations)[0]
mods = sorted(set(modules_named()) | {m for t in TARGETS if t.discovered for m in candidate_modules(root, t)})
functions = {t.attr for t in TARGETS if t.is_function}
ok = []
failed = {}
for m in mods:
    try:
        importlib.import_module(m); ok.append(m)
    except Exception as exc:
        failed[m] = f"{type(exc).__name__}: {exc}"[:300]
snap = {}
for m in ok:
    mod = sys.modules[m]
    for name, val in vars(mod).items():
        if inspect.isclass(val) and val.__module__ == m:
            for attr, fn in vars(val).items():
                if callable(fn):
                    code = getattr(fn, "__code__", None)
                    snap[f"{m}:{name}.{attr}"] = f"{getattr(fn, '__module__', '?')}:{code.co_filename if code else '?'}:{getattr(fn, '__invariant_check_wrapped__', False)}"
        elif callable(val) and name in functions:
            snap[f"{m}:{name}"] = f"{getattr(val, '__module__', '?')}:{getattr(val, '__invariant_check_wrapped__', False)}"
hooks = [type(f).__name__ for f in sys.meta_path if type(f).__module__.startswith("invariant_check")]
print("SNAPSHOT " + json.dumps({"modules": ok, "failed": failed, "attrs": snap, "hooks": hooks}))
"""


def snapshot(register: bool, guards: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVARIANT_CHECK_")}
    env["VLLM_CONFIGURE_LOGGING"] = "0"
    if register:
        env["BENCH_REGISTER"] = "1"
    if guards is not None:
        env["INVARIANT_CHECK_GUARDS"] = guards
    out = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, env=env, timeout=600)
    line = next((l for l in out.stdout.splitlines() if l.startswith("SNAPSHOT ")), None)
    if out.returncode != 0 or line is None:
        print(f"guards_overhead: the snapshot interpreter failed (exit {out.returncode}):\n{out.stderr[-3000:]}", file=sys.stderr)
        sys.exit(2)
    return json.loads(line[len("SNAPSHOT "):])


def proof_guards_off() -> dict:
    base = snapshot(register=False, guards=None)
    off = snapshot(register=True, guards=None)
    on = snapshot(register=True, guards="1")
    changed_off = sorted(k for k in base["attrs"] if off["attrs"].get(k) != base["attrs"][k])
    changed_on = sorted(k for k in base["attrs"] if on["attrs"].get(k) != base["attrs"][k])
    return {
        "modules_imported": len(base["modules"]),
        "class_attributes_compared": len(base["attrs"]),
        "replaced_with_guards_off": changed_off,
        "import_hooks_with_guards_off": off["hooks"],
        "replaced_with_guards_on": len(changed_on),
        "import_hooks_with_guards_on": on["hooks"],
        # target modules that did not import: their attributes were not compared
        "import_failures": {**base["failed"], **off["failed"], **on["failed"]},
    }


def timeit(fn, repeat: int, inner: int) -> float:
    """Median seconds per call."""
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t) / inner)
    return statistics.median(samples)


def v1_draft_step(n: int, block: int = 16):
    """A real SpecDecodeBaseProposer (no __init__) and a coherent draft-step
    CommonAttentionMetadata of n decode rows, as vLLM 0.32 builds it at draft step >= 1."""
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.utils import AttentionGroup

    class Builder:  # stand-in for a GPU backend's metadata builder
        def build_for_drafting(self, cad, draft_index):
            return cad

    gen = torch.Generator().manual_seed(n)
    seq = torch.randint(20, 200, (n,), generator=gen, dtype=torch.int32)
    table = torch.randperm(n * 16, generator=gen).view(n, 16).int()
    pos = (seq - 1).long()
    rows = torch.arange(n)
    slots = table[rows, pos // block].long() * block + pos % block
    p = SpecDecodeBaseProposer.__new__(SpecDecodeBaseProposer)
    p.draft_attn_groups = [AttentionGroup(backend=None, layer_names=["draft.attn"], kv_cache_spec=None,
                                          kv_cache_group_id=0, metadata_builders=[Builder()])]
    p.allowed_attn_types, p.num_speculative_tokens = None, 3
    p.uses_mrope, p.block_size = False, block
    p.positions = torch.zeros(max(n, 8), dtype=torch.int64)
    p.positions[:n] = pos
    qsl = torch.arange(n + 1, dtype=torch.int32)
    cad = CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq, num_reqs=n, num_actual_tokens=n,
        max_query_len=1, max_seq_len=int(seq.max()), block_table_tensor=table, slot_mapping=slots,
        seq_lens_cpu_upper_bound=seq.clone())
    return p, cad


def v2_speculator(n: int, block: int = 16):
    """A real MTPSpeculator (no __init__) with the buffers `_build_uniform_attn_metadata` reads,
    and no attention groups (vLLM's build_attn_metadata then builds nothing GPU-only)."""
    import types

    import numpy as np
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.worker.gpu.spec_decode.mtp.speculator import MTPSpeculator

    p, cad = v1_draft_step(n, block)
    s = MTPSpeculator.__new__(MTPSpeculator)
    s.arange_np = np.arange(n + 2)
    s.max_model_len = s.draft_max_seq_len = 4096
    s.dcp_size = 1
    s.draft_is_prefilling = torch.zeros(n, dtype=torch.bool)
    s.attn_groups = [[]]
    spec = FullAttentionSpec(block_size=block, num_kv_heads=1, head_size=64, dtype=torch.bfloat16)
    s.kv_cache_config = KVCacheConfig(num_blocks=n * 16, kv_cache_tensors=[],
                                      kv_cache_groups=[KVCacheGroupSpec(["draft.attn"], spec)])
    positions = torch.zeros(n + 8, dtype=torch.int64)
    positions[:n] = p.positions[:n]
    slot_mappings = torch.full((1, n + 8), -1, dtype=torch.int64)
    slot_mappings[0, :n] = cad.slot_mapping
    s.block_tables = types.SimpleNamespace(input_block_tables=[cad.block_table_tensor], slot_mappings=slot_mappings,
                                           block_sizes=[block], cp_size=1)
    s.input_buffers = types.SimpleNamespace(query_start_loc=cad.query_start_loc, seq_lens=cad.seq_lens,
                                            positions=positions)
    s.temperature, s.seeds = torch.zeros(n + 8), torch.zeros(n + 8, dtype=torch.int64)
    s.idx_mapping = torch.zeros(n + 8, dtype=torch.int32)
    return s, cad


def per_call_costs(repeat: int) -> dict:
    sys.path.insert(0, str(REPO / "tests" / "guards"))
    import torch
    from invariant_check.runtime_guards import metadata_coherence, patcher, topk_layout
    from invariant_check.runtime_guards.config import GROUP_METADATA, GUARD_NAMES, METADATA_COHERENCE, GuardConfig
    from guards_tiny_model import build_tiny_deepseek_mtp
    from guards_v32_module import build_v32_mtp, write_v32_config

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="ic-bench-"))
    model_dir = build_tiny_deepseek_mtp(tmp / "tiny")
    cfg, model, stack = build_v32_mtp(write_v32_config(model_dir, tmp / "v32", index_topk=2048), "nvidia",
                                      max_num_batched_tokens=1024)
    inner = model.model
    cls = type(inner)
    buf = inner.layers["1"].mtp_block.self_attn.topk_indices_buffer
    buf.copy_(torch.arange(buf.numel(), dtype=torch.int32).view_as(buf) % 100000)

    from vllm.config.compilation import CUDAGraphMode
    from vllm.forward_context import set_forward_context
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadata
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor
    from vllm.v1.worker.utils import AttentionGroup

    class Builder:  # stand-in for a GPU backend's metadata builder
        def build_for_drafting(self, cad, draft_index):
            return object.__new__(TritonAttentionMetadata)

    def proposer(groups):
        p = SpecDecodeBaseProposer.__new__(SpecDecodeBaseProposer)
        p.draft_attn_groups = [AttentionGroup(backend=None, layer_names=[f"l{g}.{i}" for i in range(2)],
                                              kv_cache_spec=None, kv_cache_group_id=g, metadata_builders=[Builder()])
                               for g in range(groups)]
        p.allowed_attn_types, p.num_speculative_tokens = (TritonAttentionMetadata,), 3
        return p

    def noop_forward(self, input_ids=None, positions=None, **kw):
        return None

    results: dict = {"buffer_shape": list(buf.shape), "torch_threads": 1}
    sizes = (4, 64, 256)
    steps = {n: v1_draft_step(n) for n in sizes}
    specs = {n: v2_speculator(n) for n in sizes}

    def install(names):
        patcher.uninstall()
        topk_layout.reset_states()
        metadata_coherence.reset()
        if names:
            patcher.install(GuardConfig(guards=frozenset(names), mode="raise"))

    def measure(names: tuple[str, ...]):
        install(names)
        on = bool(names)
        fwd = topk_layout.wrap_forward(noop_forward, cls) if on else noop_forward
        r = {}
        r["set_skip_topk"] = timeit(lambda: inner.set_skip_topk(False), repeat, 2000)
        for n in sizes:
            qsl = list(range(0, 4 * n + 1, 4))
            ids = torch.tensor([q - 1 for q in qsl[1:]], dtype=torch.int32)

            class Md:
                query_start_loc = torch.tensor(qsl, dtype=torch.int32)

            ids_in = torch.arange(4 * n)

            def one_compaction():
                inner.set_skip_topk(False)
                fwd(inner, input_ids=ids_in)
                inner.set_skip_topk(True)
                inner.compact_topk_indices(ids)

            with set_forward_context({"x": Md()}, cfg, num_tokens=4 * n):
                base_skip = r["set_skip_topk"]
                t_all = timeit(one_compaction, repeat, 50)
                t_fwd = timeit(lambda: fwd(inner, input_ids=ids_in), repeat, 2000)
            r[f"compact_topk_indices[{n} requests]"] = t_all - 2 * base_skip - t_fwd
            r[f"forward_bookkeeping[{n} requests]"] = t_fwd
            p, cad = steps[n]
            t_step = timeit(lambda: p.build_per_group_and_layer_attn_metadata(cad, 1), repeat, 200)
            r[f"draft_step_metadata[{n} requests]"] = t_step
            # the same with a memo set (as a Mamba/GDN builder leaves it): recomputed and compared
            cad._num_computed_tokens_cache = cad.compute_num_computed_tokens()
            r[f"draft_step_metadata_memo[{n} requests]"] = timeit(
                lambda: p.build_per_group_and_layer_attn_metadata(cad, 1), repeat, 200)
            cad._num_computed_tokens_cache = None
            # One proposal with 3 speculative tokens: set_skip(F), fwd, set_skip(T), compact,
            # 2 reuse fwds, and 3 metadata builds of n requests (1 group).
            r[f"proposal_k3[{n} requests]"] = t_all + 2 * t_fwd + 3 * t_step
            s, _ = specs[n]
            desc = BatchExecutionDescriptor(cg_mode=CUDAGraphMode.NONE, num_tokens=n, num_reqs=None)
            ub = steps[n][1].seq_lens.clone()
            r[f"v2_build_uniform_attn_metadata[{n} requests]"] = timeit(
                lambda: s._build_uniform_attn_metadata(desc, n, 1, ub, 1), repeat, 200)
            idx = torch.arange(n, dtype=torch.int32)
            r[f"v2_copy_request_inputs[{n} requests]"] = timeit(
                lambda: s._copy_request_inputs(n, idx, s.temperature, s.seeds), repeat, 500)
        for g in (1, 4):
            pg = proposer(g)
            r[f"build_per_group_and_layer_attn_metadata[{g} groups, group-metadata]"] = timeit(
                lambda: pg.build_per_group_and_layer_attn_metadata(None, 1), repeat, 2000)
        install(())
        return r

    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    off = measure(())
    on = measure(tuple(GUARD_NAMES))
    only = {GROUP_METADATA: measure((GROUP_METADATA,)), METADATA_COHERENCE: measure((METADATA_COHERENCE,))}
    rows = []
    for key in off:
        row = {"call": key, "off_us": round(off[key] * 1e6, 2), "on_us": round(on[key] * 1e6, 2),
               "added_us": round((on[key] - off[key]) * 1e6, 2)}
        if key.startswith(("draft_step_metadata", "v2_")):
            row["added_by_metadata_coherence_us"] = round((only[METADATA_COHERENCE][key] - off[key]) * 1e6, 2)
        rows.append(row)
    results["rows"] = rows
    stack.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--skip-proof", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--allow-import-failure", action="append", default=[], metavar="MODULE",
                    help="a target module this vLLM build cannot import (its attributes go unchecked)")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    out = {}
    if not args.skip_proof:
        out["guards_off"] = proof_guards_off()
    out["per_call"] = per_call_costs(args.repeat)
    problems = proof_problems(out.get("guards_off"), set(args.allow_import_failure))
    if args.json:
        print(json.dumps({**out, "problems": problems}, indent=2))
        sys.exit(1 if problems else 0)
    if "guards_off" in out:
        p = out["guards_off"]
        print("== guards off: nothing replaced ==")
        print(f"target modules imported: {p['modules_imported']}, class attributes compared: {p['class_attributes_compared']}")
        print(f"replaced with INVARIANT_CHECK_GUARDS unset: {len(p['replaced_with_guards_off'])} {p['replaced_with_guards_off'][:5]}")
        print(f"import hooks with guards off: {p['import_hooks_with_guards_off']}")
        print(f"(for contrast, guards on: {p['replaced_with_guards_on']} attributes replaced, hooks {p['import_hooks_with_guards_on']})")
        print(f"target modules that did not import: {len(p['import_failures'])} {sorted(p['import_failures'])}")
    pc = out["per_call"]
    print(f"\n== cost per call, CPU, 1 torch thread, real V3.2 MTP predictor, buffer {pc['buffer_shape']} int32 ==")
    print(f"{'call':62} {'off us':>10} {'on us':>10} {'added us':>10} {'of which metadata-coherence':>28}")
    for r in pc["rows"]:
        mc = r.get("added_by_metadata_coherence_us", "")
        print(f"{r['call']:62} {r['off_us']:>10} {r['on_us']:>10} {r['added_us']:>10} {mc:>28}")
    for problem in problems:
        print(f"FAIL {problem}")
    print("OK" if not problems else "FAILED")
    sys.exit(1 if problems else 0)


def proof_problems(p: dict | None, allowed: set[str]) -> list[str]:
    """Why the guards-off proof does not hold (empty: it holds). It must have compared something,
    replaced nothing with the guards off, and, as its positive control, replaced something with
    them on; a target module that did not import is a failure unless allowed by name."""
    if p is None:
        return []  # --skip-proof
    problems = []
    if p["replaced_with_guards_off"] or p["import_hooks_with_guards_off"]:
        problems.append(f"guards off changed {p['replaced_with_guards_off'][:5]}, hooks {p['import_hooks_with_guards_off']}")
    if not p["modules_imported"] or not p["class_attributes_compared"]:
        problems.append("no target module imported: nothing was compared")
    if not p["replaced_with_guards_on"]:
        problems.append("guards on replaced nothing either: the comparison cannot see a replacement")
    for module, error in sorted(p["import_failures"].items()):
        if module not in allowed:
            problems.append(f"target module {module} did not import ({error}); --allow-import-failure {module} if expected")
    return problems





if __name__ == "__main__":
    main()
