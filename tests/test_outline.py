"""The outline splits a module into chunks without parsing it; parsing the chunks one by one
must give exactly the definitions (and statements) a parse of the whole file gives.

Checked on generated programs full of the things that could fool a text scan (`def` lines
inside multi-line strings, decorators with arguments over several lines, `@` as an operator on
a continuation line, classes whose body ends before module code, f-strings, a string continued
with a backslash), and on every file of a vLLM release (from the corpus beside the checkout;
skipped locally and failed in CI without it).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invariant_check.analysis import outline as O
from invariant_check.analysis.facts import definitions
from invariant_check.analysis.source import decode



def whole_defs(text: str) -> list[tuple[str, str]]:
    tree = ast.parse(text)
    return sorted(
        (q, ast.dump(n, include_attributes=True)) for q, _, n in definitions(tree.body) if not isinstance(n, ast.ClassDef)
    )


def chunk_defs(text: str) -> list[tuple[str, str]]:
    """Every function of every chunk, once each (a redefined name appears once per definition)."""
    ol = O.build(text)
    out: list[tuple[str, str]] = []
    for top in list(ol.top()):
        for chunk in [top, *ol.children(top)]:
            own, trailing = O.parse_chunk(text, chunk)
            prefix, cls = "", None
            if chunk.parent is not None:
                cls = ol.chunks[chunk.parent].name
                prefix = f"{cls}."
            for stmts, pre, owner in ((own, prefix, cls), (trailing, "", None)):
                for q, _, n in definitions(stmts, pre, owner):
                    if not isinstance(n, ast.ClassDef):
                        out.append((q, ast.dump(n, include_attributes=True)))
    return sorted(out)


def check(text: str) -> None:
    try:
        expected = whole_defs(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return  # not Python: the engine parses such a file whole and reports it
    try:
        got = chunk_defs(text)
    except O.ChunkSyntaxError:
        return  # the engine falls back to the whole file: fine, only slower
    assert got == expected


def test_functions_and_methods_with_whole_file_positions():
    text = (
        '"""Doc."""\n'
        "import os\n\n"
        "@deco(\n    arg,\n)\n"
        "def f(x):\n    return x\n\n"
        "class A(Base):\n"
        '    """Doc with\ndef not_a_function():\n    pass\n"""\n'
        "    x = 1\n\n"
        "    @property\n    def p(self):\n        return 1\n\n"
        "    def q(self):\n        s = '''\nclass NotAClass:\n'''\n        return s\n"
        "    y = 2\n\n"
        "if TYPE_CHECKING:\n    def g(): ...\n"
    )
    check(text)
    ol = O.build(text)
    names = [(c.kind, c.name) for c in ol.top()]
    assert names == [("head", None), ("def", "f"), ("class", "A")]
    a = ol.top()[2]
    assert [(c.name, c.line) for c in ol.children(a)] == [("p", 17), ("q", 21)]
    assert ol.children(a)[-1].extra_class  # `y = 2` after the method
    assert ol.top()[2].span_end == len(text)


def test_a_string_continued_with_a_backslash_is_one_chunk():
    text = "x = 'abc\\\ndef f(): pass'\ndef g():\n    pass\n"
    ol = O.build(text)
    assert ol.whole and len(ol.chunks) == 1
    check(text)


def test_matmul_continuation_is_no_decorator():
    text = "x = (a\n@ b)\ndef f():\n    return 1\n"
    ol = O.build(text)
    assert [(c.kind, c.name) for c in ol.top()] == [("head", None), ("def", "f")]
    check(text)


def test_class_name_on_a_continuation_line_is_left_to_its_neighbour():
    text = "import x\nclass \\\n    P(nn.Module):\n    def set_skip_topk(self, s):\n        pass\n"
    ol = O.build(text)
    assert [c.name for c in ol.top()] == [None]  # all in the head chunk
    check(text)


def test_chunk_keys_are_stable_for_the_same_bytes():
    text = "class A:\n    def m(self):\n        pass\n\ndef f():\n    pass\n"
    first, second = O.build(text), O.build(text)
    second.children(second.top()[0])  # split in another order
    first.children(first.top()[0])
    assert sorted(c.key for c in first.chunks) == sorted(c.key for c in second.chunks)


def test_masked_text_blanks_docstrings_not_fstrings():
    text = 'def f():\n    """for x in md:\n    pass"""\n    y = f"""{md}\n"""\n'
    masked = O.build(text).masked()
    assert len(masked) == len(text) and masked.count("\n") == text.count("\n")
    assert "for x in md" not in masked
    assert "{md}" in masked


# -- generated programs ------------------------------------------------------------------------------

PIECES = [
    "x = 1\n",
    "import os\n",
    "from . import helper as h\n",
    "def f(a,\n      b):\n    return a\n",
    "def g(\n    a,\n) -> int:\n    return a\n",
    "async def h():\n    await x\n",
    "@decorator\ndef d():\n    pass\n",
    "@decorator(\n    1,\n    2,\n)\ndef d2():\n    pass\n",
    "class C:\n    def m(self):\n        return 1\n\n    @staticmethod\n    def s():\n        pass\n    attr = 3\n",
    "class D(Base, metaclass=M):\n    '''doc'''\n    def m(self):\n        def inner():\n            pass\n        return inner\n",
    "class E:\n    class Inner:\n        def im(self): pass\n    def after(self): pass\n",
    "class F: pass\n",
    "S = '''\ndef fake():\n    pass\nclass Fake:\n'''\n",
    's = """\n@decorator\nclass Fake2:\n    def x(self): pass\n"""\n',
    'def doc():\n    """Example:\n\ndef not_real():\n    pass\n"""\n    return 1\n',
    "y = (a\n@ b)\n",
    "if cond:\n    def cf():\n        pass\nelse:\n    class CC:\n        pass\n",
    "try:\n    import fast\nexcept ImportError:\n    fast = None\n",
    "z = f'{x!r} \"\"\" not a string start'\n",
    "w = '# not a comment'  # a comment with ''' quotes\n",
    "# def commented_out():\n",
    "t = [\n    1,\n]\n",
    "class G(\n    Base,\n):\n    def gm(self):\n        x = '''\n    def not_a_method(self):\n'''\n        return x\n",
    "def tabs():\n\tif x:\n\t\treturn 1\n",
    "class H:\n\tdef tm(self):\n\t\tpass\n",
]


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12))
def test_generated_programs(pieces):
    check("".join(pieces))


@pytest.mark.slow
def test_every_file_of_a_vllm_release(vllm_release):
    checked = 0
    for folder, _, files in os.walk(vllm_release("0.33.0") / "vllm"):
        for name in files:
            if name.endswith(".py"):
                check(decode((Path(folder) / name).read_bytes()))
                checked += 1
    assert checked > 2500
