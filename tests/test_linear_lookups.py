"""The lookups that keep lint time linear in the number of definitions give the answers of the
plain scans they replace, and the answers they share between definitions carry what they read.

- a text's word index (`needs.text_words`) against a `str.find` of each word;
- the project's word index (`Project.files_containing` past its first words) against a byte
  search of each word, file by file;
- `Module.leaf_chunks` going straight to the definitions that hold a word, against asking
  every definition;
- a chunk parsed with its nodes shifted to the file's lines, against one padded to them;
- the callers of a function, found once per name and shared by every function of that name:
  a finding reused from the cache after a caller changed would be stale.

Speed itself is measured by `bench/lint_speed.py --scaling-only`, never asserted here.
"""

from __future__ import annotations

import ast
import json
import os
import string
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ic_support import run_cli, write_tree

import invariant_check.analysis.needs as N
import invariant_check.analysis.outline as O
import invariant_check.analysis.project as P
from invariant_check.analysis.needs import Need, Words, _find_word, text_words
from invariant_check.analysis.outline import build, parse_chunk
from invariant_check.analysis.project import Project

# words and the characters around them: word characters of several scripts (`é` is a letter,
# `²` a digit to `isalnum`, `İ` lowers to two characters), separators, a dot, a newline
_PIECES = st.sampled_from(["md", "md_1", "seq_lens", "_", "é", "mdé", "²", "İ", "x2", "set_skip_topk", "a-b"])
_SEPS = st.sampled_from([" ", ".", "(", ")", "\n", "-", ",", "", "__", "#"])


@st.composite
def _texts(draw):
    parts = draw(st.lists(st.tuples(_PIECES, _SEPS), max_size=40))
    return "".join(a + b for a, b in parts)


@settings(max_examples=300, deadline=None)
@given(_texts(), st.lists(st.one_of(_PIECES, st.text(alphabet=string.ascii_letters + "_é-", min_size=1, max_size=4)), min_size=1, max_size=8))
def test_the_word_index_of_a_text_finds_what_find_finds(text, words):
    expected = {w: _find_word(text, w) for w in words}
    saved = N._INDEX_AFTER
    N._INDEX_AFTER = 0  # indexed from the first word
    try:
        index = N.TextWords(text)
        for w in words:
            assert index.positions(w) == expected[w], (text, w)
    finally:
        N._INDEX_AFTER = saved


def test_a_word_need_answers_the_same_once_the_text_is_indexed():
    text = "\n".join(f"def f_{i}(md):\n    md.seq_lens += {i}\n    f_{i + 1}(md)\n" for i in range(60))
    words = [f"f_{i}" for i in range(61)] + ["md", "seq_lens", "f", "missing"]
    before = {w: _find_word(text, w) for w in words}
    shared = text_words(text)
    for w in words:
        assert Words(w).anchors(text) == before[w]
    assert shared.runs is not None  # past the first words, one pass indexed the text
    assert Words("f_3", "f_7").anchors(text) == sorted(before["f_3"] + before["f_7"])


def _tree(tmp_path: Path) -> list[Path]:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "def advance(md):\n    md.seq_lens += 1\n",
        "pkg/b.py": "from .a import advance\n\n\ndef run(md):\n    advance(md)  # café\n",
        "pkg/c.py": "advance_all = 1\nx = 'advance'\n",
        "pkg/d.py": "caf\u00e9 = 2\n\u00e9advance = 3\n",
        "pkg/e.py": b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n",
    }
    out = []
    for rel, body in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(body, bytes) else path.write_text)(body)
        out.append(path)
    return sorted(out)


def test_the_word_index_of_the_project_finds_what_a_byte_search_finds(tmp_path, monkeypatch):
    files = _tree(tmp_path)
    words = ["advance", "md", "café", "caf", "name", "coding", "x", "advance_all", "seq_lens", "nothing", "run", "é"]

    def answers(after: int) -> dict[str, list[Path]]:
        monkeypatch.setattr(P, "_INDEX_WORDS_AFTER", after)
        project = Project(tmp_path, listing=lambda: files)
        return {w: project.files_containing(w) for w in words}

    scanned = answers(10**6)
    indexed = answers(0)
    assert indexed == scanned
    # whole words of the bytes: `éadvance` holds `advance` (é is no ASCII letter), `advance_all` does not
    assert [p.name for p in scanned["advance"]] == ["a.py", "b.py", "c.py", "d.py"]
    assert [p.name for p in scanned["café"]] == ["b.py", "d.py"]


class _Opaque(Need):
    """A need that names no anchors: `leaf_chunks` asks every definition."""

    def __init__(self, need: Need) -> None:
        self.need = need

    def holds(self, text, start=0, end=None):
        return self.need.holds(text, start, end)


