"""No rule raises on real code (issue 22).

Every rule, through the real engine, on:
- programs generated from Python's grammar (`hypothesmith`), with the prefilter off so that
  every rule checks every definition;
- small projects built from the shapes the rules look at (`program_shapes`: loops over
  groups, `set_skip_topk`, metadata `replace(...)`, `seq_lens +=`, helpers called with calls
  as arguments, None-valued metadata), where grammar-random programs seldom go;
- files of the real vLLM releases rewritten by the mutation harnesses
  (`tests/mutation_fixtures`), one rewrite after another;
- the IC004 regression of vllm-ascend 0.29.0rc1's `spec_decode/llm_base_proposer.py`.

A rule that raises leaves an error with its code (`FileError.rule`); none may appear. The
whole release trees are linted by `test_corpus_lint.py`. Hypothesis is derandomized (the same
examples on every run, no example database), with a bounded number of examples.
"""

from __future__ import annotations

import tempfile
import textwrap
import warnings
from pathlib import Path

import draft_mutations as DM  # tests/mutation_fixtures, on pytest's pythonpath
import mutations as M
import program_shapes
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from ic_support import clean_env, corpus_dir, run_cli

from invariant_check.lint.engine import Engine
from invariant_check.api.registry import all_rules

hypothesmith = pytest.importorskip("hypothesmith")

RULES = [r for r in all_rules().values() if not r.EMITTED_BY_ENGINE]
OPTIONS = {r.CODE: r.default_options() for r in RULES}
CORPUS = corpus_dir()

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def internal_errors(result) -> list:
    return [e for e in result.errors if e.rule is not None or "internal error" in e.message]


def compiles(source: str, name: str = "m.py") -> bool:
    """Whether the running Python compiles `source` (its SyntaxWarnings silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(source, name, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return True


def lint_files(files: dict[str, str], *, prefilter: bool = True):
    """The engine's result for a throwaway project holding `files` (all of them linted)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, text in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        engine = Engine(RULES, OPTIONS, prefilter=prefilter, jobs=1, root=root, cwd=root)
        return engine.lint(sorted(root.rglob("*.py")))


def assert_no_rule_raises(files: dict[str, str], *, prefilter: bool = True) -> None:
    result = lint_files(files, prefilter=prefilter)
    failed = internal_errors(result)
    assert not failed, "\n".join(f"{e.path}:{e.line}: {e.message}" for e in failed)


# -- the regression ------------------------------------------------------------------------------

ADVANCE_FROM_A_CALL = """\
def advance(md):
    md.seq_lens += 1

def caller(self):
    advance(self.make())
"""


def test_ic004_helper_called_with_a_call_result(tmp_path):
    # vllm-ascend 0.29.0rc1: `internal error in a rule: IC004: TypeError: argument of type
    # 'NoneType' is not iterable`, exit 2, on these six lines
    (tmp_path / "m.py").write_text(ADVANCE_FROM_A_CALL)
    run = run_cli("lint", "--no-cache", "--format", "json", "m.py", cwd=tmp_path, env=clean_env())
    assert (run.code, run.err) == (0, ""), run.out + run.err
    assert '"errors": []' in run.out


def test_ic004_still_follows_the_named_callers_of_such_a_helper():
    # the caller that passes a call's result adds nothing; the one passing a metadata object
    # of a class with `max_seq_len` still makes the advance a finding
    files = {
        "pkg/__init__.py": "",
        "pkg/metadata.py": program_shapes.METADATA_MODULE,
        "pkg/drafter.py": textwrap.dedent("""\
            from .metadata import CommonAttentionMetadata


            def advance(md):
                md.seq_lens += 1


            def from_a_call(self):
                advance(self.make())


            def from_a_name(self, common: CommonAttentionMetadata):
                advance(common)
        """),
    }
    result = lint_files(files)
    assert internal_errors(result) == []
    assert [(f.rule, f.path, f.line) for f in result.findings] == [("IC004", "pkg/drafter.py", 5)]
    assert "`max_seq_len`" in result.findings[0].message


