"""The prefilter is derived from what each rule declares it needs; it must never change a
finding. Property: on generated projects (several modules, helpers across files, classes with
bases elsewhere), the findings with the prefilter equal those with every definition parsed.

Plus the three shapes the hand-written prefilters of earlier versions dropped (issue 8).
"""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invariant_check.lint.engine import Engine
from invariant_check.api.registry import all_rules

RULES = [r for r in all_rules().values() if not r.EMITTED_BY_ENGINE]
OPTIONS = {r.CODE: r.default_options() for r in RULES}


def lint(root: Path, *, prefilter: bool) -> list[tuple]:
    files = sorted(root.rglob("*.py"))
    result = Engine(RULES, OPTIONS, prefilter=prefilter, jobs=1, root=root, cwd=root).lint(files)
    return sorted((f.path, f.line, f.column, f.rule, f.message) for f in result.findings) + sorted(
        (e.path, e.line or 0, e.message) for e in result.errors
    )


def write(root: Path, files: dict[str, str]) -> None:
    for name, code in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code).lstrip("\n"))


# -- the shapes earlier prefilters dropped --------------------------------------------------------


def test_switch_with_a_keyword_argument(tmp_path):
    write(tmp_path, {"m.py": """
        def propose(self, idx):
            hidden = self.model(**self.inputs)
            self.model.model.set_skip_topk(skip=True)
            hidden = self.model(**self.inputs)
    """})
    found = lint(tmp_path, prefilter=True)
    assert [(p, line, rule) for p, line, _, rule, _ in found] == [("m.py", 3, "IC002")]
    assert found == lint(tmp_path, prefilter=False)


def test_metadata_bound_by_with_inside_the_group_loop(tmp_path):
    write(tmp_path, {"m.py": """
        def build(self, groups):
            for g in groups:
                with g.build() as attn_metadata:
                    self.stage(attn_metadata)
            assert isinstance(attn_metadata, FlashAttentionMetadata)
    """})
    found = lint(tmp_path, prefilter=True)
    assert [(p, line, rule) for p, line, _, rule, _ in found] == [("m.py", 5, "IC001")]
    assert found == lint(tmp_path, prefilter=False)


def test_switch_bound_as_a_class_attribute(tmp_path):
    write(tmp_path, {"m.py": """
        def _shared_impl(self, skip):
            self.skip = skip

        class Predictor(nn.Module):
            set_skip_topk = _shared_impl
    """})
    found = lint(tmp_path, prefilter=True)
    assert [(p, line, rule) for p, line, _, rule, _ in found] == [("m.py", 4, "IC003")]
    assert found == lint(tmp_path, prefilter=False)


def test_one_entry_of_a_call_bound_to_a_metadata_name(tmp_path):
    """The pick's collection names no metadata and the check names no type: the finding is
    relevant by the local name the entry is bound to. The prefilter reads the file as the
    query does, with or without a finding: a unit test of a plugin (issue 22,
    `md, *_ = proposer.prepare_inputs_padded(...)` then `assert md.seq_lens_cpu is None`)
    takes the first field of the tuple a function returns, not an entry of several, and is
    not reported either way."""
    write(tmp_path, {"m.py": """
        def test_prepared(proposer, cad):
            spec_attn_metadata, *_ = proposer.prepare_inputs(cad)
            assert spec_attn_metadata.seq_lens_cpu is None

        def first_group(self, cad):
            attn_metadata = next(iter(self.build_all(cad).values()))
            if attn_metadata.seq_lens is None:
                raise ValueError("no lengths")
            return self.run_model(self.build_all(cad))
    """})
    found = lint(tmp_path, prefilter=True)
    assert [(p, line, rule) for p, line, _, rule, _ in found] == [("m.py", 7, "IC001")]
    assert found == lint(tmp_path, prefilter=False)


# -- generated projects ---------------------------------------------------------------------------

