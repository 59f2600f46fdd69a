"""The project model: names resolved through imports (not by their short spelling), classes
with their bases and members, instance attributes, transitive summaries across modules."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from invariant_check.analysis.project import Project
from invariant_check.analysis.summaries import Summaries


def make(tmp_path: Path, files: dict[str, str]) -> Project:
    for name, code in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code).lstrip("\n"))
    return Project(tmp_path, listing=lambda: sorted(tmp_path.rglob("*.py")))


VLLM_LIKE = {
    "vllm/__init__.py": "",
    "vllm/models/__init__.py": "",
    "vllm/models/amd/__init__.py": "",
    "vllm/models/amd/mtp.py": """
        class MTPBase:
            def set_skip_topk(self, skip):
                self.skip = skip
    """,
    "vllm/models/nvidia/__init__.py": "",
    "vllm/models/nvidia/mtp.py": """
        class MTPBase:
            def set_skip_topk(self, skip):
                self.skip = skip

            def compact_topk_indices(self, ids):
                pass
    """,
    "vllm/models/user.py": """
        from vllm.models.amd.mtp import MTPBase as AmdBase
        from .nvidia import mtp as nv

        class OnAmd(AmdBase):
            pass

        class OnNvidia(nv.MTPBase):
            pass
    """,
}


def test_same_named_classes_are_told_apart_by_the_import(tmp_path):
    project = make(tmp_path, VLLM_LIKE)
    user = project.module_at(tmp_path / "vllm/models/user.py")
    amd = project.class_of(project.resolve(user, "OnAmd")).classes()[1]
    nvidia = project.class_of(project.resolve(user, "OnNvidia")).classes()[1]
    assert amd.name == "vllm.models.amd.mtp.MTPBase"
    assert nvidia.name == "vllm.models.nvidia.mtp.MTPBase"
    assert not project.class_of(project.resolve(user, "OnAmd")).lookup("compact_topk_indices")[2]
    assert project.class_of(project.resolve(user, "OnNvidia")).lookup("compact_topk_indices")[2]


def test_resolution_does_not_depend_on_what_was_loaded_first(tmp_path):
    # a fresh project asked in the other order gives the same answers
    project = make(tmp_path, VLLM_LIKE)
    project.module_at(tmp_path / "vllm/models/nvidia/mtp.py").outline
    user = project.module_at(tmp_path / "vllm/models/user.py")
    assert project.resolve(user, "AmdBase").name == "vllm.models.amd.mtp.MTPBase"


def test_star_imports_of_star_imports_resolve(tmp_path):
    # a package whose `__init__` re-exports its modules with `from .x import *`, star-imported
    # in turn: the name comes from the module that binds it, a cycle of stars ends
    project = make(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/kernels/__init__.py": "from .topk import *\nfrom .rows import *\n",
        "pkg/kernels/rows.py": "from . import *\n",
        "pkg/kernels/topk.py": """
            def pack_rows(model, rows):
                model.compact_topk_indices(rows)
        """,
        "pkg/user.py": """
            from .kernels import *
            from . import kernels as k
        """,
    })
    user = project.module_at(tmp_path / "pkg/user.py")
    assert project.resolve(user, "pack_rows").name == "pkg.kernels.topk.pack_rows"
    assert project.resolve(user, "k.pack_rows").name == "pkg.kernels.topk.pack_rows"
    assert project.resolve(user, "missing").kind == "unknown"


def test_inherited_hooks_and_class_attributes_bound_to_functions(tmp_path):
    project = make(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/impl.py": """
            def compact_impl(self, ids):
                self.model.compact_topk_indices(ids)
        """,
        "pkg/base.py": """
            from .impl import compact_impl

            class Base:
                compact_topk_indices = compact_impl

                def on_prefill_end(self):
                    self.compact_topk_indices(self.ids)
        """,
        "pkg/spec.py": """
            from .base import Base

            class Spec(Base):
                def on_decode_begin(self):
                    self.model.set_skip_topk(True)
        """,
    })
    spec = project.class_of(project.resolve(project.module_at(tmp_path / "pkg/spec.py"), "Spec"))
    hook = spec.method("on_prefill_end")
    assert hook is not None and hook.name == "pkg.base.Base.on_prefill_end"
    bound = spec.method("compact_topk_indices")
    assert bound is not None and bound.name == "pkg.impl.compact_impl"
    summaries = Summaries(project)
    assert summaries.reaches(hook, lambda c: c.name == "compact_topk_indices", "compacts", spec)


def test_instance_attributes_partial_and_self_types(tmp_path):
    project = make(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/model.py": """
            class DraftModel:
                def compact(self, ids):
                    self.buf.compact_topk_indices(ids)
        """,
        "pkg/helpers.py": """
            def squeeze(proposer, ids):
                proposer.model.compact(ids)
        """,
        "pkg/proposer.py": """
            import functools
            from .model import DraftModel
            from . import helpers

            class Proposer:
                def __init__(self):
                    self.model = DraftModel()
                    self.squeeze = functools.partial(helpers.squeeze, self)

                def load_model(self):
                    self.other = self.model

                def propose(self, ids):
                    self.model.compact(ids)
                    self.squeeze(ids)
                    self.other.compact(ids)
        """,
    })
    mod = project.module_at(tmp_path / "pkg/proposer.py")
    propose = mod.function("Proposer.propose")
    summaries = Summaries(project)
    targets = [c.function.name if c.function else None for c in summaries.callees(propose)]
    assert targets == ["pkg.model.DraftModel.compact", "pkg.helpers.squeeze", "pkg.model.DraftModel.compact"]
    assert summaries.reaches(propose, lambda c: c.name == "compact_topk_indices", "compacts")


def test_validating_helpers_and_fields_written_through_helpers(tmp_path):
    project = make(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/checks.py": """
            def require(md):
                check_type(md)

            def check_type(value):
                if not isinstance(value, Metadata):
                    raise TypeError("no")

            def advance(cam):
                cam.seq_lens += 1
                bump(cam)

            def bump(meta):
                meta.max_seq_len = meta.max_seq_len + 1
        """,
    })
    mod = project.module_at(tmp_path / "pkg/checks.py")
    summaries = Summaries(project)
    assert summaries.validates(mod.function("require"), 0)
    written = summaries.fields_written(mod.function("advance"), 0)
    assert ("seq_lens", "+=", 1) in written and ("max_seq_len", "=", 1) in written


def test_unbound_names_fall_back_to_the_short_name_and_say_so(tmp_path):
    project = make(tmp_path, {
        "a.py": "class Helper:\n    pass\n",
        "b.py": "x = Helper\n",  # nothing binds Helper in b.py
    })
    b = project.module_at(tmp_path / "b.py")
    assert project.resolve(b, "Helper").kind == "unknown"
    (found,) = project.short_name("Helper", "class")
    assert found.via == "short-name" and found.name == "a.Helper"


def test_external_names_stay_external(tmp_path):
    project = make(tmp_path, {"m.py": "import torch.nn as nn\nfrom somewhere import Thing\n"})
    m = project.module_at(tmp_path / "m.py")
    assert project.resolve(m, "nn.Module").kind == "external"
    assert project.resolve(m, "nn.Module").name == "torch.nn.Module"
    assert project.resolve(m, "Thing").name == "somewhere.Thing"


@pytest.mark.parametrize("layout", ["package", "namespace"])
def test_relative_imports_of_sibling_modules(tmp_path, layout):
    files = {
        "proj/helpers.py": "def helper():\n    pass\n",
        "proj/main.py": "from . import helpers\nfrom .helpers import helper as h\n",
    }
    if layout == "package":
        files["proj/__init__.py"] = ""
    project = make(tmp_path, files)
    main = project.module_at(tmp_path / "proj/main.py")
    assert project.resolve(main, "helpers.helper").kind == "function"
    assert project.resolve(main, "h").name.endswith("helpers.helper")


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ("buf[:n].copy_(buf[idx])", "buf"),
        ("layer.topk_indices_buffer[:n] = layer.topk_indices_buffer[slot_ids]", "layer.topk_indices_buffer"),
        ("buf[:n] = buf.index_select(0, idx)", "buf"),
        ("buf[:n].copy_(torch.index_select(buf, 0, idx))", "buf"),
        ("buf[:n].copy_(buf[n : 2 * n])", None),  # a slice moves a block, it gathers no rows
        ("buf[:n].copy_(other[idx])", None),  # another tensor's rows
        ("buf.copy_(buf[idx])", None),  # the whole buffer overwritten: not rows in place
        ("buf[0] = buf[1]", None),
    ],
)
def test_a_gather_of_a_buffers_rows_in_place(stmt, expected):
    from invariant_check.analysis.facts import gathered_buffer

    assert gathered_buffer(ast.parse(stmt).body[0].value if "copy_" in stmt else ast.parse(stmt).body[0]) == expected


def test_function_facts_name_the_gathered_buffer_through_a_local_alias():
    from invariant_check.analysis.facts import function_facts

    fn = ast.parse(
        "def gather(model, idx):\n"
        "    for layer in model.layers:\n"
        "        buf = layer.indexer.topk_indices_buffer\n"
        "        buf[: idx.numel()].copy_(buf[idx])\n"
    ).body[0]
    assert function_facts(fn, "gather", None).gathers == ["layer.indexer.topk_indices_buffer"]