# -- programs from Python's grammar -----------------------------------------------------------------


@FUZZ
@given(source=hypothesmith.from_grammar())
def test_no_rule_raises_on_programs_from_the_grammar(source):
    if not compiles(source):
        return  # hypothesmith targets the grammar, not every rule of the compiler
    assert_no_rule_raises({"m.py": source}, prefilter=False)


@settings(FUZZ, max_examples=20)
@given(source=hypothesmith.from_node())
def test_no_rule_raises_on_programs_from_libcst_nodes(source):
    if not compiles(source):
        return
    assert_no_rule_raises({"m.py": source}, prefilter=False)


# -- programs of the shapes the rules read ----------------------------------------------------------


def test_no_rule_raises_on_projects_of_the_shapes_the_rules_read():
    seen: set[str] = set()

    @settings(FUZZ, max_examples=30)
    @given(files=program_shapes.projects(), prefilter=st.booleans())
    def check(files, prefilter):
        for rel, text in files.items():
            assert compiles(text, rel), text  # the generator's own check
        result = lint_files(files, prefilter=prefilter)
        failed = internal_errors(result)
        assert not failed, "\n".join(f"{e.path}:{e.line}: {e.message}" for e in failed)
        seen.update(f.rule for f in result.findings)

    check()
    # the examples are not only parsed: every analysis rule reports in some of them, so each
    # one's deeper code ran. Which examples a seed draws depends on hypothesis's version: a rule
    # the draw above missed is searched for (NoSuchExample fails the test).
    for code in sorted({r.CODE for r in RULES} - seen):
        found = find(
            program_shapes.projects(),
            lambda files, code=code: code in {f.rule for f in lint_files(files).findings},
            settings=settings(FUZZ, max_examples=300),
        )
        assert code in {f.rule for f in lint_files(found).findings}


# -- the real releases, rewritten by the mutation harnesses -----------------------------------------

# files of the releases that hold the shapes the rules read (the known sites and their kin)
RELEASE_FILES = [
    ("vllm-0.13.0", "vllm/v1/spec_decode/eagle.py"),
    ("vllm-0.24.0", "vllm/v1/spec_decode/llm_base_proposer.py"),
    ("vllm-0.24.0", "vllm/model_executor/models/deepseek_mtp.py"),
    ("vllm-0.25.0", "vllm/v1/spec_decode/llm_base_proposer.py"),
    ("vllm-0.33.0", "vllm/v1/worker/gpu/spec_decode/mtp/speculator.py"),
    ("vllm-0.33.0", "vllm/v1/spec_decode/llm_base_proposer.py"),
]
REWRITES = [rw for rw in M.REWRITES + DM.REWRITES if rw.name != "identity"]


@pytest.fixture(scope="module")
def release_sources(release_tree) -> list[str]:
    if not CORPUS.is_dir():
        pytest.skip(f"needs the vLLM release corpus at {CORPUS}")
    return [(release_tree(release) / rel).read_text(encoding="utf-8") for release, rel in RELEASE_FILES]


def test_no_rule_raises_on_mutated_release_sources(release_sources):
    @settings(FUZZ, max_examples=8)
    @given(index=st.integers(0, len(release_sources) - 1), steps=st.lists(st.sampled_from(REWRITES), min_size=1, max_size=2))
    def check(index, steps):
        files = {M.MAIN: release_sources[index], "context.py": M._read("context"), DM.SUPPORT: (DM.HERE / "draft_metadata.py.txt").read_text()}
        changed = False
        for rw in steps:
            try:
                out = rw.apply(dict(files))
            except Exception as exc:  # a rewrite written for the fixtures' shapes
                if type(exc).__module__.startswith("libcst"):
                    continue
                raise
            if out is not None:
                files, changed = out, True
        if not changed:
            return
        assert_no_rule_raises(files)

    check()
