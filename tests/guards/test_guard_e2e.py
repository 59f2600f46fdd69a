"""End to end: a real vllm.LLM (CPU backend, MTP with 3 speculative tokens, the tiny local
DeepSeek-V3 model with index_share_for_mtp_iteration) with the guards enabled through the real
`vllm.general_plugins` entry point. The engine core and the worker are separate processes, so
every violation asserted here was found and written by another process than the test's.

The dense tiny model has no top-k buffer (sparse attention does not run on CPU), so end to end the
topk-layout guard sees the call order and the slot ids; buffer contents are covered by the unit
tests on the real V3.2 module. The metadata-coherence guard sees vLLM 0.32's real draft steps.
About 30-60 s and 3 GB per run; five runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from guards_helpers import requires_vllm

pytestmark = [requires_vllm, pytest.mark.vllm, pytest.mark.slow]

RUNNER = Path(__file__).with_name("guards_e2e_runner.py")


_PROCESS_SET = frozenset({
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    "PYTORCH_NVML_BASED_CUDA_CHECK", "TRITON_CACHE_AUTOTUNING",
})


def run_llm(model_dir, report_dir, mode="record", faults="", executor=None, config=None, extra_env=None, guards="1"):
    """config: the runner's IC_E2E_CONFIG (speculative method, prompts, ...); extra_env: more
    variables for every vLLM process (PYTHONPATH for a test-only plugin)."""
    # a clean start: what this process's own imports of vLLM and torch put in the environment
    # (thread counts, vLLM's settings) would change the engine's numerics, and so which drafts
    # are accepted, from one test order to another
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("INVARIANT_CHECK_", "VLLM_", "TORCHINDUCTOR_", "TILELANG_", "AITER_")) and k not in _PROCESS_SET
    }
    if "LD_LIBRARY_PATH" in env:  # `import vllm` puts cv2's bundled libraries first
        kept = [p for p in env["LD_LIBRARY_PATH"].split(os.pathsep) if p and "/cv2/" not in p]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
        if not kept:
            del env["LD_LIBRARY_PATH"]
    env.update(INVARIANT_CHECK_GUARDS=guards, INVARIANT_CHECK_GUARDS_MODE=mode,
               INVARIANT_CHECK_REPORT_DIR=str(report_dir), VLLM_CPU_KVCACHE_SPACE="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("VLLM_PLUGINS", None)  # all plugins: ours is loaded by vLLM itself
    if faults:
        env["INVARIANT_CHECK_TEST_FAULT"] = faults
    if config is not None:
        env["IC_E2E_CONFIG"] = json.dumps(config)
    env.update(extra_env or {})
    token = uuid.uuid4().hex
    env["IC_E2E_RUN_TOKEN"] = token  # marks every process of this run, for the cleanup below
    log = Path(report_dir).parent / f"{Path(report_dir).name}-runner.log"
    # Output to a file, not a pipe: vLLM's engine processes inherit it, and a pipe held open by
    # a surviving engine would block the test forever.
    with open(log, "w") as fh:
        argv = [sys.executable, str(RUNNER), str(model_dir)] + ([executor] if executor else [])
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            proc.wait(timeout=900)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the runner's own group: engine core, workers
            except ProcessLookupError:
                pass
            _kill_marked(token)
    output = log.read_text(errors="replace")
    line = next((l for l in output.splitlines() if l.startswith("E2E-RESULT ")), None)
    assert line is not None, (proc.returncode, output[-6000:])
    result = json.loads(line[len("E2E-RESULT "):])
    recs = [json.loads(x) for f in Path(report_dir).glob("invariant-check-*.jsonl") for x in f.read_text().splitlines() if x]
    return result, recs, output


def _kill_marked(token):
    """Kill, by pid, any process of this run that left the runner's process group."""
    import psutil

    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and p.environ().get("IC_E2E_RUN_TOKEN") == token:
                p.kill()
        except (psutil.Error, OSError):
            continue


def violations(recs, guard=None):
    return [r for r in recs if r["kind"] == "violation" and (guard is None or r["guard"] == guard)]


