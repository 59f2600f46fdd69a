"""`invariant-check explain`: Markdown when piped, rendered for a terminal (headings, code
blocks, wrapped to the width) and paged when longer than the screen, "did you mean" for codes
and names. The terminal cases run the real command on a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from ic_support import assert_no_traceback, clean_env, run_cli

from invariant_check.cli.explain import markdown
from invariant_check.cli.markdown_term import render
from invariant_check.api.registry import all_rules

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_piped_it_is_the_markdown_page_unchanged(tmp_path):
    run = run_cli("explain", "IC002", cwd=tmp_path)
    assert run.code == 0, run.err
    assert run.out == markdown(all_rules()["IC002"])
    assert run.out.startswith("# IC002 skip-topk-without-compaction\n") and "```python" in run.out
    assert run_cli("explain", "IC002", "--format", "markdown", cwd=tmp_path).out == run.out


@pytest.mark.parametrize("code", list(all_rules()))
def test_rendered_pages_fit_the_width_and_keep_code_as_written(tmp_path, code):
    run = run_cli("explain", code, "--examples", "--format", "terminal", cwd=tmp_path, env=clean_env(COLUMNS="72"))
    assert run.code == 0 and not ANSI.search(run.out)  # not a terminal: no colour
    lines = run.out.splitlines()
    assert not any(re.match(r"#{1,6} |```", l) for l in lines)
    code_lines = {l for l in lines if l.startswith("    ")}
    too_wide = [l for l in lines if len(l) > 71 and l not in code_lines]
    assert too_wide == []
    # every example's code is there, indented, line for line
    for ex in all_rules()[code].INVALID:
        for src in ex.code.strip("\n").splitlines():
            assert f"    {src}".rstrip() in lines
    assert lines[1] == "=" * len(lines[0])  # the title, underlined


def test_the_long_option_lines_are_wrapped_with_a_hanging_indent():
    text = render(markdown(all_rules()["IC002"]), width=60)
    item = next(i for i, l in enumerate(text.splitlines()) if l.startswith("- `forward-calls`"))
    following = text.splitlines()[item + 1]
    assert following.startswith("  ") and not following.startswith("  -")
    assert max(len(l) for l in text.splitlines() if not l.startswith("    ")) <= 60


def test_render_styles_inline_markup_for_a_terminal():
    md = "# Title\n\nSee `x.y` and **this** [page](../configuration.md), [site](https://example.org).\n\n```python\nx  =  1\n```\n"
    plain = render(md, width=80)
    assert plain.splitlines()[:2] == ["Title", "====="]
    assert "See `x.y` and **this** page, site (https://example.org)." in plain
    assert "    x  =  1" in plain.splitlines()
    colored = render(md, width=80, color=True)
    assert "\x1b[36mx.y\x1b[0m" in colored and "\x1b[1mthis\x1b[0m" in colored and "`" not in ANSI.sub("", colored.split("\n\n")[1])


@pytest.mark.parametrize(
    "token, suggestion",
    [("IC02", "IC002"), ("ic02", "IC002"), ("stale-derived", "stale-derived-metadata"), ("last-entry", "last-entry-validation"),
     ("unused-supression", "unused-suppression")],
)
def test_unknown_rules_get_did_you_mean(tmp_path, token, suggestion):
    run = run_cli("explain", token, cwd=tmp_path)
    assert_no_traceback(run)
    assert run.code == 2 and run.out == ""
    (line,) = run.err.strip().splitlines()
    assert f"unknown rule {token!r} (did you mean {suggestion}?)" in line


# -- on a terminal -------------------------------------------------------------------------------


def _on_a_terminal(args: list[str], rows: int, cols: int, **env: str) -> str:
    """Runs the real command with a pseudo-terminal as its stdin, stdout and stderr."""
    import fcntl
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    environ = clean_env(**env)
    environ.pop("COLUMNS", None)
    environ.pop("LINES", None)
    proc = subprocess.Popen([sys.executable, "-m", "invariant_check.cli.commands", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=environ, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            proc.kill()
            raise AssertionError("the command did not finish")
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: the command (and its pager) exited
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks)[-2000:]
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.fixture
def pager(tmp_path) -> tuple[str, Path]:
    """A pager that records what it was given."""
    got = tmp_path / "paged.txt"
    script = tmp_path / "pager.sh"
    script.write_text(f"#!/bin/sh\ncat > '{got}'\n")
    script.chmod(0o755)
    return str(script), got


def test_a_long_page_goes_through_the_pager_rendered_and_coloured(pager):
    script, got = pager
    shown = _on_a_terminal(["explain", "IC002"], rows=24, cols=70, PAGER=script)
    paged = got.read_text()
    assert "What it does" in paged and "```" not in paged and "## " not in paged
    assert "\x1b[1m" not in paged  # a pager other than less gets the text without colour codes
    assert max(len(l) for l in paged.splitlines() if not l.startswith("    ")) <= 69
    assert "What it does" not in shown  # it went to the pager, not the terminal


def test_no_pager_and_short_pages_print_to_the_terminal(pager):
    script, got = pager
    shown = _on_a_terminal(["explain", "IC002", "--no-pager"], rows=24, cols=70, PAGER=script)
    assert not got.exists()
    assert "\x1b[1m\x1b[4mIC002 skip-topk-without-compaction\x1b[0m" in shown  # a heading, in colour
    assert "```" not in shown
    # a screen taller than the page: no pager
    tall = _on_a_terminal(["explain", "IC900"], rows=500, cols=100, PAGER=script)
    assert not got.exists() and "unused" in tall.lower()


def test_no_color_on_a_terminal(pager):
    script, _ = pager
    shown = _on_a_terminal(["explain", "IC001", "--no-pager"], rows=24, cols=80, NO_COLOR="1", PAGER=script)
    assert not ANSI.search(shown) and "What it does\n------------" in shown


@pytest.mark.parametrize("code", list(all_rules()))
def test_the_default_page_is_what_a_user_reads_and_points_at_the_examples(tmp_path, code):
    """What it finds, why, an example and its repair, the fix and the options; no tested
    examples (they are behind --examples), and a pointer to them."""
    rule = all_rules()[code]
    run = run_cli("explain", code, cwd=tmp_path)
    assert run.code == 0, run.err
    headings = re.findall(r"^## (.+)$", run.out, re.M)
    assert headings == ["What it does", "Why is this bad?", "Example", "Use instead", "Fix", "Options", "More"]
    assert f"`invariant-check explain {code} --examples`" in run.out
    assert f"{len(rule.INVALID)} flagged" in run.out
    assert "tested examples)" not in "\n".join(f"## {h}" for h in headings)
    assert len(run.out.splitlines()) < 130
    # the long sections it leaves out are named, and are on the whole page
    full = run_cli("explain", code, "--examples", cwd=tmp_path).out
    for heading in re.findall(r"^## (.+)$", full, re.M):
        assert heading in headings or f"*{heading}*" in run.out or "tested examples" in heading or heading.startswith(("The fix", "Option defaults"))
    assert full == markdown(rule, examples=True)
    for ex in rule.VALID + rule.INVALID:
        assert ex.code.strip("\n") in full
    # a module that stands beside several examples is printed once, then named
    beside = {(n, c.strip("\n")) for ex in rule.VALID + rule.INVALID for n, c in ex.files.items()}
    for name, code in beside:
        if code:  # (an empty `__init__.py` is only named)
            as_examples = sum(ex.code.strip("\n") == code for ex in rule.VALID + rule.INVALID)
            assert full.count("\n" + code + "\n```") == 1 + as_examples, name
