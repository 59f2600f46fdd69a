"""`ClassInfo.mro()` is Python's method resolution order (C3 linearization), built from the
bases the project model resolves (project, environment, bundled models); where Python would
raise `TypeError` (or a cycle the source spells), it is the depth-first order, never an error.

The property test builds random hierarchies twice: as source the analysis reads, and as real
classes (`type(...)`), and compares the analysis's order with `__mro__`.
"""

from __future__ import annotations

import tempfile
import textwrap
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from invariant_check.analysis.environment import Environment
from invariant_check.analysis.linearize import c3_merge
from invariant_check.analysis.project import Project
from invariant_check.api.registry import all_rules
from invariant_check.lint.engine import Engine


def make(root: Path, files: dict[str, str], environment: Environment | None = None) -> Project:
    for name, code in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code).lstrip("\n"))
    kwargs = {"environment": environment} if environment is not None else {}
    return Project(root, listing=lambda: sorted(root.rglob("*.py")), **kwargs)


def order(project: Project, root: Path, module: str, cls: str) -> list[str]:
    mod = project.module_at(root / module)
    info = project.class_of(project.resolve(mod, cls))
    assert info is not None, cls
    return [s.name for s in info.mro()]


# -- the merge --------------------------------------------------------------------------------------


def test_merge_takes_the_first_head_in_no_tail():
    # class A(B, C); B(D); C(D): A B C D (depth first would be A B D C)
    assert c3_merge([["B", "D"], ["C", "D"], ["B", "C"]]) == ["B", "C", "D"]


def test_merge_has_no_answer_where_python_raises():
    # class X(D, B) with B(D): D must come after B and before it
    assert c3_merge([["D"], ["B", "D"], ["D", "B"]]) is None
    assert c3_merge([["B"], ["B"], ["B", "B"]]) is None  # class X(B, B)


# -- hierarchies the rules meet ---------------------------------------------------------------------


def test_a_diamond_puts_the_mixin_before_the_shared_base(tmp_path):
    project = make(tmp_path, {"m.py": """
        class Base: pass
        class Left(Base): pass
        class Right(Base): pass
        class A(Left, Right): pass
    """})
    assert order(project, tmp_path, "m.py", "A") == ["m.A", "m.Left", "m.Right", "m.Base"]


def test_unresolved_bases_are_leaves_in_python_order(tmp_path):
    project = make(tmp_path, {"m.py": """
        import torch.nn as nn

        class B(object): pass
        class C(nn.Module): pass
        class D(Unbound): pass
        class A(B, C, D): pass
    """})
    assert order(project, tmp_path, "m.py", "A") == [
        "m.A", "m.B", "m.C", "torch.nn.Module", "m.D", "Unbound", "builtins.object"
    ]


def test_an_external_base_named_on_both_sides_is_one_class(tmp_path):
    project = make(tmp_path, {"m.py": """
        import torch.nn as nn
        from torch import nn as tnn

        class Left(nn.Module): pass
        class Right(tnn.Module): pass
        class A(Left, Right): pass
    """})
    assert order(project, tmp_path, "m.py", "A") == ["m.A", "m.Left", "m.Right", "torch.nn.Module"]


def test_same_named_classes_of_two_modules_are_two_classes(tmp_path):
    project = make(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "class Base: pass\n",
        "pkg/b.py": "class Base: pass\n",
        "pkg/m.py": """
            from . import a, b

            class Left(a.Base): pass
            class Right(b.Base): pass
            class A(Left, Right): pass
        """,
    })
    assert order(project, tmp_path, "pkg/m.py", "A") == [
        "pkg.m.A", "pkg.m.Left", "pkg.a.Base", "pkg.m.Right", "pkg.b.Base"
    ]


def test_an_aliased_base_is_the_class_it_names(tmp_path):
    project = make(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/base.py": "class Base: pass\n",
        "pkg/compat.py": "from .base import Base as _B\n\nModelBase = _B\n",
        "pkg/m.py": """
            from .base import Base
            from .compat import ModelBase

            class Left(Base): pass
            class Right(ModelBase): pass
            class A(Left, Right): pass
        """,
    })
    assert order(project, tmp_path, "pkg/m.py", "A") == ["pkg.m.A", "pkg.m.Left", "pkg.m.Right", "pkg.base.Base"]


def test_an_inconsistent_hierarchy_falls_back_to_depth_first(tmp_path):
    project = make(tmp_path, {"m.py": """
        class Base: pass
        class Left(Base): pass
        class A(Base, Left): pass
        class Twice(Base, Base): pass
    """})
    assert order(project, tmp_path, "m.py", "A") == ["m.A", "m.Base", "m.Left"]
    assert order(project, tmp_path, "m.py", "Twice") == ["m.Twice", "m.Base"]


def test_a_cycle_in_the_source_falls_back_to_depth_first(tmp_path):
    project = make(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import B\n\nclass A(B): pass\n",
        "pkg/b.py": "from .a import A\n\nclass B(A): pass\n",
        "pkg/c.py": "from .a import A\n\nclass C(A): pass\n",
    })
    assert order(project, tmp_path, "pkg/a.py", "A") == ["pkg.a.A", "pkg.b.B"]
    assert order(project, tmp_path, "pkg/c.py", "C") == ["pkg.c.C", "pkg.a.A", "pkg.b.B"]


def test_a_hierarchy_deeper_than_the_walks_go_does_not_fail(tmp_path):
    body = "class C0: pass\n" + "".join(f"class C{i}(C{i - 1}): pass\n" for i in range(1, 400))
    project = make(tmp_path, {"m.py": body})
    got = order(project, tmp_path, "m.py", "C399")
    assert got[:3] == ["m.C399", "m.C398", "m.C397"]  # depth first, cut where the walks stop


