"""The derived fields learned from the code (`invariant_check.analysis.derivations`), the writes
through calls and Triton kernels (`analysis.tensor_writes`), and `invariant-check derivations`.

Each learner is run on code written here (never vLLM's), then on the learned table shipped
with the package, which must name what the releases show."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from ic_support import assert_no_traceback, run_cli

from invariant_check.analysis import derivations as D
from invariant_check.analysis.tensor_writes import ADVANCES, WRITES, kernel_writes


def learned(code: str) -> set[tuple[str, tuple[str, ...], str]]:
    return {(d.field, d.sources, d.kind) for d in D.learn(textwrap.dedent(code), "m.py")}


MEMO_CLASS = """
from dataclasses import dataclass


@dataclass
class Meta:
    seq_lens: "torch.Tensor"
    query_start_loc: "torch.Tensor"
    num_tokens: int
    _computed_cache: "torch.Tensor | None" = None
    _rows_cache: "torch.Tensor | None" = None
    _not_a_memo: "torch.Tensor | None" = None

    def computed(self):
        if self._computed_cache is None:
            q = self.query_start_loc[1:] - self.query_start_loc[:-1]
            self._computed_cache = self.seq_lens - q
        return self._computed_cache

    def rows(self, buffer):
        if self._rows_cache is not None:
            return self._rows_cache[: self.num_tokens]
        self._rows_cache = fill(self.query_start_loc, buffer)
        return self._rows_cache[: self.num_tokens]

    def refresh(self):
        # filled every time, never tested: a value, not a memo
        self._not_a_memo = self.seq_lens * 2
        return self._not_a_memo
