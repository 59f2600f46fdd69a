"""Report files, the `report` and `guards` commands, and the pytest plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from guards_helpers import requires_vllm
from invariant_check.runtime_guards.commands import guards_command, report_command
from invariant_check.runtime_guards.config import GuardConfig
from invariant_check.runtime_guards.errors import InvariantViolation
from invariant_check.runtime_guards.reporting import Reporter


def write(dir_, pid, *records):
    path = dir_ / f"invariant-check-host-{pid}.jsonl"
    with open(path, "a") as fh:
        fh.writelines(json.dumps({"pid": pid, "timestamp": 1.0, "vllm_version": "0.32.0", **r}) + "\n" for r in records)
    return path


def test_reporter_writes_one_file_per_process_with_the_required_fields(tmp_path):
    rep = Reporter(GuardConfig(guards=frozenset({"topk-layout"}), mode="record", report_dir=str(tmp_path)))
    rep.violation("topk-layout", "reuse-before-compaction", "msg", {"step": 1}, site="s")
    files = list(tmp_path.glob("invariant-check-*.jsonl"))
    assert len(files) == 1 and str(os.getpid()) in files[0].name
    rec = json.loads(files[0].read_text())
    for key in ("guard", "invariant", "values", "pid", "rank", "vllm_version", "timestamp", "message"):
        assert key in rec
    assert rec["values"] == {"step": 1} and rec["kind"] == "violation"


def test_raise_mode_raises_an_assertion_error_subclass(tmp_path):
    rep = Reporter(GuardConfig(guards=frozenset({"topk-layout"}), mode="raise", report_dir=str(tmp_path)))
    with pytest.raises(AssertionError) as info:
        rep.violation("topk-layout", "x", "broken", {})
    assert isinstance(info.value, InvariantViolation) and "broken" in str(info.value)
    assert list(tmp_path.glob("*.jsonl"))  # recorded before raising


def test_report_merges_processes_and_exits_1_on_violations(tmp_path):
    write(tmp_path, 11, {"kind": "patched", "guard": "topk-layout", "invariant": "installed", "message": "p"})
    write(tmp_path, 12, {"kind": "violation", "guard": "topk-layout", "invariant": "reuse-before-compaction",
                         "message": "step 1 reads per-token rows", "values": {}})
    write(tmp_path, 13, {"kind": "violation", "guard": "group-metadata", "invariant": "disallowed-type",
                         "message": "group 0", "values": {}})
    (tmp_path / "invariant-check-host-14.jsonl").write_text('{"kind": "violation", "gua')  # torn line
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "2 violation(s)" in res.output and "reuse-before-compaction" in res.output
    assert "unparsable" in res.output
    res = CliRunner().invoke(report_command, [str(tmp_path), "--format", "json"])
    assert res.exit_code == 1
    data = json.loads(res.output)
    assert data["violations"] == 2 and data["processes"] == 3 and data["files"] == 4
    assert {g["guard"] for g in data["groups"]} == {"topk-layout", "group-metadata"}


def test_report_exits_0_when_clean_and_2_on_a_bad_dir(tmp_path):
    write(tmp_path, 11, {"kind": "patched", "guard": "topk-layout", "invariant": "installed", "message": "p"})
    write(tmp_path, 12, {"kind": "guard_error", "guard": "topk-layout", "invariant": "guard_error", "message": "e"})
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 0 and "0 violation(s), 1 guard error(s)" in res.output
    for bad in (tmp_path / "missing", tmp_path / "invariant-check-host-11.jsonl"):
        res = CliRunner().invoke(report_command, [str(bad)])
        assert res.exit_code == 2
        assert len(res.output.strip().splitlines()) == 1 and "error" in res.output


def test_commands_module_imports_nothing_heavy():
    code = "import sys; import invariant_check.runtime_guards.commands; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch','vllm')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == "[]"


@requires_vllm
@pytest.mark.vllm
def test_guards_command_lists_version_guards_and_targets():
    res = CliRunner().invoke(guards_command, ["--format", "json"])
    assert res.exit_code == 0, res.output[-2000:]
    data = json.loads(res.output[res.output.index("{"):])
    assert data["vllm_version"].startswith("0.32")
    rows = {r["target"]: r for g in data["guards"].values() for r in g}
    base = "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata"
    assert rows[base]["patched"]
    assert rows["vllm.model_executor.models.deepseek_mtp:DeepSeekMultiTokenPredictor.compact_topk_indices"]["patched"]
    assert rows["vllm.v1.worker.gpu.spec_decode.mtp.speculator:MTPSpeculator.on_prefill_end"]["patched"]
    legacy = rows["vllm.v1.spec_decode.eagle:SpecDecodeBaseProposer.propose"]
    assert not legacy["found"] and not legacy["patched"]
    text = CliRunner().invoke(guards_command, [])
    assert "guard topk-layout:" in text.output and "guard group-metadata:" in text.output
    # The dry run restored everything it patched.
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    assert not getattr(SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata,
                       "__invariant_check_wrapped__", False)


INNER_TEST = """
    from invariant_check.runtime_guards import runtime

    def test_raises():
        runtime.violation("topk-layout", "reuse-before-compaction", "raised in this process")

    def test_recorded_elsewhere():
        # As a vLLM worker would: another process writes into the session's report dir.
        import json, os, tempfile
        d = os.environ.get("INVARIANT_CHECK_REPORT_DIR") or tempfile.mkdtemp()
        with open(os.path.join(d, "invariant-check-worker-999999.jsonl"), "a") as fh:
            fh.write(json.dumps({"kind": "violation", "guard": "group-metadata",
                                 "invariant": "disallowed-type", "message": "from a worker", "pid": 999999}) + "\\n")

    def test_clean():
        assert runtime.reporter() is not None

    def test_guards_env():
        import os
        assert os.environ["INVARIANT_CHECK_GUARDS"] == "all"
"""


def test_pytest_plugin_enables_guards_and_fails_the_triggering_test(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER_TEST))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INVARIANT_CHECK_")}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_inner.py")]
    on = subprocess.run(cmd + ["--invariant-guards"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert "2 failed, 2 passed" in on.stdout, on.stdout[-3000:]
    assert "FAILED test_inner.py::test_raises" in on.stdout
    assert "FAILED test_inner.py::test_recorded_elsewhere" in on.stdout and "from a worker" in on.stdout
    off = subprocess.run(cmd + ["-k", "raises or elsewhere"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert "2 passed" in off.stdout, off.stdout[-3000:]