NAMES = st.sampled_from(["attn_metadata", "md", "group_md", "AttnMetaData", "state", "built", "plan", "x"])
TYPES = st.sampled_from(["FlashAttentionMetadata", "self.allowed_attn_types", "Plan", "int"])
RECEIVERS = st.sampled_from(["self.model.model", "self.model", "draft", "self.net"])


@st.composite
def loop_then_check(draw) -> str:
    name = draw(NAMES)
    binder = draw(st.sampled_from([
        f"{name} = g.build()",
        f"{name}, extra = g.build()",
        f"with g.build() as {name}:\n            pass",
        f"if ({name} := g.build()) is None:\n            continue",
        f"{name} = merge({name}, g.build())",
    ]))
    loop = draw(st.sampled_from(["for g in groups:", "for i, g in enumerate(groups):", "while groups:", "for g in [one]:"]))
    brk = draw(st.sampled_from(["", "\n        if g.ready:\n            break"]))
    check = draw(st.sampled_from([
        f"assert isinstance({name}, {draw(TYPES)})",
        f"if not isinstance({name}, {draw(TYPES)}):\n        raise ValueError('x')",
        f"if isinstance({name}, {draw(TYPES)}):\n        return 1",
        f"ok = isinstance({name}, {draw(TYPES)})\n    assert ok",
        f"validate({name})",
        f"assert {name}.num_tokens > 0",
        f"log({name})",
    ]))
    prelude = draw(st.sampled_from(["", "assert len(groups) == 1\n    ", "if len(groups) != 1:\n        raise ValueError()\n    "]))
    return f"def f{draw(st.integers(0, 99))}(self, groups, one):\n    {prelude}{loop}\n        {binder}{brk}\n    {check}\n"


@st.composite
def one_entry(draw) -> str:
    coll = draw(st.sampled_from(["per_layer_attn_metadata", "metadata", "mds", "things"]))
    pick = draw(st.sampled_from([
        f"{coll}[names[-1]]", f"list({coll}.values())[-1]", f"next(iter({coll}.values()))",
        f"next(reversed({coll}))", f"{coll}[0]", f"list({coll}.values())[0]", f"{coll}[names[0]]",
        f"{coll}.popitem()[1]", f"{coll}.pop()", "next(iter(self.build_all(names).values()))",
    ]))
    local = draw(NAMES)
    use = draw(st.sampled_from([
        f"assert isinstance({pick}, {draw(TYPES)})",
        f"first = {pick}\n    assert isinstance(first, {draw(TYPES)})",
        f"assert {pick} is not None",
        f"if isinstance(first := {pick}, {draw(TYPES)}):\n        return first",
        f"*_, first = {coll}.values()\n    assert isinstance(first, {draw(TYPES)})",
        f"_, first = {coll}.popitem()\n    assert isinstance(first, {draw(TYPES)})",
        # the entry bound to a local name and checked any way: relevant by that name alone
        f"{local} = {pick}\n    assert {local}.seq_lens is not None",
        f"{local}, *_ = {draw(st.sampled_from([coll, f'{coll}.values()', 'self.build_all(names)']))}\n    assert {local}.seq_lens is not None",
        f"*_, {local} = self.build_all(names).values()\n    if {local} is None:\n        raise ValueError('x')",
    ]))
    # what follows the check decides whether the other entries are used after it
    tail = draw(st.sampled_from(["", f"\n    return {coll}", "\n    return first.seq_lens", f"\n    for md in {coll}.values():\n        assert isinstance(md, int)"]))
    built = draw(st.sampled_from(["", f"{coll} = [g.build() for g in names]\n    "]))
    return f"def g{draw(st.integers(0, 99))}(self, names, {coll}):\n    {built}{use}{tail}\n"


