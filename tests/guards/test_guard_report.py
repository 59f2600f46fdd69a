"""Report files, the `report` and `guards` commands, and the pytest plugin."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

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


def test_report_points_a_stale_upper_bound_to_ic004_and_the_findings(tmp_path):
    write(tmp_path, 21, {"kind": "violation", "guard": "metadata-coherence", "invariant": "seq-lens-upper-bound",
                         "message": "DraftModelProposer draft step 0, request row 0", "values": {}},
          {"kind": "violation", "guard": "topk-layout", "invariant": "reuse-before-compaction",
           "message": "step 1", "values": {}})
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    at = next(i for i, line in enumerate(lines) if "metadata-coherence/seq-lens-upper-bound" in line)
    see = [line for line in lines[at + 2 : at + 4] if line.strip().startswith("see ")]
    assert any("IC004" in line and "`invariant-check explain IC004`" in line for line in see)
    assert not any("docs/rules/" in line for line in see)  # a file an installed user does not have
    assert any("docs/findings.md" in line for line in see)
    # an invariant with no rule behind it gets no pointer
    at = next(i for i, line in enumerate(lines) if "topk-layout/reuse-before-compaction" in line)
    assert not any(line.strip().startswith("see ") for line in lines[at + 2 : at + 3])
    data = json.loads(CliRunner().invoke(report_command, [str(tmp_path), "--format", "json"]).output)
    groups = {g["invariant"]: g["see"] for g in data["groups"]}
    assert any("docs/findings.md" in s for s in groups["seq-lens-upper-bound"])
    assert groups["reuse-before-compaction"] == []


def test_the_pages_the_report_points_to_exist():
    from invariant_check.api.registry import all_rules
    from invariant_check.runtime_guards.reporting import SEE_ALSO

    root = Path(__file__).resolve().parents[2]
    for pointers in SEE_ALSO.values():
        for pointer in pointers:
            for path in re.findall(r"docs/[\w/.-]+\.md", pointer):
                assert (root / path).is_file(), path
            for code in re.findall(r"invariant-check explain (\w+)", pointer):
                assert code in all_rules(), code


def test_report_exits_0_when_clean_and_2_on_a_bad_dir(tmp_path):
    write(tmp_path, 11, {"kind": "patched", "guard": "topk-layout", "invariant": "installed", "message": "p"})
    write(tmp_path, 12, {"kind": "guard_error", "guard": "topk-layout", "invariant": "guard_error", "message": "e"})
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 0 and "0 violation(s), 1 guard error(s)" in res.output
    for bad in (tmp_path / "missing", tmp_path / "invariant-check-host-11.jsonl"):
        res = CliRunner().invoke(report_command, [str(bad)])
        assert res.exit_code == 2
        assert len(res.output.strip().splitlines()) == 1 and "error" in res.output


@pytest.mark.parametrize("content", [None, b"", b"\n\n", b'{"kind": "violation", "gua', b"\xff\xfe not text\n"])
def test_report_without_records_exits_2(tmp_path, content):
    """An empty folder (or only empty/torn files) means the guards were not on: a misconfigured
    CI must not pass."""
    if content is not None:
        (tmp_path / "invariant-check-host-1.jsonl").write_bytes(content)
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "no guard records: were the guards enabled in the processes that ran?" in lines[0]
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_lines_that_are_not_utf8_or_not_json_are_counted_not_fatal(tmp_path):
    path = write(tmp_path, 12, {"kind": "violation", "guard": "topk-layout", "invariant": "compacted-twice",
                                "message": "m", "values": {}})
    with open(path, "ab") as fh:
        fh.write(b"\xc3\x28 invalid utf-8\n")  # not UTF-8
        fh.write(b"[1, 2]\n")  # JSON, not a record
        fh.write(b'{"kind": "violation", "pid": 7, "guard": "g", "invariant": "i", "message": "m", "timestamp": "x"}\n')
    for fmt in ("text", "json"):
        res = CliRunner().invoke(report_command, [str(tmp_path), "--format", fmt])
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    assert data["unparsable_lines"] == [f"{path.name}:2", f"{path.name}:3"] and data["violations"] == 2
    text = CliRunner().invoke(report_command, [str(tmp_path)]).output
    assert "2 unparsable line(s)" in text


MALFORMED = [
    ({"kind": "violation"}, "violation record without guard, invariant, message, pid"),
    ({"kind": "violation", "guard": "topk-layout", "invariant": "x", "pid": 3}, "violation record without message"),
    ({"kind": "violation", "guard": 3, "invariant": "x", "message": "m", "pid": [1]},
     "violation record whose guard, pid are of the wrong type"),
    ({"kind": "guard_error", "guard": None, "invariant": "guard_error", "message": "e", "pid": 3},
     "guard_error record without guard"),
    ({"kind": "alarm", "guard": "g", "pid": 3}, "unknown kind 'alarm' (expected violation, guard_error, patched)"),
    ({"guard": "g", "pid": 3}, "no `kind`"),
]


def _raw(dir_, name, *records):
    path = dir_ / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_record_without_its_fields_is_listed_as_malformed_never_counted(tmp_path):
    good = {"kind": "violation", "guard": "topk-layout", "invariant": "reuse-before-compaction",
            "message": "step 1 reads per-token rows", "pid": 12, "site": "m.P.forward", "timestamp": 2.0}
    path = _raw(tmp_path, "invariant-check-host-12.jsonl", good, *(r for r, _ in MALFORMED))
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 1, res.output
    assert "1 violation(s), 0 guard error(s)" in res.output
    assert "None" not in res.output
    assert f"{len(MALFORMED)} malformed record(s), not counted:" in res.output
    for line, (_, why) in enumerate(MALFORMED[:5], 2):
        assert f"{path.name}:{line}: {why}" in res.output
    assert "and 1 more (--format json lists all)" in res.output
    data = json.loads(CliRunner().invoke(report_command, [str(tmp_path), "--format", "json"]).output)
    assert data["violations"] == 1 and data["processes"] == 1
    assert data["malformed_records"] == [f"{path.name}:{i}: {why}" for i, (_, why) in enumerate(MALFORMED, 2)]
    assert [r["message"] for r in data["records"]] == [good["message"]]


def test_a_violation_without_a_site_prints_no_none(tmp_path):
    _raw(tmp_path, "invariant-check-host-5.jsonl",
         {"kind": "violation", "guard": "group-metadata", "invariant": "disallowed-type", "message": "group 0", "pid": 5})
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 1 and "None" not in res.output and "unknown site" in res.output


def test_a_report_of_malformed_records_only_exits_2(tmp_path):
    _raw(tmp_path, "invariant-check-host-1.jsonl", {"kind": "violation"}, {"kind": "violation", "pid": 1})
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    first, *listed = res.stderr.strip().splitlines()
    assert "no guard records" in first and "2 malformed record(s)" in first
    assert listed == [
        "invariant-check: malformed record: invariant-check-host-1.jsonl:1: violation record without guard, invariant, message, pid",
        "invariant-check: malformed record: invariant-check-host-1.jsonl:2: violation record without guard, invariant, message",
    ]


def test_guards_with_an_invalid_variable_exits_2_with_one_line():
    res = CliRunner().invoke(guards_command, [], env={"INVARIANT_CHECK_GUARDS": "topk"})
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "INVARIANT_CHECK_GUARDS" in lines[0] and "topk-layout" in lines[0]
    res = CliRunner().invoke(guards_command, ["--strict"], env={"INVARIANT_CHECK_GUARDS_SYNC": "soon"})
    assert res.exit_code == 2 and "INVARIANT_CHECK_GUARDS_SYNC" in res.stderr


def test_commands_module_imports_nothing_heavy(tmp_path):
    code = "import sys; import invariant_check.runtime_guards.commands; print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch','vllm')))"
    # cwd outside the checkout, so the installed package is the one imported
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path).stdout
    assert out.strip() == "[]"


@requires_vllm
@pytest.mark.vllm
def test_guards_command_lists_version_guards_and_targets(monkeypatch):
    for var in ("INVARIANT_CHECK_GUARDS", "INVARIANT_CHECK_GUARDS_MODE", "INVARIANT_CHECK_TEST_FAULT"):
        monkeypatch.delenv(var, raising=False)
    res = CliRunner().invoke(guards_command, ["--format", "json", "--strict"])
    assert res.exit_code == 0, (res.stdout[-2000:], res.stderr[-2000:])
    data = json.loads(res.stdout)
    assert data["vllm_version"].startswith("0.32") and data["strict_missing"] == []
    rows = {(g, r["target"]): r for g, rs in data["guards"].items() for r in rs}
    base = "vllm.v1.spec_decode.llm_base_proposer:SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata"
    for guard in ("group-metadata", "metadata-coherence"):
        assert rows[(guard, base)]["patched"] and rows[(guard, base)]["expected"]
    assert rows[("topk-layout", "vllm.model_executor.models.deepseek_mtp:DeepSeekMultiTokenPredictor.compact_topk_indices")]["patched"]
    assert rows[("topk-layout", "vllm.v1.worker.gpu.spec_decode.mtp.speculator:MTPSpeculator.on_prefill_end")]["patched"]
    for target in ("vllm.v1.worker.gpu.spec_decode.speculator:build_attn_metadata",
                   "vllm.v1.worker.gpu.spec_decode.speculator:DraftModelSpeculator._copy_request_inputs"):
        assert rows[("metadata-coherence", target)]["patched"], target
    legacy = rows[("group-metadata", "vllm.v1.spec_decode.eagle:SpecDecodeBaseProposer.propose")]
    assert not legacy["found"] and not legacy["patched"] and legacy["expected"] is False
    text = CliRunner().invoke(guards_command, [])
    for guard in ("topk-layout", "group-metadata", "metadata-coherence"):
        assert f"guard {guard}:" in text.output
    # The dry run restored everything it patched.
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    assert not getattr(SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata,
                       "__invariant_check_wrapped__", False)


@requires_vllm
@pytest.mark.vllm
def test_guards_strict_exits_1_when_an_expected_target_is_missing(monkeypatch):
    from invariant_check.runtime_guards import targets

    missing = targets.Target("metadata-coherence", targets.V1_BASE_PROPOSER, "SpecDecodeBaseProposer",
                             "renamed_in_this_release", "metadata_coherence.wrap_propose", "0.20+")
    monkeypatch.setattr(targets, "TARGETS", (*targets.TARGETS, missing))
    monkeypatch.delenv("INVARIANT_CHECK_GUARDS", raising=False)
    res = CliRunner().invoke(guards_command, ["--strict"])
    assert res.exit_code == 1
    assert "MISSING" in res.stdout and "renamed_in_this_release" in res.stderr
    # one line for the failure, after the import progress
    *progress, last = res.stderr.strip().splitlines()
    assert "--strict" in last and not any("--strict" in line for line in progress)
    assert CliRunner().invoke(guards_command, []).exit_code == 0  # without --strict: listed only
    # --strict looks at the guards INVARIANT_CHECK_GUARDS enables.
    res = CliRunner().invoke(guards_command, ["--strict"], env={"INVARIANT_CHECK_GUARDS": "group-metadata"})
    assert res.exit_code == 0, res.output[-2000:]


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


def test_import_noise_is_kept_off_the_console_and_progress_goes_to_stderr(capfd):
    from invariant_check.runtime_guards.quiet_imports import ImportNoise

    with ImportNoise(show=False) as noise:
        for i, name in enumerate(["a.one", "a.two", "a.three", "a.four", "a.five"], 1):
            noise.progress(i, 5, name)
            print(f"print from {name}")
            os.write(2, f"fd-2 from {name}\n".encode())  # as C++ code writes
            print(f"log from {name}", file=sys.stderr)  # as logging's last-resort handler writes
    out, err = capfd.readouterr()
    assert out == ""
    assert "print from" not in err and "fd-2 from" not in err and "log from" not in err
    assert err.startswith("invariant-check: importing 5 vLLM modules...\n")
    assert "invariant-check: 4/5 imported" in err
    assert len(noise.lines) == 15 and noise.elapsed >= 0
    assert noise.summary(5).startswith("imported 5 vLLM module(s) in ") and "15 line(s)" in noise.summary(5)

    with ImportNoise(show=True) as noise:
        noise.progress(1, 1, "a.one")
        print("print shown")
        os.write(1, b"fd-1 shown\n")
    out, err = capfd.readouterr()
    assert out == ""  # stdout stays ours (JSON): what vLLM prints goes to stderr
    assert "print shown" in err and "fd-1 shown" in err and noise.lines == []


@requires_vllm
@pytest.mark.vllm
@pytest.mark.slow
def test_guards_command_reports_progress_and_time_and_keeps_vllm_output_behind_v(tmp_path):
    from ic_support import clean_env, run_cli

    quiet = run_cli("guards", cwd=tmp_path, env=clean_env())
    assert quiet.code == 0, quiet.err[-2000:]
    err = quiet.err.strip().splitlines()
    assert all(line.startswith("invariant-check: ") for line in err), err  # nothing from vLLM
    assert re.match(r"invariant-check: importing (\d+) vLLM modules\.\.\.$", err[0]), err
    total = int(re.search(r"importing (\d+)", err[0]).group(1))
    done = re.match(rf"invariant-check: imported {total} vLLM module\(s\) in [0-9.]+ s"
                    r"(?:; vLLM printed (\d+) line\(s\) meanwhile \(shown with -v\))?$", err[-1])
    assert done, err[-1]
    printed = int(done.group(1) or 0)
    assert re.search(rf"^checked in [0-9.]+ s \({total} vLLM modules imported in [0-9.]+ s\)$", quiet.out, re.M)

    loud = run_cli("guards", "-v", "--format", "json", cwd=tmp_path, env=clean_env())
    assert loud.code == 0, loud.err[-2000:]
    data = json.loads(loud.out)  # stdout is the JSON document alone
    assert data["modules_imported"] == total and data["elapsed_s"] >= data["import_s"] > 0
    foreign = [line for line in loud.err.splitlines() if line.strip() and not line.startswith("invariant-check: ")]
    assert len(foreign) == printed
