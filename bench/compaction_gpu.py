#!/usr/bin/env python
"""GPU benchmark: fused Triton compaction vs the torch code vLLM runs today.

    python bench/compaction_gpu.py            # on a CUDA machine; about 2-4 minutes
    python bench/compaction_gpu.py --quick    # fewer repeats and no config sweep
    python bench/compaction_gpu.py --cpu-smoke  # CPU only: run every code path tiny,
                                              # under the Triton interpreter, no timings

Prints Markdown tables to stdout:
  1. correctness (Triton == torch, bit for bit) for every timed shape;
  2. timings for n in {1, 8, 64, 256, 1024}, width 2048 int32, 1 and 4 buffers:
     CUDA-event median and p90 over --reps calls (after warm-up), CUDA-graph
     replay median, eager wall time per call, kernels launched per call,
     achieved GB/s and % of the card's peak, speed-up over torch;
  3. a stress run with adversarial row ids (also run through a naive
     row-per-program kernel, to show whether its race fires on this card);
  4. a sweep of (BLOCK_W, CHUNK, num_warps) to pick the kernel defaults;
  5. the issue's targets, PASS/FAIL; exit 1 when any fails (the speed targets count on a GPU
     only, not in --cpu-smoke), 2 without a CUDA device.
The torch reference is ``buf[:n] = buf[slot_ids]`` per buffer, exactly as in
vLLM's ``compact_topk_indices``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

NS = (1, 8, 64, 256, 1024)
WIDTH = 2048
ROWS = 8192  # vLLM sizes the buffer by max_num_batched_tokens
BUFFER_COUNTS = (1, 4)

# HBM peak in GB/s by device-name fragment (vendor data sheets); first match wins.
PEAK_GBS = (
    ("GH200", 4000.0),  # before "H200", which it contains
    ("H200", 4800.0),
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("H800", 3350.0),
    ("B200", 8000.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),
    ("L40S", 864.0),
    ("A10G", 600.0),
    ("L4", 300.0),
)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=200, help="timed calls per measurement (>= 100)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="100 reps, smaller stress run, no sweep")
    p.add_argument("--no-sweep", action="store_true")
    p.add_argument("--stress-trials", type=int, default=300)
    p.add_argument("--peak-gbs", type=float, default=None, help="override the card's peak bandwidth")
    p.add_argument("--cpu-smoke", action="store_true", help="no GPU: exercise the script under TRITON_INTERPRET")
    args = p.parse_args()
    if args.quick:
        args.reps, args.stress_trials, args.no_sweep = 100, 100, True
    if args.cpu_smoke:
        args.reps, args.warmup, args.stress_trials, args.no_sweep = 3, 1, 7, False
    args.reps = max(args.reps, 3 if args.cpu_smoke else 100)
    return args


ARGS = parse_args()
if ARGS.cpu_smoke:
    # Must precede the first import of the kernel module (read by @triton.jit).
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton
import triton.language as tl

from invariant_check.compaction import compact_rows_
from invariant_check.compaction import kernel as K
from invariant_check.compaction.validate import check_row_ids, normalize_buffers

DEVICE = "cpu" if ARGS.cpu_smoke else "cuda"
SMOKE_NS = (1, 8, 20)
SMOKE_WIDTH = 40
SMOKE_ROWS = 64


# ----------------------------------------------------------------------------- helpers


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def make_bufs(count, rows, width, dtype=torch.int32, seed=0):
    # Generated on the device: the stress run makes hundreds of 64 MiB buffers.
    torch.manual_seed(seed)
    return [torch.randint(0, 2**31 - 1, (rows, width), dtype=dtype, device=DEVICE) for _ in range(count)]


def two_per_request(n, dtype=torch.int32):
    return (torch.arange(n, dtype=dtype) * 2 + 1).to(DEVICE)


def torch_reference(bufs, slot_ids):
    n = slot_ids.numel()
    for b in bufs:
        b[:n] = b[slot_ids]


def triton_api(bufs, slot_ids):
    compact_rows_(bufs, slot_ids, backend="triton")


def validate(bufs, slot_ids):
    """The metadata checks compact_rows_ runs on every call, alone."""
    check_row_ids(slot_ids, normalize_buffers(bufs))


def event_times_us(fn, reps, warmup):
    """Per-call CUDA-event time of back-to-back eager calls (includes launch gaps)."""
    for _ in range(warmup):
        fn()
    sync()
    if DEVICE != "cuda":
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def graph_replay_us(fn, reps, warmup):
    """Median time of one CUDA-graph replay of one call (captured after warm-up)."""
    if DEVICE != "cuda":
        return float("nan")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return statistics.median(event_times_us(graph.replay, reps, warmup))


def wall_us_per_call(fn, reps):
    """Eager wall time per call: reps back-to-back calls, then one sync."""
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t0) / reps * 1e6


def kernels_per_call(fn, calls=10):
    if DEVICE != "cuda":
        return float("nan")
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        sync()
    cuda = torch.autograd.DeviceType.CUDA
    kernels = [e for e in prof.events() if e.device_type == cuda and not e.name.lower().startswith(("memcpy", "memset"))]
    return len(kernels) / calls


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def peak_gbs():
    if ARGS.peak_gbs:
        return ARGS.peak_gbs, "--peak-gbs"
    if DEVICE != "cuda":
        return float("nan"), "n/a"
    name = torch.cuda.get_device_name()
    for fragment, gbs in PEAK_GBS:
        if fragment in name:
            return gbs, "data sheet"
    props = torch.cuda.get_device_properties(0)
    clock_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9, "2 x mem clock x bus width"
    return float("nan"), "unknown card"


def copy_roofline_gbs():
    """What a plain device-to-device copy achieves here (read + write bytes / time)."""
    if DEVICE != "cuda":
        return float("nan")
    a = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = statistics.median(event_times_us(lambda: b.copy_(a), 50, 5))
    return 2 * a.numel() / (t * 1e-6) / 1e9


def moved_bytes(bufs, slot_ids):
    n = slot_ids.numel()
    moving = int((slot_ids.cpu() != torch.arange(n, dtype=slot_ids.dtype)).sum())
    return sum(2 * moving * b.shape[1] * b.element_size() for b in bufs)


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def f(x, digits=1):
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


# ----------------------------------------------------------------------------- naive kernel


@triton.jit
def _naive_kernel(ptr, stride, width, row_ids_ptr, BLOCK_W: tl.constexpr):
    # Row-per-program, no barrier: races on a GPU (kept to show whether it fires).
    i = tl.program_id(0)
    src = tl.load(row_ids_ptr + i).to(tl.int64)
    for c0 in tl.range(0, width, BLOCK_W):
        cols = c0 + tl.arange(0, BLOCK_W)
        ok = cols < width
        vals = tl.load(ptr + src * stride + cols, mask=ok)
        tl.store(ptr + i * stride + cols, vals, mask=ok)


def naive(bufs, slot_ids):
    for b in bufs:
        _naive_kernel[(slot_ids.numel(),)](b, b.stride(0), b.shape[1], slot_ids, BLOCK_W=256)


# ----------------------------------------------------------------------------- sections


def correctness_and_timings(peak):
    ns = SMOKE_NS if ARGS.cpu_smoke else NS
    width = SMOKE_WIDTH if ARGS.cpu_smoke else WIDTH
    rows = SMOKE_ROWS if ARGS.cpu_smoke else ROWS
    results, checks = [], []
    for count in BUFFER_COUNTS:
        for n in ns:
            slot_ids = two_per_request(n)
            # Correctness on fresh data, Triton vs torch, bit for bit.
            a, b = make_bufs(count, rows, width, seed=n), make_bufs(count, rows, width, seed=n)
            first = [x.clone() for x in b]
            torch_reference(a, slot_ids)
            triton_api(first, slot_ids)  # may compile: goes through JITFunction.run
            triton_api(b, slot_ids)  # compiled: goes through the cached fast launch
            sync()
            same = all(torch.equal(x, y) and torch.equal(x, z) for x, y, z in zip(a, b, first))
            checks.append((count, n, same))
            bufs = make_bufs(count, rows, width, seed=100 + n)
            nbytes = moved_bytes(bufs, slot_ids)
            row = {"count": count, "n": n, "bytes": nbytes}
            launch_only = partial(K.launch, bufs, slot_ids)
            validate_only = partial(validate, bufs, slot_ids)
            for name, fn in (("torch", partial(torch_reference, bufs, slot_ids)), ("triton", partial(triton_api, bufs, slot_ids))):
                ev = event_times_us(fn, ARGS.reps, ARGS.warmup)
                row[name] = {
                    "median": statistics.median(ev),
                    "p90": pct(ev, 0.9),
                    "graph": graph_replay_us(fn, ARGS.reps, ARGS.warmup),
                    "wall": wall_us_per_call(fn, ARGS.reps),
                    "kernels": kernels_per_call(fn),
                }
            row["triton"]["wall_launch_only"] = wall_us_per_call(launch_only, ARGS.reps)
            K._FAST_LAUNCH = False  # what the launch costs through JITFunction.run
            row["triton"]["wall_launch_jit_run"] = wall_us_per_call(launch_only, ARGS.reps)
            K._FAST_LAUNCH = True
            row["triton"]["wall_validate_only"] = wall_us_per_call(validate_only, ARGS.reps)
            results.append(row)
    return results, checks


def stress():
    """Adversarial row ids on the device: Triton must match torch every time."""
    g = torch.Generator().manual_seed(1234)
    rows = SMOKE_ROWS if ARGS.cpu_smoke else 4096
    patterns = {
        "chain i+1": lambda n: torch.arange(n) + 1,               # every source is the next destination
        "two per request": lambda n: torch.arange(n) * 2 + 1,
        "all last row": lambda n: torch.full((n,), rows - 1),
        "reverse tail": lambda n: torch.arange(rows - 1, rows - 1 - n, -1),
        "identity": lambda n: torch.arange(n),
        "random >= i": lambda n: torch.arange(n) + (torch.rand(n, generator=g) * (rows - torch.arange(n))).long(),
        "random dups": lambda n: torch.maximum(torch.arange(n), torch.randint(0, rows, (n,), generator=g).sort().values),
    }
    widths = (7, 100, 2000, 2048)
    stats = {name: [0, 0, 0] for name in patterns}  # trials, triton mismatches, naive mismatches
    for t in range(ARGS.stress_trials):
        name = list(patterns)[t % len(patterns)]
        n = int(torch.randint(1, rows // 2, (1,), generator=g))
        ids = patterns[name](n).clamp(max=rows - 1)
        ids = torch.maximum(ids, torch.arange(n))
        dtype = (torch.int32, torch.int64)[t % 2]
        slot_ids = ids.to(dtype).to(DEVICE)
        count = 1 + t % 4
        bw = [widths[(t + k) % len(widths)] for k in range(count)]
        bdt = [(torch.int32, torch.int64)[(t // 2 + k) % 2] for k in range(count)]
        base = [make_bufs(1, rows, w, d, seed=t * 7 + k)[0] for k, (w, d) in enumerate(zip(bw, bdt))]
        ref = [x.clone() for x in base]
        got = [x.clone() for x in base]
        nv = [x.clone() for x in base]
        torch_reference(ref, slot_ids)
        triton_api(got, slot_ids)
        naive(nv, slot_ids)
        sync()
        stats[name][0] += 1
        stats[name][1] += not all(torch.equal(a, b) for a, b in zip(ref, got))
        stats[name][2] += not all(torch.equal(a, b) for a, b in zip(ref, nv))
    return stats


def sweep():
    """Kernel config sweep at the two shapes that set the defaults."""
    configs = [(bw, ch, nw) for bw in (16, 32, 64, 128) for ch in (32, 64, 128) for nw in (4, 8) if 1024 <= bw * ch <= 8192]
    if ARGS.cpu_smoke:
        configs = configs[:1]
    width = SMOKE_WIDTH if ARGS.cpu_smoke else WIDTH
    rows = SMOKE_ROWS if ARGS.cpu_smoke else ROWS
    shapes = ((4, 20 if ARGS.cpu_smoke else 1024), (1, 8 if ARGS.cpu_smoke else 64))
    out = []
    for count, n in shapes:
        slot_ids = two_per_request(n)
        bufs = make_bufs(count, rows, width)
        nbytes = moved_bytes(bufs, slot_ids)
        for bw, ch, nw in configs:
            fn = partial(K.launch, bufs, slot_ids, block_w=bw, chunk=ch, num_warps=nw)
            try:
                ev = event_times_us(fn, max(ARGS.reps // 2, 3 if ARGS.cpu_smoke else 100), ARGS.warmup)
            except Exception as exc:  # noqa: BLE001 - one bad config must not cost the rest of the GPU run
                print(f"sweep config BLOCK_W={bw} CHUNK={ch} num_warps={nw} failed: {exc!r}", flush=True)
                continue
            med = statistics.median(ev)
            out.append((count, n, bw, ch, nw, med, nbytes / (med * 1e-6) / 1e9))
    return out


def main():
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("No CUDA device: nothing measured. (Use --cpu-smoke to exercise the script on CPU.)")
        return 2
    started = time.time()
    card = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (interpreter smoke run, timings meaningless)"
    peak, peak_src = peak_gbs()
    print(f"# Compaction benchmark, {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print()
    print(f"- card: {card}; peak {f(peak, 0)} GB/s ({peak_src}); measured D2D copy {f(copy_roofline_gbs(), 0)} GB/s")
    width = SMOKE_WIDTH if ARGS.cpu_smoke else WIDTH
    picked = {c: K.pick_tiles((width,) * c, torch.device(DEVICE)) for c in BUFFER_COUNTS}
    print(f"- torch {torch.__version__}, triton {triton.__version__}; tiles picked: "
          + "; ".join(f"{c} buffer(s): BLOCK_W={bw}, CHUNK={ch}, num_warps={nw}" for c, (bw, ch, nw) in picked.items()))
    print(f"- buffers int32 [{SMOKE_ROWS if ARGS.cpu_smoke else ROWS}, {SMOKE_WIDTH if ARGS.cpu_smoke else WIDTH}], "
          f"slot_ids = 1, 3, 5, ... (two tokens per request), {ARGS.reps} timed calls after {ARGS.warmup} warm-up")
    print()

    results, checks = correctness_and_timings(peak)
    print("## Correctness (Triton vs torch, bit-exact)")
    print()
    print(table(["buffers", "n", "equal"], [[str(c), str(n), "yes" if ok else "**NO**"] for c, n, ok in checks]))
    print()
    print("## Timings (us; GB/s counts read + write of the moved rows)")
    print()
    rows_out = []
    for r in results:
        t, q = r["torch"], r["triton"]
        gbs = r["bytes"] / (q["median"] * 1e-6) / 1e9
        rows_out.append([
            str(r["count"]), str(r["n"]),
            f"{f(t['median'])} / {f(t['p90'])}", f"{f(q['median'])} / {f(q['p90'])}",
            f(t["median"] / q["median"], 2) + "x",
            f"{f(t['graph'])} / {f(q['graph'])}",
            f"{f(t['wall'])} / {f(q['wall'])}",
            f"{f(q['wall_launch_only'])} / {f(q['wall_launch_jit_run'])} / {f(q['wall_validate_only'])}",
            f"{f(t['kernels'], 0)} / {f(q['kernels'], 0)}",
            f(gbs, 0), f(100 * gbs / peak, 0),
        ])
    print(table(
        ["bufs", "n", "torch event med/p90", "triton event med/p90", "speed-up", "graph replay torch/triton",
         "eager wall torch/triton", "triton wall: fast launch / JITFunction.run launch / validation only", "kernels/call torch/triton",
         "triton GB/s", "% peak"],
        rows_out,
    ))
    print()

    sys.stdout.flush()
    stats = stress()
    print(f"## Stress: adversarial row ids ({ARGS.stress_trials} trials, widths 7/100/2000/2048, int32+int64, 1-4 buffers)")
    print()
    print(table(["pattern", "trials", "triton mismatches", "naive row-per-program mismatches"],
                [[k, str(v[0]), str(v[1]) if not v[1] else f"**{v[1]}**", str(v[2])] for k, v in stats.items()]))
    print()

    sys.stdout.flush()
    if not ARGS.no_sweep:
        sw = sweep()
        print("## Config sweep (kernel launch only; event median us, GB/s)")
        print()
        print(table(["bufs", "n", "BLOCK_W", "CHUNK", "warps", "median us", "GB/s"],
                    [[str(c), str(n), str(bw), str(ch), str(nw), f(m, 2), f(g, 0)] for c, n, bw, ch, nw, m, g in sw]))
        for c, n in sorted({(c, n) for c, n, *_ in sw}):
            best = min((x for x in sw if x[0] == c and x[1] == n), key=lambda x: x[5])
            print(f"\nbest for {c} buffer(s), n={n}: BLOCK_W={best[2]} CHUNK={best[3]} num_warps={best[4]} ({f(best[5], 2)} us)")
        print()

    print("## Targets")
    print()
    verdicts = []
    # the speed targets count on a GPU only: an interpreter smoke run's timings mean nothing
    speed = "n/a (smoke)" if ARGS.cpu_smoke else None
    for r in results:
        if r["n"] <= 256:
            need = 2.0 if r["count"] == 1 else 4.0
            got = r["torch"]["median"] / r["triton"]["median"]
            verdicts.append([f"{r['count']} buf, n={r['n']}: eager >= {need:.0f}x torch", f(got, 2) + "x", speed or ("PASS" if got >= need else "FAIL")])
        if r["n"] == 1024 and r["count"] == 4:
            gbs = r["bytes"] / (r["triton"]["median"] * 1e-6) / 1e9
            unknown = "FAIL (peak unknown: give --peak-gbs)" if math.isnan(peak) else None
            verdicts.append(["4 buf, n=1024: >= 70% of peak", f(100 * gbs / peak, 0) + "%", speed or unknown or ("PASS" if gbs >= 0.7 * peak else "FAIL")])
    # positive control: the correctness checks and the stress run must have checked something
    verdicts.append(["correctness (timed shapes)", f"{sum(ok for *_, ok in checks)}/{len(checks)}", "PASS" if checks and all(ok for *_, ok in checks) else "FAIL"])
    verdicts.append(["stress: triton mismatches", str(sum(v[1] for v in stats.values())), "PASS" if stats and not any(v[1] for v in stats.values()) else "FAIL"])
    print(table(["target", "measured", "verdict"], verdicts))
    print()
    print(f"(total {time.time() - started:.0f} s)")
    failed = [v[0] for v in verdicts if v[2].startswith("FAIL")]
    if failed:
        print("FAILED: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