@st.composite
def switch_and_compaction(draw) -> str:
    recv = draw(RECEIVERS)
    on = draw(st.sampled_from(["True", "skip=True", "flag"]))
    comp = draw(st.sampled_from([
        f"{recv}.compact_topk_indices(idx)", "compact_rows(self, idx)", "self._compact(idx)", "pass",
        f"if self.deep:\n        {recv}.compact_topk_indices(idx)",
    ]))
    order = draw(st.sampled_from(["before", "after", "late"]))
    lines = ["hidden = self.model(**self.inputs)"]
    if order == "before":
        lines += [comp, f"{recv}.set_skip_topk({on})"]
    elif order == "after":
        lines += [f"{recv}.set_skip_topk({on})", comp]
    else:
        lines += [f"{recv}.set_skip_topk({on})", "hidden = self.model(**self.inputs)", comp]
    lines.append("for _ in range(self.n):\n        hidden = self.model(**self.inputs)")
    wrap = draw(st.booleans())
    body = "\n    ".join(lines)
    if wrap:
        body = "if self.share:\n        " + "\n        ".join(body.split("\n    "))
    return (
        f"class P{draw(st.integers(0, 99))}(Base):\n"
        f"    def propose(self, idx):\n        " + "\n        ".join(body.split("\n    ")) + "\n\n"
        "    def _compact(self, idx):\n        self.model.model.compact_topk_indices(idx)\n"
    )


@st.composite
def model_class(draw) -> str:
    base = draw(st.sampled_from(["nn.Module", "CompactingBase", "PlainBase", "Unknown"]))
    members = draw(st.sampled_from([
        "def set_skip_topk(self, s):\n        self.s = s",
        "set_skip_topk = _shared",
        "def set_skip_topk(self, s):\n        pass\n    def compact_topk_indices(self, ids):\n        pass",
        "def forward(self, x):\n        return x",
    ]))
    return f"class M{draw(st.integers(0, 99))}({base}):\n    {members}\n"


SUPPORT = {
    "helpers.py": """
        def compact_rows(proposer, idx):
            proposer.model.model.compact_topk_indices(idx)

        def validate(md):
            if not isinstance(md, FlashAttentionMetadata):
                raise ValueError("unsupported")

        def log(md):
            print(md)

        def merge(a, b):
            return b
    """,
    "bases.py": """
        import torch.nn as nn

        class CompactingBase(nn.Module):
            def compact_topk_indices(self, ids):
                pass

        class PlainBase(nn.Module):
            pass

        def _shared(self, s):
            self.s = s
    """,
}
HEADER = "import torch.nn as nn\nfrom .helpers import compact_rows, validate, log, merge\nfrom .bases import CompactingBase, PlainBase, _shared\n\n"


@st.composite
def project(draw) -> dict[str, str]:
    files = dict(SUPPORT)
    files["__init__.py"] = ""
    for i in range(draw(st.integers(1, 3))):
        parts = draw(st.lists(st.one_of(loop_then_check(), one_entry(), switch_and_compaction(), model_class()), min_size=1, max_size=4))
        doc = draw(st.sampled_from(["", '"""Drafts.\n\nfor md in groups: not code.\n"""\n']))
        files[f"mod{i}.py"] = doc + HEADER + "\n\n".join(parts)
    return files


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(project())
def test_generated_projects_same_findings_with_and_without_prefilter(files):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        root.mkdir()
        for name, code in files.items():
            (root / name).write_text(textwrap.dedent(code).lstrip("\n") if name in SUPPORT else code)
        assert lint(root, prefilter=True) == lint(root, prefilter=False)


# -- with modules outside the project (extra-paths and the bundled models) ------------------------

OUTSIDE = {
    "draft_helpers.py": """
        import copy

        def shallow(md):
            return copy.copy(md)

        def bump_bounds(md, n, cap):
            md.max_seq_len = min(md.max_seq_len + n, cap)
            md.seq_lens_cpu_upper_bound = None
            md._seq_lens_cpu = None

        def advance_inputs(buffers, n):
            buffers.positions[:n] += 1
    """,
}
DRAFT_HEADER = (
    "import copy\nimport functools\n"
    "from vllm.v1.attention.backends.utils import CommonAttentionMetadata\n"
    "from draft_helpers import shallow, bump_bounds, advance_inputs\n\n"
)


