"""Queries about top-k index sharing (`analysis/topk.py`) and the flow facts IC002 asks:
which objects a reuse switch can concern, branches that say there is nothing to act on,
conditions through locals bound once, loops that compact, members defined on every branch."""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from invariant_check.analysis.environment import MODELS
from invariant_check.analysis.facts import class_facts
from invariant_check.analysis.flow import Flow, asserts_empty
from invariant_check.analysis.needs import Names
from invariant_check.analysis.project import Project
from invariant_check.analysis.topk import (
    HOLDER,
    NONE,
    UNKNOWN,
    TopkNames,
    TopkRoles,
    declares_only,
    gathered_topk,
    modelled_modules,
)
from invariant_check.analysis.views import Context, FunctionView

ROOT = Path(__file__).resolve().parents[1]
BUFFERS = Names(["*topk_indices*"], case_sensitive=True)


def make(tmp_path: Path, files: dict[str, str]) -> Project:
    for name, code in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(code).lstrip("\n"))
    return Project(tmp_path, listing=lambda: sorted(tmp_path.rglob("*.py")))


def roles(project: Project, closed_world: bool = True) -> TopkRoles:
    return TopkRoles(project, TopkNames("set_skip_topk", "compact_topk_indices", BUFFERS, closed_world=closed_world))


def klass(project: Project, path: Path, name: str):
    return project.class_of(project.resolve(project.module_at(path), name))


def view(project: Project, path: Path, qual: str) -> FunctionView:
    module = project.module_at(path)
    return FunctionView(Context(project), module, module.function(qual).node(), qual)


# -- nothing to act on -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "test, polarity",
    [
        ("rows.numel() == 0", True),
        ("rows.numel() > 0", False),
        ("len(rows) == 0", True),
        ("0 == len(rows)", True),
        ("len(rows)", False),
        ("rows.shape[0] == 0", True),
        ("rows.size(0) < 1", True),
        ("rows.size()[0] <= 0", True),
        ("num_reqs == 0", True),
        ("self.batch_size != 0", False),
        ("n", False),  # `n = rows.numel()` below
        ("m == 0", True),  # `m = n`
        ("self.share and len(rows) == 0", True),
        ("len(rows) == 0 or rows.numel() == 0", True),
    ],
)
def test_branches_that_say_there_is_nothing_to_act_on(test, polarity):
    flow = Flow(ast.parse("def f(self, rows, num_reqs):\n    n = rows.numel()\n    m = n\n").body[0])
    assert flow.empty((test, polarity))


@pytest.mark.parametrize(
    "test, polarity",
    [
        ("rows.numel() == 0", False),
        ("len(rows) == 1", True),
        ("step == 0", True),  # a counter, not a size
        ("self.share", False),  # a flag
        ("self.num_speculative_tokens == 1", True),
        ("len(rows) == 0 or self.use_cuda_graph", True),
        ("k", False),  # bound to a size and to something else
    ],
)
def test_branches_that_do_not(test, polarity):
    flow = Flow(ast.parse("def f(self, rows, step):\n    k = len(rows)\n    k = self.k\n").body[0])
    assert not flow.empty((test, polarity))


def test_asserts_empty_follows_negation():
    expr = ast.parse("not rows.numel()", mode="eval").body
    assert asserts_empty(expr, True)
    assert not asserts_empty(expr, False)


# -- conditions through locals bound once -------------------------------------------------------


def test_a_local_bound_once_outside_loops_is_known_where_it_is_tested():
    code = """
def propose(self, idx):
    share = self.share and hasattr(self.model.model, "set_skip_topk")
    again = self.a
    again = self.b
    for step in range(3):
        inner = step
    hidden = self.model()
    if share:
        self.model.model.set_skip_topk(True)
    if again:
        self.switch_again()
    if share.attr:
        self.other()
"""
    flow = Flow(ast.parse(code).body[0])
    assert flow.fixed == {"share", "hidden"}
    at = flow.by_call[id(next(n for n in ast.walk(flow.func) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("set_skip_topk")))]
    assert flow.known_at(at) == {}  # the default is unchanged
    assert flow.known_at(at, fixed=True) == {"share": True}
    assert not flow.stable_fixed("again")
    assert not flow.stable_fixed("share.attr")  # the object may change while the name does not


# -- loops --------------------------------------------------------------------------------------


def test_the_verdicts_of_one_iteration_of_a_loop():
    code = """
def f(self, rows):
    for layer in self.layers:
        if layer.done:
            continue
        gather(layer)
    for layer in self.layers:
        print(layer)
"""
    flow = Flow(ast.parse(code).body[0])

    def stop(node):
        if node.kind == "call" and isinstance(node.node.func, ast.Name) and node.node.func.id == "gather":
            return "hit"
        return None

    first, second = flow.loops
    assert flow.loop_at(first.head) is first
    assert flow.iteration(first, stop) == {"hit", "out"}  # `continue` skips a layer
    assert flow.iteration(second, stop) == {"out"}