"""


def test_a_memo_is_a_method_that_tests_fills_and_returns_a_declared_field():
    got = {(f, s) for f, s, k in learned(MEMO_CLASS) if k == "memo"}
    assert got == {("_computed_cache", ("query_start_loc", "seq_lens")), ("_rows_cache", ("num_tokens", "query_start_loc"))}


def test_a_memo_of_a_service_object_is_not_metadata():
    code = """
    class Runner:
        def __init__(self, config):
            self.config = config
            self._bufs = None

        def bufs(self):
            if self._bufs is None:
                self._bufs = make(self.config)
            return self._bufs
    """
    assert not [x for x in learned(code) if x[2] == "memo"]  # `_bufs` is no declared field


@pytest.mark.parametrize(
    "code, expected",
    [
        # a keyword computed from the value another keyword hands over
        ("Meta(seq_lens=s, max_seq_len=int(s.max()))", ("max_seq_len", ("seq_lens",))),
        # through a local bound once, and a view of a buffer
        ("d = local_lengths(self.buf.seq_lens, world, rank)\nMeta(seq_lens=self.buf.seq_lens[:n], dcp_lens=d[:n])",
         ("dcp_lens", ("seq_lens",))),
        # a copy
        ("replace(md, seq_lens=new, max_seq_len=int(new.max()))", ("max_seq_len", ("seq_lens",))),
        # a statement on the object
        ("md.max_seq_len = int(md.seq_lens.max())", ("max_seq_len", ("seq_lens",))),
    ],
)
def test_built_derivations(code, expected):
    fn = "def f(self, md, s, new, n, world, rank):\n" + textwrap.indent(code, "    ") + "\n"
    got = {(f, s) for f, s, k in learned(fn) if k == "built"}
    assert expected in got


@pytest.mark.parametrize(
    "code",
    [
        "Meta(seq_lens=buf[:num_reqs], num_reqs=num_reqs)",  # a slice chooses rows: not derived from the count
        "Meta(seq_lens=s, other=s)",  # one value under two names: an alias
        "Meta(seq_lens=s, size=len(s), buf=torch.zeros(s.shape))",  # shapes and allocations
        "kernel(seq_lens=s, out=s + 1)",  # a kernel's keywords are no object's fields
        "md.max_seq_len = md.a if flag else md.b",  # a choice between fields copies one
    ],
)
def test_not_derivations(code):
    fn = "def f(self, md, s, buf, num_reqs, flag):\n" + textwrap.indent(code, "    ") + "\n"
    assert not [x for x in learned(fn) if x[2] == "built" and x[0] in ("num_reqs", "other", "size", "buf", "out", "max_seq_len")]


def test_a_plain_class_keeping_its_lengths_derives_what_its_init_computes_from_them():
    code = """
    class DraftInputs:
        def __init__(self, positions, seq_lens):
            self.positions = positions
            self.seq_lens = seq_lens
            self.max_position = int(positions.max())
            self._req_cache = None

        def req_of_token(self):
            if self._req_cache is None:
                self._req_cache = rows_of(self.seq_lens)
            return self._req_cache
    """
    got = learned(code)
    assert ("max_position", ("positions",), "built") in got  # from the parameter it keeps as `positions`
    assert ("_req_cache", ("seq_lens",), "memo") in got  # the `__init__` declares it: a plain class's data
    # the bundled table is learned without them (vLLM's classes are dataclasses)
    raw = {(d.field, d.sources) for d in D.learn_tree(ast.parse(textwrap.dedent(code)), "m.py", project=False)}
    assert ("max_position", ("positions",)) not in raw


def test_a_cached_property_is_a_memo_and_a_host_copy_is_derived_but_a_snapshot_is_not():
    code = """
    from dataclasses import dataclass
    from functools import cached_property


    @dataclass
    class Meta:
        kv_lens: "torch.Tensor"
        block_table: "torch.Tensor"

        @cached_property
        def rows(self):
            return self.kv_lens.cumsum(0)

        @classmethod
        def make(cls, kv, bt, dev):
            return cls(kv_lens=kv, kv_lens_cpu=kv.to("cpu"), orig_kv_lens=kv.cpu(), kv_view=kv[:4],
                       kv_clone=kv.clone(), block_table=bt.to(dev), bt_host=bt.pin_memory())
    """
    got = learned(code)
    assert ("rows", ("kv_lens",), "memo") in got
    # another device: an advance does not reach it (a copy of the lengths and of their rows)
    assert ("kv_lens_cpu", ("kv_lens", "kv_view"), "built") in got
    assert ("bt_host", ("block_table",), "built") not in got  # both copies of one value: neither follows
    for name in ("orig_kv_lens", "kv_view", "kv_clone"):  # a snapshot, a view, a same-device copy
        assert not [x for x in got if x[0] == name], name


def test_fields_advanced_together_follow_each_other():
    code = """
    def step(md, n):
        md.seq_lens += 1
        md.max_seq_len = min(md.max_seq_len + 1, cap)
        if md.upper is not None:
            md.upper += 1
        md.other += 2
    """
    got = {(f, s) for f, s, k in learned(code) if k == "advanced-with"}
    assert ("max_seq_len", ("seq_lens",)) in got and ("upper", ("seq_lens",)) in got
    assert not any("other" in (f, *s) for f, s in got)  # another amount: not in step with them


def test_a_new_object_from_the_old_ones_values_advances_them_together():
    code = """
    def extend(cad, n):
        lengths = cad.seq_lens
        bound = cad.upper + n if cad.upper is not None else None
        return Meta(seq_lens=lengths + n, upper=bound, max_seq_len=cad.max_seq_len + n)
    """
    got = {(f, s) for f, s, k in learned(code) if k == "advanced-with"}
    assert {("upper", ("seq_lens",)), ("max_seq_len", ("seq_lens",))} <= got


def test_the_table_answers_by_source_and_backing_store():
    t = D.Table([D.Derivation("_x_cache", ("seq_lens",), "memo", "m.py:1", "m"), D.Derivation("max_seq_len", ("seq_lens",), "built", "m.py:2", "b")])
    assert {d.field for d in t.derived_from("seq_lens")} == {"_x_cache", "max_seq_len"}
    assert {d.field for d in t.derived_from("_seq_lens")} == {"_x_cache", "max_seq_len"}
    assert t.exact_sources() == {"seq_lens"} and t.moving_sources() == {"seq_lens"}


def test_the_learned_table_names_what_the_releases_show():
    table = D.Table(D.bundled())
    by_pair = {(d.field, s): d for d in table.all for s in d.sources}
    # each of these is read from the releases' code, with the line that shows it
    for field, source, kind in [
        ("_token_to_req_indices_cache", "query_start_loc", "memo"),
        ("_token_to_req_indices_cache", "num_actual_tokens", "memo"),
        ("_num_computed_tokens_cache", "seq_lens", "memo"),
        ("_seq_lens_cpu", "seq_lens", "memo"),
        ("max_seq_len", "seq_lens", None),
        ("seq_lens_cpu_upper_bound", "seq_lens", None),
        ("dcp_local_seq_lens", "seq_lens", None),
        ("seq_lens_sum", "seq_lens", None),  # SGLang's
    ]:
        d = by_pair.get((field, source))
        assert d is not None, (field, source)
        assert kind is None or d.kind == kind, (field, source, d.kind)
        assert ":" in d.where and d.how


def test_the_learned_table_is_what_the_generator_writes():
    raw = json.loads(D.BUNDLED.read_text(encoding="utf-8"))
    assert any(g.startswith("vllm ") for g in raw["generated-from"])
    assert all(set(d) >= {"field", "sources", "kind", "where", "how", "engine"} for d in raw["derivations"])
    assert not [d for d in raw["derivations"] if "/test/" in d["where"] or "/tests/" in d["where"]]


# -- writes through calls and kernels ----------------------------------------------------------------


def _kernel(src: str) -> ast.FunctionDef:
    return ast.parse(textwrap.dedent(src)).body[0]


def test_a_kernel_advances_the_pointer_it_stores_its_own_load_plus_one_to():
    k = _kernel("""
    @triton.jit
    def step(pos_ptr, lens_ptr, out_ptr, batch_size, MAX: tl.constexpr):
        i = tl.program_id(0)
        n = tl.load(lens_ptr + i)
        new = tl.where(n + 1 > MAX, 1, n + 1)
        tl.store(lens_ptr + i, tl.minimum(new, MAX))
        tl.store(out_ptr + i + batch_size, tl.load(pos_ptr + i))
    """)
    assert kernel_writes(k, "lens_ptr") == ADVANCES
    assert kernel_writes(k, "out_ptr") == WRITES
    assert kernel_writes(k, "pos_ptr") is None
    assert kernel_writes(k, "batch_size") is None  # an offset, not the pointer stored through


KERNEL_PROJECT = {
    "pkg/__init__.py": "",
    "pkg/kernels.py": """