_MODULE = '''\
"""The module: advance, propose and helper are named in its prose."""
import torch


def helper(md):
    """Calls advance() in prose only."""
    return md


class Drafter:
    """propose() and advance() are named here too."""

    size = helper(None)

    def advance(self, md):
        md.seq_lens += 1

    def propose(self, md):
        self.advance(md)
        helper(md)

    class Inner:
        def advance(self):
            pass


def advance(md):
    helper(md)


class Empty:
    pass


x = advance(None)
'''


def test_leaf_chunks_by_anchor_are_those_asked_one_by_one(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(_MODULE)
    words = sorted({m for m in _MODULE.replace(".", " ").replace("(", " ").split() if m.isidentifier()})
    for word in words + ["nowhere"]:
        # a fresh project each time: asking splits classes, and both ways must see the same
        fast = Project(tmp_path).module_at(path)
        slow = Project(tmp_path).module_at(path)
        got = [(c.start, c.kind, c.name) for c in fast.leaf_chunks(Words(word))]
        want = [(c.start, c.kind, c.name) for c in slow.leaf_chunks(_Opaque(Words(word)))]
        assert got == want, word


def test_a_chunk_shifted_to_its_lines_parses_as_one_padded_to_them(monkeypatch):
    text = "\n".join(
        f"@decorate({i})\nclass C{i}(Base):\n    '''Doc\n    string.'''\n    x = {i}\n\n"
        f"    def m(self, a,\n          b):\n        return [a for a in b if a]\n\n"
        f"def f{i}():\n    async def g():\n        await h()\n    return g\n"
        for i in range(40)
    )
    outline = build(text)
    for chunk in list(outline.top()):
        outline.children(chunk)
    for chunk in outline.chunks:
        monkeypatch.setattr(O, "_MAX_PAD_LINES", 10**9)
        padded = parse_chunk(text, chunk)
        monkeypatch.setattr(O, "_MAX_PAD_LINES", 0)
        monkeypatch.setattr(O, "_PAD_PER_LINE", 0)
        shifted = parse_chunk(text, chunk)
        dump = lambda stmts: [ast.dump(s, include_attributes=True) for s in stmts]  # noqa: E731
        assert dump(shifted[0]) == dump(padded[0]) and dump(shifted[1]) == dump(padded[1]), chunk


_METADATA = """\
from dataclasses import dataclass


@dataclass
class CommonAttentionMetadata:
    seq_lens: object
    max_seq_len: int
    seq_lens_cpu: object
"""


def _lint(root: Path, *files: str) -> dict:
    run = run_cli("lint", "--format", "json", "--jobs", "1", "--select", "IC004", *files, cwd=root)
    assert run.code in (0, 1), run.err
    return json.loads(run.out)


def test_callers_found_while_linting_another_file_keep_what_they_read(tmp_path):
    # Two helpers named `advance`: the callers of the name are found (and resolved) while the
    # first file is linted, and the second file's answer reuses them. Both answers must depend
    # on which files hold the name: when a new caller that skips the update appears, neither
    # unchanged file may be served its old answer from the cache.
    update = "    md.max_seq_len += 1\n    md.seq_lens_cpu += 1\n"
    calls = "    advance(md)\n" + update + "    d.advance(md)\n" + update
    head = "from . import d\nfrom .a import advance\nfrom .meta import CommonAttentionMetadata\n\n\n"
    write_tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/meta.py": _METADATA,
        "pkg/a.py": "def advance(md):\n    md.seq_lens += 1\n",
        "pkg/d.py": "def advance(md):\n    md.seq_lens += 1\n",
        "pkg/b.py": head + "def run(md: CommonAttentionMetadata):\n" + calls,
    })
    files = ("pkg/a.py", "pkg/d.py")
    assert _lint(tmp_path, *files)["findings"] == []
    (tmp_path / "pkg" / "e.py").write_text(head + "def go(md: CommonAttentionMetadata):\n" + calls.replace(update, ""))
    cached = _lint(tmp_path, *files)
    fresh = _lint(tmp_path, "--no-cache", *files)
    assert sorted(f["path"] for f in fresh["findings"]) == ["pkg/a.py", "pkg/d.py"]
    assert all("`go`" in f["message"] for f in fresh["findings"])
    assert cached["findings"] == fresh["findings"]


def test_a_literal_screen_with_a_common_part_answers_as_the_plain_question():
    """`AnyLiteral` first looks for the part every literal holds (`_len` of `kv_len`,
    `ctx_len`, ...); its answer must be `any(lit in data)` on every text."""
    import random

    from invariant_check.analysis.needs import AnyLiteral

    lits = [b"kv_len", b"ctx_len", b"cache_len", b"history_len"]
    screen = AnyLiteral(lits)
    assert screen._common == b"_len"
    rng = random.Random(7)
    alphabet = b"kvctxcahehistoryln_ ."
    for _ in range(3000):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert screen(data) == any(lit in data for lit in lits), data
    for data in (b"md.kv_lens += 1", b"x_len = 3", b"ctx_le", b"history_len"):
        assert screen(data) == any(lit in data for lit in lits), data