# -- gathers and declarations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stmt, expected",
    [
        ("buf[:n] = buf[idx]", "layer.indexer.topk_indices_buffer"),
        ("buf[:n].copy_(buf[idx])", "layer.indexer.topk_indices_buffer"),
        ("self.topk_indices_buffer[:n] = self.topk_indices_buffer[idx]", "self.topk_indices_buffer"),
        ("hidden[:n] = hidden[idx]", None),  # not a top-k buffer
        ("buf[:n] = other[idx]", None),  # not a gather of its own rows
    ],
)
def test_a_gather_of_a_top_k_buffer_written_out(stmt, expected):
    node = ast.parse(stmt).body[0]
    node = node.value if isinstance(node, ast.Expr) else node
    aliases = {"buf": "layer.indexer.topk_indices_buffer", "hidden": "self.hidden_states"}
    assert gathered_topk(node, aliases, BUFFERS) == expected


@pytest.mark.parametrize(
    "body, declares",
    [
        ("...", True),
        ("pass", True),
        ('"""Doc."""\n    raise NotImplementedError', True),
        ("raise NotImplementedError()", True),
        ("self.skip = skip", False),
    ],
)
def test_a_function_that_only_declares_itself(body, declares):
    node = ast.parse(f"def set_skip_topk(self, skip):\n    {body}\n").body[0]
    assert declares_only(node) is declares


def test_members_defined_on_every_branch_of_a_class_body():
    code = """
class Predictor:
    if HAS_KERNEL:
        def both(self): ...
        def one(self): ...
    else:
        def both(self): ...
    try:
        from kernels import fast as tried
    except ImportError:
        def tried(self): ...
"""
    facts = class_facts(ast.parse(code).body[0], "Predictor")
    members = set(facts.methods) | set(facts.attrs)
    assert "both" in members
    assert "one" not in members


# -- classes ------------------------------------------------------------------------------------------

CLASSES = {
    "pkg/__init__.py": "",
    "pkg/sampler.py": """
        import torch.nn as nn

        class Sampler(nn.Module):
            def __init__(self):
                super().__init__()
                self.skip_topk = False

            def set_skip_topk(self, skip):
                self.skip_topk = skip

            def forward(self, logits, k):
                greedy = self.skip_topk
                if greedy or k is None:
                    return logits.argmax(-1)
                return logits.topk(k).indices

        class Unread(nn.Module):
            def set_skip_topk(self, skip):
                self.skip_topk = skip

        class HandedOn(nn.Module):
            def __init__(self, indexer):
                super().__init__()
                self.indexer = indexer
                self.reuse = False

            def set_skip_topk(self, skip):
                self.reuse = skip

            def forward(self, x):
                return self.indexer(x, reuse=self.reuse)

        class Declared(nn.Module):
            def set_skip_topk(self, skip): ...
    """,
    "pkg/model.py": """
        import torch.nn as nn
        from vllm.model_executor.models.deepseek_mtp import DeepSeekMultiTokenPredictor

        class Indexer(nn.Module):
            def __init__(self):
                super().__init__()
                self.topk_indices_buffer = None

        class Layer(nn.Module):
            def __init__(self):
                super().__init__()
                self.indexer = Indexer()

        class Predictor(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.skip_topk = False
                self.layers = nn.ModuleList([Layer() for _ in range(n)])

            def set_skip_topk(self, skip):
                self.skip_topk = skip

            def forward(self, x):
                if self.skip_topk:
                    return x
                return x

        class Compacting(nn.Module):
            def compact_topk_indices(self, ids): ...

        class Npu(DeepSeekMultiTokenPredictor):
            def set_skip_topk(self, skip):
                self.skip = skip

        class OnUnknown(SomethingElse):
            def set_skip_topk(self, skip):
                self.skip_topk = skip

            def forward(self, x):
                if self.skip_topk:
                    return x
    """,
}


@pytest.mark.parametrize(
    "path, name, role",
    [
        ("pkg/sampler.py", "Sampler", NONE),  # a flag its own `forward` tests (through a local)
        ("pkg/sampler.py", "Unread", UNKNOWN),  # read by something else
        ("pkg/sampler.py", "HandedOn", UNKNOWN),  # handed to the indexer
        ("pkg/sampler.py", "Declared", UNKNOWN),  # the implementation is elsewhere
        ("pkg/model.py", "Indexer", HOLDER),  # names a buffer
        ("pkg/model.py", "Predictor", HOLDER),  # through its layers (constructed in `__init__`)
        ("pkg/model.py", "Compacting", HOLDER),  # defines the compaction
        ("pkg/model.py", "Npu", HOLDER),  # vLLM's predictor, from the bundled models
        ("pkg/model.py", "OnUnknown", UNKNOWN),  # a base nothing reads
    ],
)
def test_which_classes_can_hold_a_shared_top_k_buffer(tmp_path, path, name, role):
    project = make(tmp_path, CLASSES)
    assert roles(project).of_class(klass(project, tmp_path / path, name)) == role


