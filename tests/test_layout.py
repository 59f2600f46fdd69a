"""Fixes in the linted project's style (`invariant_check.layout`): its settings are read from
its own configuration, and the statements a fix writes come out as `ruff format` writes them
(checked against ruff itself where it is installed; the expected texts are written out so the
layout is also checked without it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from invariant_check.layout import DEFAULT, Style, restyle, style_for


def _ruff() -> list[str] | None:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    return [found] if found else None


def _ruff_formatted(code: str, line_length: int) -> bool | None:
    ruff = _ruff()
    if ruff is None:
        return None
    proc = subprocess.run(
        [*ruff, "format", "--check", "--isolated", "--line-length", str(line_length), "-"],
        input=code.encode(), capture_output=True,
    )
    return proc.returncode == 0


OLD = textwrap.dedent(
    """\
    class A:
        def f(self, cad, N, per_layer_attn_metadata):
            new = cad.replace(seq_lens=cad.seq_lens + N, query_start_loc=cad.query_start_loc)
            if self.allowed_attn_types is not None and not isinstance(md, self.allowed_attn_types):
                raise ValueError("x")
            self.generate_draft(num_reqs, attn_metadata, num_tokens_across_dp=None)  # FIXME
            return new
    """
)

# what three fixes write, as one line each (the fix builders' own output before layout)
NEW = textwrap.dedent(
    """\
    class A:
        def f(self, cad, N, per_layer_attn_metadata):
            new = cad.replace(seq_lens=cad.seq_lens + N, query_start_loc=cad.query_start_loc, seq_lens_cpu_upper_bound=cad.seq_lens_cpu_upper_bound + N if cad.seq_lens_cpu_upper_bound is not None else None)
            if self.allowed_attn_types is not None and not all(isinstance(md, self.allowed_attn_types) for md in per_layer_attn_metadata.values()):
                raise ValueError("x")
            self.generate_draft(num_reqs, attn_metadata, num_tokens_across_dp=None, rebuild_attn_metadata=lambda: self._build(num_reqs=num_reqs, max_query_len=1))  # FIXME
            common_attn_metadata.max_seq_len = min(common_attn_metadata.max_seq_len + level_num_drafts, self.max_model_len)
            return new
    """
)

EXPECTED_88 = textwrap.dedent(
    """\
    class A:
        def f(self, cad, N, per_layer_attn_metadata):
            new = cad.replace(
                seq_lens=cad.seq_lens + N,
                query_start_loc=cad.query_start_loc,
                seq_lens_cpu_upper_bound=(
                    cad.seq_lens_cpu_upper_bound + N
                    if cad.seq_lens_cpu_upper_bound is not None
                    else None
                ),
            )
            if self.allowed_attn_types is not None and not all(
                isinstance(md, self.allowed_attn_types)
                for md in per_layer_attn_metadata.values()
            ):
                raise ValueError("x")
            self.generate_draft(
                num_reqs,
                attn_metadata,
                num_tokens_across_dp=None,
                rebuild_attn_metadata=lambda: self._build(
                    num_reqs=num_reqs, max_query_len=1
                ),
            )  # FIXME
            common_attn_metadata.max_seq_len = min(
                common_attn_metadata.max_seq_len + level_num_drafts, self.max_model_len
            )
            return new
    """
)


def test_statements_a_fix_writes_are_laid_out_as_ruff_format_does():
    out = restyle(OLD, NEW, DEFAULT)
    assert out == EXPECTED_88
    assert max(len(line) for line in out.splitlines()) <= 88
    if _ruff_formatted(out, 88) is False:
        pytest.fail("ruff format would change the laid-out code")


def test_a_longer_line_length_keeps_more_on_one_line():
    out = restyle(OLD, NEW, Style(line_length=120))
    assert "    common_attn_metadata.max_seq_len = min(common_attn_metadata.max_seq_len + level_num_drafts, self.max_model_len)\n" in out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert _ruff_formatted(out, 120) in (True, None)


def test_lines_the_fix_did_not_touch_stay_as_written():
    old = "x = f(a,\n      b)\ny = 1\n"
    new = "x = f(a,\n      b)\ny = 2\n"
    assert restyle(old, new, DEFAULT) == new  # the badly wrapped `x = ...` is the project's own


def test_a_magic_trailing_comma_keeps_its_call_split():
    old = "x = f(\n    a,\n)\n"
    new = "x = f(\n    a,\n    b=1,\n)\n"
    assert restyle(old, new, DEFAULT) == new
    assert restyle(old, "x = f(\n    a, b=1,\n)\n", DEFAULT) == new


def test_a_long_comment_is_wrapped():
    old = "def f():\n    return 1\n"
    new = "def f():\n    # " + " ".join(["word"] * 30) + "\n    return 1\n"
    out = restyle(old, new, DEFAULT)
    lines = out.splitlines()
    assert all(len(line) <= 88 for line in lines)
    assert all(line.startswith("    # ") for line in lines[1:-1]) and len(lines) == 4


def test_a_statement_holding_a_comment_is_left_as_written():
    old = "x = 1\n"
    new = "x = f(aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,  # why\n      bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb)\n"
    assert restyle(old, new, DEFAULT) == new


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("pyproject.toml", "[tool.ruff]\nline-length = 100\n[tool.ruff.format]\nquote-style = 'single'\n", (100, "'")),
        ("pyproject.toml", "[tool.black]\nline-length = 79\nskip-string-normalization = true\n", (79, "")),
        ("ruff.toml", "line-length = 120\n", (120, '"')),
        (".ruff.toml", "[format]\nquote-style = 'preserve'\n", (88, "")),
        ("pyproject.toml", "[tool.ruff.lint]\nselect = ['E']\n", (88, '"')),
    ],
)
def test_settings_come_from_the_project_configuration(tmp_path, name, text, expected):
    root = tmp_path / name.replace(".", "_")
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / name).write_text(text)
    style = style_for(str(root / "pkg" / "sub" / "mod.py"))
    assert (style.line_length, style.quote) == expected
    assert style.config == str(root / name)


def test_a_pyproject_without_formatter_settings_is_passed_for_the_next_folder_up(tmp_path):
    (tmp_path / "ruff.toml").write_text("line-length = 99\n")
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert style_for(str(tmp_path / "inner" / "m.py")).line_length == 99


def test_a_broken_configuration_falls_back_to_the_default(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ruff.toml").write_text("line-length = [\n")
    assert style_for(str(tmp_path / "sub" / "m.py")).line_length in (88, style_for(str(tmp_path)).line_length)


def test_single_quotes_where_the_project_asks_for_them():
    old = "x = 1\n"
    new = 'x = g("a", "b")\n'
    assert restyle(old, new, Style(quote="'")) == "x = g('a', 'b')\n"