import triton
import triton.language as tl


@triton.jit
def bump_kernel(lens_ptr, n):
    i = tl.program_id(0)
    tl.store(lens_ptr + i, tl.load(lens_ptr + i) + 1)


def dispatcher(kernel):
    def wrap(fn):
        return fn
    return wrap


@dispatcher(kernel=bump_kernel)
def _bump(lens, n):
    ...


def bump(lens, n):
    _bump(lens, n)
""",
    "pkg/meta.py": """
from dataclasses import dataclass


@dataclass
class Meta:
    seq_lens: "torch.Tensor"
    max_seq_len: int
    seq_lens_cpu_upper_bound: "torch.Tensor | None" = None
""",
    "pkg/drafter.py": """
from .kernels import bump
from .meta import Meta


def draft(self, md: Meta, n):
    for _ in range(self.k):
        bump(md.seq_lens, n)
        md.max_seq_len += 1
        self.run_model(md)
""",
}


def test_an_advance_through_a_wrapper_and_a_dispatcher_of_a_kernel_is_reported(tmp_path):
    for rel, text in KERNEL_PROJECT.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text.lstrip("\n"))
    run = run_cli("lint", "--no-cache", "--format", "json", "--select", "IC004", ".", cwd=tmp_path)
    assert_no_traceback(run)
    got = json.loads(run.out)["findings"]
    assert [(f["path"], f["line"]) for f in got] == [("pkg/drafter.py", 7)]
    assert "`bump(...)` advances `md.seq_lens` in place" in got[0]["message"]
    assert got[0]["data"]["stale_fields"] == ["seq_lens_cpu_upper_bound"]
    # the same step with the bound brought along is clean
    fixed = KERNEL_PROJECT["pkg/drafter.py"].replace(
        "        md.max_seq_len += 1\n", "        md.max_seq_len += 1\n        md.seq_lens_cpu_upper_bound = None\n"
    )
    (tmp_path / "pkg/drafter.py").write_text(fixed.lstrip("\n"))
    run = run_cli("lint", "--no-cache", "--format", "json", "--select", "IC004", ".", cwd=tmp_path)
    assert json.loads(run.out)["findings"] == []


def test_a_call_that_only_reads_the_lengths_is_no_advance(tmp_path):
    files = dict(KERNEL_PROJECT)
    files["pkg/kernels.py"] = files["pkg/kernels.py"].replace("tl.store(lens_ptr + i, tl.load(lens_ptr + i) + 1)", "x = tl.load(lens_ptr + i)")
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text.lstrip("\n"))
    run = run_cli("lint", "--no-cache", "--format", "json", "--select", "IC004", ".", cwd=tmp_path)
    assert json.loads(run.out)["findings"] == []


# -- the command -------------------------------------------------------------------------------------


def test_the_command_prints_a_class_derived_fields_with_their_evidence(tmp_path):
    (tmp_path / "meta.py").write_text(textwrap.dedent(MEMO_CLASS))
    run = run_cli("derivations", "--class", "Meta", str(tmp_path / "meta.py"), cwd=tmp_path)
    assert run.code == 0, run.err
    assert "_computed_cache" in run.out and "query_start_loc, seq_lens  [memo]" in run.out
    assert f"{tmp_path / 'meta.py'}:" in run.out  # the line that shows it
    assert "_not_a_memo      <- seq_lens  [built]" in run.out  # a value computed from it, not a memo
    run = run_cli("derivations", "--class", "Meta", "--format", "json", str(tmp_path / "meta.py"), cwd=tmp_path)
    rows = json.loads(run.out)
    assert {r["field"] for r in rows if r["kind"] == "memo"} == {"_computed_cache", "_rows_cache"}


def test_the_command_without_paths_prints_the_learned_table(tmp_path):
    run = run_cli("derivations", "--format", "json", cwd=tmp_path)
    assert run.code == 0, run.err
    rows = json.loads(run.out)
    assert any(r["field"] == "_token_to_req_indices_cache" and r["kind"] == "memo" for r in rows)


def test_the_command_names_a_missing_input_in_one_line(tmp_path):
    run = run_cli("derivations", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert run.code == 2
    assert_no_traceback(run)
    assert "nope.py" in run.err and len(run.err.strip().splitlines()) == 1


# -- the family's classes -----------------------------------------------------------------------------

NOT_METADATA = """
from dataclasses import dataclass


