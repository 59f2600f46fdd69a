"""The guards under Ray (`pip install ray`; 2.60.0 here).

1. `vllm.LLM(..., distributed_executor_backend="ray")` on vLLM's CPU build stops before any
   worker exists, with vLLM's own error: the CPU platform has no Ray device key
   (`CpuPlatform.ray_device_key == ""`), so `initialize_ray_cluster` raises
   `ValueError: current platform cpu does not support ray.` The test keeps that fact checked.
2. What a Ray worker of a GPU build does with the guards, on real Ray: an actor started before the
   INVARIANT_CHECK_* variables exist receives them the way vLLM 0.32's Ray executor hands its
   environment to `RayWorkerProc.initialize_worker` (`get_driver_env_vars`, applied with
   setdefault), loads the plugins through vLLM's `load_general_plugins()` as a vLLM worker does,
   and runs vLLM's own draft-step code with the `stale-max-seq-len` fault. The violation it
   records comes back through `invariant-check report`, with the actor's pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from guards_helpers import requires_vllm

# one worker: two local Ray instances started at once would contend for its default ports
pytestmark = [requires_vllm, pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("ray")]

ray = pytest.importorskip("ray")

HERE = Path(__file__).resolve().parent


def test_ray_executor_on_vllm_cpu_stops_with_vllms_own_error(tiny_model_dir, tmp_path):
    from test_guard_e2e import run_llm

    result, recs, output = run_llm(tiny_model_dir, tmp_path, executor="ray")
    assert not result["ok"]
    assert "ValueError: current platform cpu does not support ray." in output
    assert "Started a local Ray instance" in output  # Ray itself came up; vLLM's CPU platform refused it
    assert [r for r in recs if r["kind"] == "violation"] == []


ACTOR_RUN = """
import json, os, sys
import ray

report_dir, tests_dir = sys.argv[1], sys.argv[2]
# Ray starts its raylet and worker processes from this environment: no INVARIANT_CHECK_* in it yet.
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
os.environ.update(INVARIANT_CHECK_GUARDS="1", INVARIANT_CHECK_GUARDS_MODE="record",
                  INVARIANT_CHECK_REPORT_DIR=report_dir, INVARIANT_CHECK_TEST_FAULT="stale-max-seq-len")

from vllm.plugins import load_general_plugins
load_general_plugins()  # the engine process loads the plugins before it creates the executor
from vllm.v1.executor.ray_env_utils import get_driver_env_vars
from vllm.v1.executor.ray_utils import WORKER_SPECIFIC_ENV_VARS

driver_env = get_driver_env_vars(worker_specific_vars=WORKER_SPECIFIC_ENV_VARS)


@ray.remote(num_cpus=1)
class Worker:
    def env_before(self):
        return sorted(k for k in os.environ if k.startswith("INVARIANT_CHECK_"))

    def initialize_worker(self, driver_env_vars):
        # RayWorkerProc.initialize_worker applies the driver's variables with setdefault, then
        # the worker loads the general plugins (WorkerWrapperBase.init_worker).
        for key, value in driver_env_vars.items():
            os.environ.setdefault(key, value)
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        return os.getpid()

    def draft_steps(self):
        sys.path.insert(0, tests_dir)
        from guards_draft_steps import make_proposer, register_cpu_kernels, run_draft_steps, step0_metadata
        register_cpu_kernels()
        p = make_proposer()
        run_draft_steps(p, step0_metadata(p))
        from invariant_check.runtime_guards import runtime
        return runtime.reporter().violations


w = Worker.remote()
before = ray.get(w.env_before.remote())
pid = ray.get(w.initialize_worker.remote(driver_env))
violations = ray.get(w.draft_steps.remote())
print("RAY-RESULT " + json.dumps({"driver": os.getpid(), "actor": pid, "env_before": before,
                                  "violations": violations}), flush=True)
ray.shutdown()
"""


def test_violation_in_a_ray_worker_comes_back_through_report(tmp_path):
    from click.testing import CliRunner
    from invariant_check.runtime_guards.commands import report_command

    report_dir = tmp_path / "reports"
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVARIANT_CHECK_")}
    env.update(VLLM_CONFIGURE_LOGGING="0", RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(ACTOR_RUN), str(report_dir), str(HERE)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RAY-RESULT ")), None)
    assert line is not None, (proc.returncode, proc.stdout[-3000:], proc.stderr[-6000:])
    res = json.loads(line[len("RAY-RESULT "):])
    assert res["env_before"] == []  # the variables reached the actor only through vLLM's hand-over
    assert res["violations"] >= 1 and res["actor"] != res["driver"]
    recs = [json.loads(x) for f in report_dir.glob("invariant-check-*.jsonl") for x in f.read_text().splitlines()]
    found = [r for r in recs if r["kind"] == "violation"]
    assert found and {r["pid"] for r in found} == {res["actor"]}
    assert found[0]["guard"] == "metadata-coherence" and found[0]["values"]["field"] == "max_seq_len"
    out = CliRunner().invoke(report_command, [str(report_dir)])
    assert out.exit_code == 1, out.output
    assert "metadata-coherence/max-seq-len" in out.output and f"pid {res['actor']}" in out.output
