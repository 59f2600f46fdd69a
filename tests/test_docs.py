"""The README and docs/: links that resolve, the commands CI relies on, figures that say where
they came from, and no words about how the numbers' machines were come by."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _links(page: Path) -> list[str]:
    # Code blocks and inline code hold no links, only look-alikes (`kernel[grid](...)`).
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", page.read_text())
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page):
    broken = []
    for target in _links(page):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{_rel(page)} links to: {broken}"


def test_readme_is_short_and_links_every_doc_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120, "README: what it is, install, two commands, quick start, links"
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _links(ROOT / "README.md")}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert page.resolve() in linked, f"README does not link {_rel(page)}"
    assert (ROOT / "docs" / "rules" / "README.md").resolve() in linked


def test_ci_runs_the_readme_test_command_and_the_rule_page_check():
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands[-1] in ci, f"the README's test command {commands[-1]!r} is not what .ci/run runs"
    assert ".venv/bin/python scripts/gen_rule_docs.py --check" in ci


def test_install_docs_do_not_promise_an_index_or_a_made_up_url():
    for page in (ROOT / "README.md", ROOT / "docs" / "install.md"):
        blocks = re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), re.S)
        assert blocks
        for block in blocks:
            assert not re.search(r"pip install ['\"]?invariant-check(\[[^\]]*\])?['\"]?(?!\s*@)(\s|$)", block), (
                f"{_rel(page)}: `pip install invariant-check` finds nothing, it is on no package index"
            )
            for url in re.findall(r"(?:repo: |git\+)(\S+)", block):
                assert url == "local" or url.startswith("<"), f"{_rel(page)}: {url} is not a placeholder"


BENCH = ROOT / "docs" / "benchmarks.md"
PROVENANCE = re.compile(
    r"^\| (\d{4}-\d{2}-\d{2}) \| ([0-9a-f]{7,40}) \| ([^|]*(?:x86-64|aarch64|GPU|H100|A100|H200)[^|]*) \| `([^`]+)` \|$", re.M
)


def test_every_benchmark_section_says_when_where_and_how():
    text = BENCH.read_text()
    # A benchmark's quoted output may hold "## " lines; they are not headings of the page.
    text = re.sub(r"^```.*?^```", lambda m: re.sub(r"^#", " #", m.group(0), flags=re.M), text, flags=re.M | re.S)
    sections = re.split(r"^### |^## ", text, flags=re.M)[1:]
    measured = 0
    for section in sections:
        title = section.splitlines()[0]
        if "Not yet measured on a GPU" in section:
            continue
        has_figures = re.search(r"\d+(\.\d+)? ?(s|ms|us|MB|x)\b", section)
        if not has_figures or title.startswith(("How to run", "What each number")):
            continue
        rows = PROVENANCE.findall(section)
        assert rows, f"benchmarks.md, {title!r}: figures without a | date | commit | hardware | command | row"
        for _date, _commit, _hardware, command in rows:
            assert command.split()[0].endswith(("python", "python3")) or command.startswith("bash"), command
        measured += 1
    assert measured >= 3


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_pages_describe_hardware_not_how_it_was_obtained(page):
    text = page.read_text()
    for phrase in (r"\blent\b", r"\bborrowed\b", r"\bthis task\b", r"\bthis session\b", r"\bthis machine\b",
                   r"\bpending \(no GPU"):
        assert not re.search(phrase, text, re.I), f"{_rel(page)}: {phrase!r}; describe the hardware instead"