@st.composite
def draft_step(draw) -> str:
    """An IC004/IC005-shaped function over vLLM's metadata class (a bundled model) and helpers
    of an outside module."""
    take = draw(st.sampled_from(["md = common_attn_metadata", "md = copy.copy(common_attn_metadata)",
                                 "md = shallow(common_attn_metadata)", "md = common_attn_metadata.replace(max_query_len=1)"]))
    advance = draw(st.sampled_from(["md.seq_lens += 1", "md.seq_lens[:n] += 1", "md.seq_lens = common_attn_metadata.seq_lens + 1",
                                    "md.seq_lens.add_(1)", "positions = positions + 1", "advance_inputs(self.input_buffers, n)"]))
    update = draw(st.sampled_from(["", "bump_bounds(md, 1, self.max_model_len)", "md.max_seq_len += 1",
                                   "md = self.builder.build(md)"]))
    use = draw(st.sampled_from(["self.run_model(n, md)", "run()", "self.builder.build_for_drafting(md, 1)"]))
    order = draw(st.booleans())
    body = [advance, update, use] if order else [advance, use, update]
    lines = "\n        ".join(x for x in body if x)
    return (
        f"def step{draw(st.integers(0, 99))}(self, common_attn_metadata: CommonAttentionMetadata, n, positions):\n"
        f"    {take}\n    run = functools.partial(self.run_model, n, md)\n"
        f"    for _ in range(self.num_steps):\n        {lines}\n"
    )


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(draft_step(), min_size=1, max_size=4))
def test_outside_modules_same_findings_with_and_without_prefilter(parts):
    from invariant_check.analysis.environment import Environment

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "plugin"
        outside = Path(tmp) / "outside"
        write(outside, OUTSIDE)
        write(root, {"__init__.py": "", "drafts.py": DRAFT_HEADER + "\n\n".join(parts)})
        env = Environment(extra=(outside,))
        found = []
        for prefilter in (True, False):
            files = sorted(root.rglob("*.py"))
            result = Engine(RULES, OPTIONS, prefilter=prefilter, jobs=1, root=root, cwd=root, environment=env).lint(files)
            found.append(sorted((f.path, f.line, f.rule, f.message) for f in result.findings) + [e.message for e in result.errors])
        assert found[0] == found[1]
        assert not any(isinstance(x, str) for x in found[0]), found[0]


# -- the statements a need reads --------------------------------------------------------------------


def test_statement_starts_never_cut_a_logical_line():
    """`statement_starts` (what `PickedInto` reads a binding's statement by) splits only where
    Python's tokenizer ends a logical line or between blank and comment lines: never inside
    a statement, whatever strings, comments, brackets and continuations it holds. Checked on
    this project's own sources (docstrings, regexes, f-strings)."""
    import io
    import tokenize

    from invariant_check.analysis.values import statement_starts

    root = Path(__file__).resolve().parent.parent / "invariant_check" / "analysis"
    checked = 0
    for path in sorted(root.glob("*.py")):
        text = path.read_text()
        offsets = [0]
        for line in text.splitlines(keepends=True):
            offsets.append(offsets[-1] + len(line))
        inside: list[tuple[int, int]] = []  # (first token, end) of each logical line
        first = None
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            at = offsets[tok.start[0] - 1] + tok.start[1]
            if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
                continue
            if tok.type == tokenize.NEWLINE or tok.string == ";":
                if first is not None:
                    inside.append((first, offsets[tok.end[0] - 1] + tok.end[1]))
                first = None
            elif first is None:
                first = at
        starts = statement_starts(text, 0, len(text))
        for s in starts:
            assert not any(a < s < b for a, b in inside), (path.name, text[max(0, s - 40) : s + 40])
        checked += len(starts)
    assert checked > 1000