def test_real_code_has_no_violation(tiny_model_dir, tmp_path):
    result, recs, output = run_llm(tiny_model_dir, tmp_path)
    assert result["ok"], result["error"]
    assert all(len(o) == 10 for o in result["outputs"])
    patched = {r["site"] for r in recs if r["kind"] == "patched" and r["pid"] != result["pid"]}
    assert "vllm.model_executor.models.deepseek_mtp:DeepSeekMultiTokenPredictor.compact_topk_indices" in patched
    assert "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata" in patched
    by_guard = {(r["guard"], r["site"]) for r in recs if r["kind"] == "patched" and r["pid"] != result["pid"]}
    base = "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer"
    assert {("metadata-coherence", f"{base}.build_per_group_and_layer_attn_metadata"),
            ("metadata-coherence", f"{base}.propose"), ("group-metadata", f"{base}.build_per_group_and_layer_attn_metadata"),
            } <= by_guard
    assert violations(recs) == [] and [r for r in recs if r["kind"] == "guard_error"] == []


def test_stale_max_seq_len_is_reported_from_the_worker(tiny_model_dir, tmp_path):
    from click.testing import CliRunner
    from invariant_check.runtime_guards.commands import report_command

    result, recs, output = run_llm(tiny_model_dir, tmp_path, faults="stale-max-seq-len")
    assert result["ok"], result["error"]
    found = violations(recs, "metadata-coherence")
    assert found and {r["invariant"] for r in found} == {"max-seq-len"}
    first = found[0]
    assert first["pid"] != result["pid"]  # written by the worker process
    v = first["values"]
    assert v["field"] == "max_seq_len" and v["draft_step"] >= 1 and v["seq_lens[row]"] > v["max_seq_len"]
    assert first["site"].endswith("SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata")
    assert violations(recs, "topk-layout") == [] and violations(recs, "group-metadata") == []
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "metadata-coherence/max-seq-len" in res.output and "max_seq_len" in res.output
    assert f"pid {first['pid']}" in res.output


def test_removed_compaction_is_reported_from_the_worker(tiny_model_dir, tmp_path):
    from click.testing import CliRunner
    from invariant_check.runtime_guards.commands import report_command

    result, recs, output = run_llm(tiny_model_dir, tmp_path, faults="drop-compaction")
    assert result["ok"], result["error"]  # record mode: the run goes on
    found = violations(recs, "topk-layout")
    assert found and {r["invariant"] for r in found} == {"reuse-before-compaction"}
    first = found[0]
    assert first["pid"] != result["pid"]
    assert first["values"]["model_class"] == "DeepSeekMultiTokenPredictor"
    assert first["values"]["step"] == 1
    assert first["values"]["num_tokens"] > first["values"]["num_requests"] >= 1
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 1 and "reuse-before-compaction" in res.output


def test_wrong_slot_ids_and_bad_group_metadata_are_reported(tiny_model_dir, tmp_path):
    result, recs, output = run_llm(tiny_model_dir, tmp_path, faults="wrong-slot-ids,bad-group-metadata")
    assert result["ok"], result["error"]
    topk = violations(recs, "topk-layout")
    assert topk and {r["invariant"] for r in topk} == {"compaction-input"}
    assert any("own request's query range" in c for r in topk for c in r["values"]["failed_conditions"])
    groups = violations(recs, "group-metadata")
    assert groups and {r["invariant"] for r in groups} == {"disallowed-type"}
    g = groups[0]["values"]
    assert g["group"] == 0 and g["num_groups"] == 2 and g["draft_step"] >= 1
    assert g["type_found"].endswith("FaultInjectedMetadata") and g["allowed_types"]
    assert groups[0]["pid"] != result["pid"]


def test_raise_mode_stops_the_run(tiny_model_dir, tmp_path):
    result, recs, output = run_llm(tiny_model_dir, tmp_path, mode="raise", faults="drop-compaction")
    assert not result["ok"]
    assert [r["invariant"] for r in violations(recs)] == ["reuse-before-compaction"]
    assert "InvariantViolation" in output
