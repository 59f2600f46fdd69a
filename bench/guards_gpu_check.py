"""GPU check for the runtime guards (one prepared script for a session with a CUDA device).

Not run on the CPU machine this was written on (no GPU lent); see docs/guards.md.
Needs only torch with CUDA and this repository (installed, or run from the repo root). Exits 0
when every check passes, 1 on the first failure, 2 without a CUDA device.

Checks, on CUDA buffers, with a stand-in draft model shaped like vLLM's MTP predictors (the
vLLM GPU build is not assumed to be installed):
 1. eager, correct proposal: no violation, no host synchronisation inside the guarded calls
    (torch.cuda.set_sync_debug_mode("error")), buffer compacted;
 2. eager, wrong slot ids / wrong rows: nothing reported synchronously, reported when the next
    proposal starts (deferred read-back), naming the failed condition;
 3. torch.cuda.graph capture of the reuse-mode forward and of a compaction with all-zero ids (as
    the v2 runner does): no host sync, no false alarm;
 4. replay of the captured forward in a proposal without compaction: reported right after (at the
    end of the proposal), because the eager set_skip_topk calls still run;
 5. INVARIANT_CHECK_GUARDS_SYNC=eager: the same wrong ids reported at the call.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _import_guards():
    try:
        import invariant_check.runtime_guards
    except ImportError:
        # Not installed: map the repo folders the way pyproject's package-dir does.
        sys.path.insert(0, str(REPO))
        import invariant_check  # noqa: F401

        spec = importlib.util.spec_from_file_location(
            "invariant_check.runtime_guards", REPO / "runtime_guards" / "__init__.py",
            submodule_search_locations=[str(REPO / "runtime_guards")])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["invariant_check.runtime_guards"] = mod
        spec.loader.exec_module(mod)
    from invariant_check.runtime_guards import patcher, runtime, topk_layout
    from invariant_check.runtime_guards.config import GUARD_NAMES, GuardConfig
    from invariant_check.runtime_guards.errors import InvariantViolation
    from invariant_check.runtime_guards.targets import patch_method

    return patcher, runtime, topk_layout, GUARD_NAMES, GuardConfig, InvariantViolation, patch_method


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("guards_gpu_check: no CUDA device", file=sys.stderr)
        return 2
    patcher, runtime, topk_layout, GUARD_NAMES, GuardConfig, InvariantViolation, patch_method = _import_guards()
    dev = torch.device("cuda")
    ROWS, TOPK = 512, 256

    class Attn(torch.nn.Module):
        def __init__(self, buf):
            super().__init__()
            self.topk_indices_buffer = buf
            self.skip_topk = False

    class Predictor(torch.nn.Module):
        """Same method names and buffer holders as vLLM's DeepSeek MTP predictors."""

        def __init__(self):
            super().__init__()
            self.buf = torch.zeros(ROWS, TOPK, dtype=torch.int32, device=dev)
            self.layers = torch.nn.ModuleDict({"1": Attn(self.buf)})
            self.out = torch.zeros(ROWS, dtype=torch.int64, device=dev)

        def set_skip_topk(self, skip):
            self.layers["1"].skip_topk = skip

        def compact_topk_indices(self, slot_ids):
            b = self.layers["1"].topk_indices_buffer
            b[: slot_ids.numel()] = b[slot_ids]

        def forward(self, input_ids):
            n = input_ids.shape[0]
            if not self.layers["1"].skip_topk:  # "indexer": one row per query token
                self.buf[:n] = (input_ids.view(-1, 1).int() * 1000 + torch.arange(TOPK, device=dev).int())
            self.out[:n] = self.buf[:n, 0].long()  # "sparse attention" reads one row per token
            return self.out[:n]

    failures: list[str] = []

    def check(name, cond, detail=""):
        print(f"{'PASS' if cond else 'FAIL'} {name} {detail}")
        if not cond:
            failures.append(name)

    def install(mode="raise"):
        patcher.uninstall()
        topk_layout.reset_states()
        patcher.install(GuardConfig(guards=frozenset(GUARD_NAMES), mode=mode))
        for meth, wrap in (("set_skip_topk", topk_layout.wrap_set_skip_topk),
                           ("compact_topk_indices", topk_layout.wrap_compact),
                           ("forward", topk_layout.wrap_forward)):
            patch_method("topk-layout", Predictor, meth, wrap)

    class Md:
        def __init__(self, qsl):
            self.query_start_loc = torch.tensor(qsl, dtype=torch.int32, device=dev)

    qsl_cache: dict[tuple, torch.Tensor] = {}

    def with_qsl(qsl, fn):
        # The guard reads query_start_loc from vLLM's forward context; provide a minimal one,
        # made once so that no host-to-device copy happens inside the sync-checked regions.
        key = tuple(qsl)
        if key not in qsl_cache:
            qsl_cache[key] = Md(qsl).query_start_loc
        orig = topk_layout._query_start_loc
        topk_layout._query_start_loc = lambda: qsl_cache[key]
        try:
            return fn()
        finally:
            topk_layout._query_start_loc = orig

    qsl = [0, 4, 8, 12, 16]
    with_qsl(qsl, lambda: None)
    with_qsl(list(range(5)), lambda: None)
    good = torch.tensor([3, 7, 11, 15], dtype=torch.int32, device=dev)
    tokens = torch.arange(16, device=dev)

    def proposal(m, ids, compact=True, reuse=2):
        m.set_skip_topk(False)
        with_qsl(qsl, lambda: m(tokens))
        m.set_skip_topk(True)
        if compact:
            m.compact_topk_indices(ids)
        for _ in range(reuse):
            with_qsl(list(range(5)), lambda: m(tokens[:4]))

    # 1. eager, correct
    try:
        install("raise")
        m = Predictor()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            proposal(m, good)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        m.set_skip_topk(False)  # flush
        check("eager correct: no violation, no sync", runtime.reporter().violations == 0)
        check("eager correct: compacted", m.buf[:4, 0].tolist() == [3000, 7000, 11000, 15000], str(m.buf[:4, 0].tolist()))
    except Exception:
        traceback.print_exc()
        check("eager correct", False)

    # 2. eager, wrong ids: deferred
    for label, ids in (("wrong slot ids", torch.tensor([7, 3, 11, 15], dtype=torch.int32, device=dev)),
                       ("ids outside own request", torch.tensor([4, 7, 11, 15], dtype=torch.int32, device=dev))):
        try:
            install("record")
            m = Predictor()
            torch.cuda.set_sync_debug_mode("error")
            try:
                proposal(m, ids)
                sync_free = runtime.reporter().violations == 0
            finally:
                torch.cuda.set_sync_debug_mode("default")
            m.set_skip_topk(False)  # next proposal: deferred read-back
            check(f"eager {label}: not reported synchronously", sync_free)
            check(f"eager {label}: reported at next proposal", runtime.reporter().violations >= 1)
        except Exception:
            traceback.print_exc()
            check(f"eager {label}", False)

    # wrong rows via a broken kernel
    try:
        install("record")
        m = Predictor()
        os.environ["INVARIANT_CHECK_TEST_FAULT"] = "wrong-rows"
        try:
            proposal(m, good)
        finally:
            os.environ.pop("INVARIANT_CHECK_TEST_FAULT", None)
        m.set_skip_topk(False)
        check("eager wrong rows: compaction-result reported", runtime.reporter().violations >= 1)
    except Exception:
        traceback.print_exc()
        check("eager wrong rows", False)

    # 3. capture: reuse-mode forward and an all-zero compaction, no sync, no false alarm
    try:
        install("raise")
        m = Predictor()
        proposal(m, good)  # warm up
        m.set_skip_topk(False)
        with_qsl(qsl, lambda: m(tokens))
        m.set_skip_topk(True)
        zeros = torch.zeros(4, dtype=torch.int32, device=dev)
        static_in = tokens[:4].clone()
        g_compact, g_forward = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            with torch.cuda.graph(g_compact):
                m.compact_topk_indices(zeros)  # v2 capture: all-zero dummy ids
            with torch.cuda.graph(g_forward):
                with_qsl(list(range(5)), lambda: m(static_in))
        finally:
            torch.cuda.set_sync_debug_mode("default")
        m.set_skip_topk(False)
        check("capture: no false alarm, no sync", runtime.reporter().violations == 0)

        # 4. replay in a proposal without compaction
        install("record")
        m2 = m  # same captured module; fresh guard state
        m2.set_skip_topk(False)
        m2.set_skip_topk(True)
        g_forward.replay()  # the captured reuse-mode forward: no Python runs, as in a real FULL graph replay
        m2.set_skip_topk(False)
        check("replay without compaction: reported right after", runtime.reporter().violations >= 1)
    except Exception:
        traceback.print_exc()
        check("capture/replay", False)

    # 5. eager sync switch
    try:
        os.environ["INVARIANT_CHECK_GUARDS_SYNC"] = "eager"
        install("raise")
        m = Predictor()
        raised = False
        try:
            proposal(m, torch.tensor([7, 3, 11, 15], dtype=torch.int32, device=dev))
        except InvariantViolation:
            raised = True
        check("INVARIANT_CHECK_GUARDS_SYNC=eager: reported at the call", raised)
    finally:
        os.environ.pop("INVARIANT_CHECK_GUARDS_SYNC", None)
        patcher.uninstall()

    print(f"\n{'OK' if not failures else 'FAILED: ' + ', '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