RECEIVERS = {
    "drafter.py": """
        from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
        from vllm.model_executor.models.deepseek_mtp import DeepSeekMultiTokenPredictor
        from vllm.not_a_module_of_any_release import Future
        from local_sampler import Sampler

        class Drafter:
            def __init__(self, vllm_config, model, sampler: Sampler):
                self.sampler = TopKTopPSampler()
                self.local = Sampler()
                self.handed = sampler
                self.mtp = DeepSeekMultiTokenPredictor(vllm_config=vllm_config)
                self.future = Future()
                self.model = model

            def propose(self, draft_model):
                alias = self.local
                self.sampler.set_skip_topk(True)
                self.local.set_skip_topk(True)
                alias.set_skip_topk(True)
                self.handed.set_skip_topk(True)
                self.mtp.set_skip_topk(True)
                self.future.set_skip_topk(True)
                self.model.model.set_skip_topk(True)
                draft_model.set_skip_topk(True)
    """,
    "local_sampler.py": """
        import torch.nn as nn

        class Sampler(nn.Module):
            def set_skip_topk(self, skip):
                self.greedy = skip

            def forward(self, x):
                if self.greedy:
                    return x.argmax(-1)
                return x
    """,
}


@pytest.mark.parametrize(
    "receiver, role, role_without_closed_world",
    [
        ("self.sampler", NONE, UNKNOWN),  # vLLM's sampler: no release has a buffer there
        ("self.local", NONE, NONE),
        ("alias", NONE, NONE),
        ("self.handed", NONE, NONE),  # declared by its parameter's annotation
        ("self.mtp", HOLDER, HOLDER),
        ("self.future", UNKNOWN, UNKNOWN),  # a module of no release modelled
        ("self.model.model", UNKNOWN, UNKNOWN),
        ("draft_model", UNKNOWN, UNKNOWN),
    ],
)
def test_the_object_a_switch_is_called_on(tmp_path, receiver, role, role_without_closed_world):
    project = make(tmp_path, RECEIVERS)
    v = view(project, tmp_path / "drafter.py", "Drafter.propose")
    assert roles(project).of_receiver(v, receiver) == role
    assert roles(project, closed_world=False).of_receiver(v, receiver) == role_without_closed_world


def test_a_base_class_from_a_modelled_module_that_the_models_lack(tmp_path):
    project = make(tmp_path, {
        "plugin.py": """
            from vllm.model_executor.models.deepseek_mtp import NotInTheModels
            from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
            import vllm.v1.sample.ops.topk_topp_sampler as sampling
            from vllm.brand_new_module import Something
        """,
    })
    module = project.module_at(tmp_path / "plugin.py")
    r = roles(project)
    assert r.absent_upstream(module, "NotInTheModels", None)
    assert r.absent_upstream(module, "TopKTopPSampler", None)
    assert r.absent_upstream(module, "sampling.TopKTopPSampler", None)
    assert not r.absent_upstream(module, "Something", None)
    assert not roles(project, closed_world=False).absent_upstream(module, "TopKTopPSampler", None)


# -- the bundled models -------------------------------------------------------------------------------


def test_every_bundled_model_is_a_module_of_the_releases():
    known = modelled_modules(MODELS)
    assert "vllm.v1.sample.ops.topk_topp_sampler" in known
    models = {
        ".".join(p.relative_to(MODELS).with_suffix("").parts).removesuffix(".__init__")
        for p in MODELS.rglob("*.py")
        if p.name != "__init__.py" or p.stat().st_size > 200
    }
    assert models <= known


def _gen_models():
    spec = importlib.util.spec_from_file_location("gen_models_under_test", ROOT / "scripts" / "gen_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_models_hold_the_subclasses_of_holders():
    gen = _gen_models()
    files = {
        "vllm/__init__.py": b"",
        "vllm/mtp.py": b"class Holder:\n    def set_skip_topk(self, skip):\n        self.skip = skip\n",
        "vllm/sub.py": b"from vllm.mtp import Holder\n\nclass Sub(Holder):\n    pass\n\nclass Other:\n    pass\n",
    }
    chosen = gen.select(gen.index(files), gen.vocabulary())
    assert chosen[("vllm.mtp", "Holder")] == "holder"
    assert chosen[("vllm.sub", "Sub")] == "holder"
    assert ("vllm.sub", "Other") not in chosen


def test_a_flag_guarding_layers_built_by_a_function_is_not_known_to_be_harmless(tmp_path):
    project = make(tmp_path, {
        "model.py": """
            import torch
            import torch.nn as nn
            from .layers import make_layers

            class Built(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.layers = make_layers(config)
                    self.skip_topk = False

                def set_skip_topk(self, skip):
                    self.skip_topk = skip

                def forward(self, x):
                    if self.skip_topk:
                        return self.layers[0].reuse(x)
                    return self.layers[0](x)

            class Tensors(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.greedy = False
                    self.generator = torch.Generator()
                    self.scratch = torch.empty(8)

                def set_skip_topk(self, skip):
                    self.greedy = skip

                def forward(self, logits):
                    if self.greedy:
                        return logits.argmax(-1)
                    return logits
        """,
        "layers.py": """
            def make_layers(config):
                return []
        """,
    })
    r = roles(project)
    assert r.of_class(klass(project, tmp_path / "model.py", "Built")) == UNKNOWN
    assert r.of_class(klass(project, tmp_path / "model.py", "Tensors")) == NONE
