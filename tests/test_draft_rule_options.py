"""Options of IC004 and IC005 through `[tool.invariant-check.options.*]`, with the real CLI:
a table option (`derived-fields`) validated with a one-line error, and options that change
what is reported (another derived field, another advancing call, another forward)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from ic_support import assert_no_traceback, run_cli

from invariant_check.settings.config import ConfigError, parse_table

STEP = """
from dataclasses import dataclass


@dataclass
class Meta:
    seq_lens: "torch.Tensor"
    max_seq_len: int
    dcp_local_seq_lens: "torch.Tensor | None" = None
    num_context_tokens: int = 0


def step(md: Meta):
    md.seq_lens += 1
    md.max_seq_len += 1
"""

LOOP = """
def advance_batch(buffers):
    buffers.positions += 1


def draft(self, n, attn_metadata):
    for step in range(self.num_steps):
        hidden = self.execute(n, attn_metadata)
        advance_batch(self.buffers)
"""


def project(tmp_path: Path, options: str, code: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.invariant-check]\n" + textwrap.dedent(options))
    (tmp_path / "m.py").write_text(textwrap.dedent(code).lstrip("\n"))
    return tmp_path


def findings(tmp_path: Path, *codes: str) -> list[tuple[str, int, str]]:
    run = run_cli("lint", "--no-cache", "--format", "json", "--select", ",".join(codes), ".", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code in (0, 1), run.err
    return [(f["rule"], f["line"], f["message"]) for f in json.loads(run.out)["findings"]]


def test_defaults_know_what_the_releases_derive(tmp_path):
    # no configuration: vLLM's releases compute the DCP lengths from `seq_lens`
    # (scripts/gen_derivations.py), so a class holding both gets the learned derivation
    got = findings(project(tmp_path, "", STEP), "IC004")
    assert [(rule, line) for rule, line, _ in got] == [("IC004", 13)]
    assert "`dcp_local_seq_lens`" in got[0][2] and "`max_seq_len`" not in got[0][2]
    assert "`num_context_tokens`" not in got[0][2]  # nothing shows that one derived


def test_derived_fields_table_adds_a_field(tmp_path):
    options = """
    [tool.invariant-check.options.IC004]
    derived-fields = { seq_lens = ["num_context_tokens"] }
    """
    got = findings(project(tmp_path, options, STEP), "IC004")
    assert [(rule, line) for rule, line, _ in got] == [("IC004", 13)]
    assert "`num_context_tokens`" in got[0][2] and "`dcp_local_seq_lens`" in got[0][2]


@pytest.mark.parametrize(
    "value",
    [["max_seq_len"], {"seq_lens": "max_seq_len"}, {"seq_lens": [1]}, "seq_lens"],
)
def test_derived_fields_must_be_a_table_of_lists(tmp_path, value):
    with pytest.raises(ConfigError) as info:
        parse_table({"options": {"IC004": {"derived-fields": value}}}, tmp_path / "pyproject.toml")
    message = str(info.value)
    assert "\n" not in message and "derived-fields" in message and "table of field = [derived fields]" in message


def test_bad_table_on_the_command_line_is_exit_2(tmp_path):
    options = """
    [tool.invariant-check.options.IC004]
    derived-fields = ["max_seq_len"]
    """
    project(tmp_path, options, STEP)
    run = run_cli("lint", "--no-cache", ".", cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code == 2 and "derived-fields" in run.err and run.err.count("\n") == 1


def test_ic005_names_are_options(tmp_path):
    # by default neither `execute` (forward) nor `advance_batch` (a project function that
    # advances positions, so it counts anyway) is named: no forward, no finding
    assert findings(project(tmp_path, "", LOOP), "IC005") == []
    options = """
    [tool.invariant-check.options.IC005]
    forward-calls = ["execute"]
    """
    got = findings(project(tmp_path, options, LOOP), "IC005")
    assert [(rule, line) for rule, line, _ in got] == [("IC005", 6)]
    assert "`advance_batch(...)`" in got[0][2]
    options += 'advanced-fields = ["seq_lens"]\n'
    assert findings(project(tmp_path, options, LOOP), "IC005") == []