@dataclass
class ToolCall:
    name: str
    arguments: str
    index: int


def parse(raw):
    return ToolCall(name=raw.name, arguments=render(raw.name), index=raw.index)


def parse_stream(chunk):
    return ToolCall(name=chunk.name, arguments=render(chunk.name), index=chunk.index)


def next_call(call: ToolCall):
    call.index += 1
    call.name = call.name + "_next"
    return call
"""


def test_a_class_without_a_token_layout_derives_nothing_for_the_rule(tmp_path):
    # two constructors compute `arguments` from `name`: as strong as the evidence for
    # `max_seq_len`, but a tool call holds no lengths, offsets or positions a draft step moves
    (tmp_path / "calls.py").write_text(NOT_METADATA.lstrip("\n"))
    run = run_cli("lint", "--no-cache", "--format", "json", "--select", "IC004", ".", cwd=tmp_path)
    assert_no_traceback(run)
    assert json.loads(run.out)["findings"] == []
    run = run_cli("derivations", "--class", "ToolCall", str(tmp_path / "calls.py"), cwd=tmp_path)
    assert run.code == 0, run.err
    assert "not a metadata class" in run.err and "no derived fields known for ToolCall" in run.out
    # the same shape in a class that holds sequence lengths is the family's
    layout = NOT_METADATA.replace("    index: int\n", "    index: int\n    seq_lens: list\n").replace(
        "call.name = call.name + \"_next\"", "call.seq_lens += 1").replace(
        "arguments=render(raw.name)", "arguments=render(raw.seq_lens, raw.name), seq_lens=raw.seq_lens").replace(
        "arguments=render(chunk.name)", "arguments=render(chunk.seq_lens, chunk.name), seq_lens=chunk.seq_lens")
    (tmp_path / "calls.py").write_text(layout.lstrip("\n"))
    run = run_cli("lint", "--no-cache", "--format", "json", "--select", "IC004", ".", cwd=tmp_path)
    found = json.loads(run.out)["findings"]
    assert [(f["line"], f["data"]["stale_fields"]) for f in found] == [(22, ["arguments"])], run.out


def test_the_literal_screen_answers_as_the_plain_question():
    from invariant_check.analysis.needs import AnyLiteral

    lits = [b"seq_lens", b"_seq_lens", b"seq_lens_cpu", b"query_start_loc", b"positions", b""[:0] or b"pos"]
    screen = AnyLiteral(lits)
    for data in (b"x.seq_lens_cpu", b"self._seq_lens", b"query_start_lo", b"nothing here", b"posit", b""):
        assert screen(data) == any(lit in data for lit in lits), data