def test_bundled_models_take_part_in_the_linearization(tmp_path):
    """vLLM's `EagleProposer(SpecDecodeBaseProposer)` from the bundled models, beside a
    project mixin on the same base: the mixin's `Left` comes before vLLM's shared base."""
    project = make(tmp_path, {"m.py": """
        from vllm.v1.spec_decode.eagle import EagleProposer
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

        class Left(SpecDecodeBaseProposer): pass
        class Mine(Left, EagleProposer): pass
    """}, environment=Environment.models_only())
    got = order(project, tmp_path, "m.py", "Mine")
    assert got == [
        "m.Mine", "m.Left", "vllm.v1.spec_decode.eagle.EagleProposer",
        "vllm.v1.spec_decode.llm_base_proposer.SpecDecodeBaseProposer",
    ]


def test_environment_classes_take_part_in_the_linearization(tmp_path):
    site = tmp_path / "site"
    make(site, {"extlib/__init__.py": "", "extlib/base.py": """
        class Base: pass
        class Right(Base): pass
    """})
    project = make(tmp_path / "proj", {"m.py": """
        from extlib.base import Base, Right

        class Left(Base): pass
        class A(Left, Right): pass
    """}, environment=Environment(paths=(site,)))
    assert order(project, tmp_path / "proj", "m.py", "A") == [
        "m.A", "m.Left", "extlib.base.Right", "extlib.base.Base"
    ]


# -- what the rules decide ------------------------------------------------------------------------


def _ic003_lines(root: Path) -> list[tuple[str, int]]:
    rule = all_rules()["IC003"]
    engine = Engine([rule], {rule.CODE: rule.default_options()}, jobs=1, root=root, cwd=root)
    result = engine.lint(sorted(root.rglob("*.py")))
    assert not result.errors, result.errors
    return sorted((f.path, f.line) for f in result.findings)


def test_super_runs_the_mixins_switch_before_the_shared_bases(tmp_path):
    """`Left.set_skip_topk` calls `super()`: on a `Predictor(Left, Right)` that is `Right`'s
    (which hands the flag to the layers' indexers, so a shared buffer is reused), not
    `Base`'s (which only sets a flag its own `forward` tests). So `Predictor` needs the
    compaction; a depth-first order would take the switch for a sampler's flag."""
    make(tmp_path, {"m.py": """
        import torch.nn as nn

        class Base(nn.Module):
            def set_skip_topk(self, skip):
                self.skip = skip

            def forward(self, x):
                if self.skip:
                    return x
                return x + 1

        class Left(Base):
            def set_skip_topk(self, skip):
                self.left_skip = skip
                super().set_skip_topk(skip)

            def forward(self, x):
                if self.left_skip:
                    return x
                return super().forward(x)

        class Right(Base):
            def set_skip_topk(self, skip):
                for layer in self.layers:
                    layer.indexer.skip_topk = skip

        class Predictor(Left, Right):
            def set_skip_topk(self, skip):
                super().set_skip_topk(skip)
    """})
    # `Right` in any order; `Predictor` because `super()` in `Left` is `Right` on it
    assert _ic003_lines(tmp_path) == [("m.py", 22), ("m.py", 27)]


# -- the property: the order of `__mro__` ---------------------------------------------------------


@st.composite
def hierarchies(draw):
    """Classes C0..Cn-1, each with an ordered list of distinct earlier classes as bases
    (orders Python rejects included), each base spelled by its name or through an alias."""
    n = draw(st.integers(2, 8))
    classes = []
    for i in range(n):
        bases = draw(st.lists(st.integers(0, i - 1), min_size=min(i, 1), max_size=2, unique=True)) if i else []
        aliased = [draw(st.booleans()) for _ in bases]
        classes.append(list(zip(bases, aliased)))
    return classes


def _source(classes) -> str:
    lines = []
    for i, bases in enumerate(classes):
        spelled = ", ".join(f"Alias{b}" if alias else f"C{b}" for b, alias in bases)
        lines.append(f"class C{i}({spelled}):\n    pass\n")
        lines.append(f"Alias{i} = C{i}\n")
    return "".join(lines)


def _depth_first(classes, i) -> list[int]:
    out: list[int] = []

    def walk(j):
        if j in out:
            return
        out.append(j)
        for b, _ in classes[j]:
            walk(b)

    walk(i)
    return out


@settings(max_examples=150, derandomize=True, database=None, deadline=None)
@given(classes=hierarchies())
@example(classes=[[], [(0, False)], [(0, True)], [(1, False), (2, False)]])  # a diamond
@example(classes=[[], [(0, False)], [(0, False), (1, False)]])  # TypeError
def test_the_order_is_pythons_mro(classes):
    """About a third of the generated classes are ones Python rejects; a few dozen are
    orders where C3 and depth first differ."""
    real: list[type | None] = []
    for bases in classes:
        try:
            parents = tuple(real[b] for b, _ in bases)
            if any(p is None for p in parents):
                raise TypeError("a base Python rejected")
            real.append(type(f"C{len(real)}", parents, {}))
        except TypeError:
            real.append(None)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = make(root, {"m.py": _source(classes)})
        for i, cls in enumerate(real):
            got = order(project, root, "m.py", f"C{i}")
            if cls is not None:
                assert got == [f"m.{c.__name__}" for c in cls.__mro__ if c is not object]
            else:
                assert got == [f"m.C{j}" for j in _depth_first(classes, i)]
