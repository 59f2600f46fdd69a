from __future__ import annotations

from typing import Any, Iterator

from invariant_check.analysis.needs import Names, Words
from invariant_check.analysis.members import delegates_attributes, installs_member, unseen_bases
from invariant_check.analysis.topk import ABSTRACT, INSTANCE, METHOD, NONE, PLACEHOLDER, TopkNames, TopkRoles, bound_to_none, declares_only, set_in_init_on_some_paths
from invariant_check.api.rule import Report, Rule
from invariant_check.api.types import Fix, Invalid, Option, Valid

from ._hints import compaction_method_hint


class ReuseModeWithoutCompactionMethod(Rule):
    """
    ## What it does
    Flags a class that can switch top-k reuse on (it defines `set_skip_topk`, or binds that
    name in its body, e.g. `set_skip_topk = _shared_impl`) while neither it nor any of its base
    classes provides the compaction (`compact_topk_indices`, as a method or a class attribute).

    ## Why is this bad?
    With MTP index sharing, draft step 0 writes the shared `topk_indices_buffer` one row per
    query token, and `set_skip_topk(True)` makes later draft steps reuse that buffer, which they
    read one row per request. The buffer must be compacted to one row per request before it is
    reused. A model class without `compact_topk_indices` gives its callers no way to do that,
    so every drafter that enables reuse on it reads other tokens' (even other requests')
    indices. This shipped in vLLM 0.23/0.24 (`DeepSeekMultiTokenPredictor`, fixed in 0.25.0 by
    PR #47238), and acceptance fell from 61.5% to 57.7%.

    ## Example
    ```python
    class MultiTokenPredictor(nn.Module):
        def set_skip_topk(self, skip: bool):
            for layer in self.layers:
                layer.indexer.skip_topk = skip
    ```

    ## Use instead
    ```python
    class MultiTokenPredictor(nn.Module):
        def set_skip_topk(self, skip: bool):
            for layer in self.layers:
                layer.indexer.skip_topk = skip

        def compact_topk_indices(self, slot_ids: torch.Tensor) -> None:
            # gather each distinct shared buffer once: several layers may hold the same one
            n = slot_ids.numel()
            seen = set()
            for layer in self.layers:
                buf = layer.indexer.topk_indices_buffer
                if id(buf) not in seen:
                    seen.add(id(buf))
                    buf[:n] = buf[slot_ids]
    ```
    (Or delegate to `invariant_check.compaction.compact_topk_indices_`, a race-free one-launch
    Triton kernel, if the project can depend on it.)

    ## How it decides
    Base classes are resolved through the imports of the module that names them, across the
    project (so `DeepseekV4MTPBase` is the class the import statement names, not any class of
    that spelling, also when a module of the project re-exports it), then the Python
    environment, then the bundled models of vLLM's classes
    (`invariant-check lint -v` says which source answered): a plugin's predictor that
    subclasses vLLM's `DeepSeekMultiTokenPredictor` inherits its compaction. Members include
    methods and class attributes of the class and of every resolved ancestor, looked up in
    Python's order (the C3 linearization of `__mro__`: in a diamond `class P(Left, Right)` with
    `Left(Base)` and `Right(Base)`, `Right`'s member comes before `Base`'s; two classes that
    share a name are two classes; an alias names the class it is bound to; where Python would
    reject the hierarchy, the order is depth first), and methods defined on every branch of a class-body `if`/`try` (`if HAS_KERNEL: def ...` /
    `else: def ...`; a definition on some branches only is not enough). A base outside the
    project that is listed in `external-bases` is known not to provide the method, and so is
    a class from a module of the vLLM releases modelled (0.13.0 to 0.33.0) that the bundled
    models do not hold: the models hold every class of those releases that defines the switch
    or the compaction, names a top-k buffer, or subclasses one that does. Any other base that
    cannot be resolved (a third-party class, a dynamic import, a module that no release
    modelled has, from a newer vLLM that is not installed) might provide it, and the rule
    stays silent.

    The compaction counts as a method or class attribute of the class or an ancestor, an
    `@abstractmethod` of an `ABC` or `Protocol` (the class cannot be built until a subclass
    implements it), or a callable bound to every instance in `__init__`
    (`self.compact_topk_indices = functools.partial(...)`, on every path through it: a binding
    under one branch of an `if`, or after an early `return`, leaves the other instances
    without one; a path that raises builds no instance). A compaction whose
    body only declares it (`...`, `pass`, a docstring, `raise NotImplementedError`, `return
    None`, a log line or warning, the unimplemented member of an explicit `Protocol` base), or a class attribute bound to
    `None`, compacts nothing: the class is reported, and the message names the placeholder. Methods of the bundled models are not placeholders: their
    bodies are left out, not empty.

    Not reported:
    - a class whose switch only declares it (`...`, `pass`, `raise NotImplementedError`: a
      `Protocol` or an abstract base); the classes that implement it are;
    - a class whose switch has nothing to do with a shared top-k buffer: it only sets flags
      of the object that the class's own code tests in conditions (a sampler's top-k filter,
      `self.skip_topk = skip`, or `= bool(skip)`, then `if self.skip_topk:` in `forward`), and neither the class
      nor a base defines the compaction, names a top-k buffer (`*topk_indices*`) or builds in
      `__init__` an object of a class that does. A flag that is handed on
      (`self.indexer(x, reuse=self.reuse)`) or read by no code of the class is taken to
      reach a buffer.

    - a class that gets the compaction from outside its body in a way the source shows: a
      class decorator of the project that assigns it on the class it is given
      (`cls.compact_topk_indices = _default`, `setattr(cls, "compact_topk_indices", ...)`,
      also on some path only), or a `__getattr__` of a project class in its MRO that returns
      a value (a wrapper that hands missing attributes on to the model it wraps; torch's
      `nn.Module.__getattr__` does not count).

    Not checked: a switch attached to a class from outside its body (a plugin's patch module
    assigning `SomeVllmPredictor.set_skip_topk = fn`); only class bodies are read for it.

    Only a name that nothing binds (no import, no definition) is looked up by its spelling
    among the project's classes; a finding that relied on that says so in its data
    (`resolved_by: short-name`).

    ## Fix
    Unsafe (`--fix --unsafe-fixes`). A `compact_topk_indices(self, slot_ids)` method, added right
    after `set_skip_topk` (where vLLM 0.25.0 put it), that finds the shared buffers the way the
    `topk-layout` guard and `invariant_check.compaction` do: every module under the model
    (`self.modules()`) and the attention `impl` it keeps, holding a `topk_indices_buffer`; each
    distinct storage (`data_ptr()`) is gathered once, `buf[:n] = buf[slot_ids]`, since layers
    that share a buffer must not gather it twice. Offered for `torch.nn.Module` subclasses only
    (the method walks `self.modules()`), and not where the class binds the compaction to `None`
    or to a placeholder of its own (dropping it, or writing one for the subclass, is the
    author's call). The callers still need IC002's call.

    ## Options
    - `switch-method` (default `set_skip_topk`): the method that turns reuse on.
    - `compaction-method` (default `compact_topk_indices`): the method that must exist beside it.
    - `external-bases`: base classes outside the project known not to implement the compaction,
      by their dotted spelling or resolved name.
    """

    CODE = "IC003"
    NAME = "reuse-mode-without-compaction-method"
    SUMMARY = "A class that can switch on top-k reuse has no method to compact the shared buffer."
    HINT = compaction_method_hint("compact_topk_indices")
    SCOPE = "class"
    OPTIONS = {
        "switch-method": Option("set_skip_topk", "method that switches index reuse on", str),
        "compaction-method": Option("compact_topk_indices", "method that compacts the buffer", str),
        "external-bases": Option(
            ["object", "Module", "nn.Module", "torch.nn.Module", "torch.nn.modules.module.Module",
             "ABC", "abc.ABC", "Protocol", "typing.Protocol", "Generic", "typing.Generic",
             "builtins.object"],
            "base classes outside the project that are known not to implement the compaction",
        ),
    }

    VALID = [
        Valid(
            """
class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip

    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]
"""
        ),
        Valid(
            """
class Base(nn.Module):
    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]

class Predictor(Base):
    def set_skip_topk(self, skip):
        self.skip = skip
"""
        ),
        Valid(
            """
from .base import CompactingBase

class Predictor(CompactingBase):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            files={
                "base.py": """
import torch.nn as nn

class CompactingBase(nn.Module):
    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]
"""
            },
        ),
        # The reference kernel assigned as the method.
        Valid(
            """
from invariant_check.compaction import compact_topk_indices_

class Predictor(nn.Module):
    compact_topk_indices = compact_topk_indices_

    def set_skip_topk(self, skip):
        self.skip = skip
"""
        ),
        # A nested function of that name is no method of the class.
        Valid(
            """
class Predictor(nn.Module):
    def configure(self):
        def set_skip_topk(skip):
            return skip
        return set_skip_topk
"""
        ),
        # Unknown base outside the project: cannot prove it lacks the method.
        Valid(
            """
from somewhere import UnknownBase

class Predictor(UnknownBase):
    def set_skip_topk(self, skip):
        self.skip = skip
"""
        ),
        # The import names the compacting base of two same-named classes.
        Valid(
            """
from .nvidia.mtp import MTPBase

class Predictor(MTPBase):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            files={
                "nvidia/__init__.py": "",
                "nvidia/mtp.py": """
class MTPBase:
    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]
""",
                "amd/__init__.py": "",
                "amd/mtp.py": """
class MTPBase:
    pass
""",
            },
        ),
        # A sampler's top-k filter: the switch sets a flag its own `forward` tests; it holds
        # no top-k buffer.
        Valid(
            """
import torch.nn as nn

class TopKSampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.skip_topk = False

    def set_skip_topk(self, skip):
        self.skip_topk = skip

    def forward(self, logits, k):
        if self.skip_topk or k is None:
            return logits.argmax(dim=-1)
        return logits.topk(k, dim=-1).indices[:, 0]
"""
        ),
        # The compaction defined on both branches of a class-body `if`.
        Valid(
            """
import torch.nn as nn

class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip

    if HAS_KERNEL:
        def compact_topk_indices(self, slot_ids):
            compact_kernel([layer.indexer.topk_indices_buffer for layer in self.layers], slot_ids)
    else:
        def compact_topk_indices(self, slot_ids):
            for layer in self.layers:
                buf = layer.indexer.topk_indices_buffer
                buf[: slot_ids.numel()] = buf[slot_ids]
"""
        ),
        # An interface that only declares the switch: its implementations are judged.
        Valid(
            """
from typing import Protocol

class SupportsIndexReuse(Protocol):
    def set_skip_topk(self, skip: bool) -> None: ...
"""
        ),
        # A plugin's predictor inherits the compaction from vLLM's (bundled models).
        Valid(
            """
from vllm.model_executor.models.deepseek_mtp import DeepSeekMultiTokenPredictor

class NpuMultiTokenPredictor(DeepSeekMultiTokenPredictor):
    def set_skip_topk(self, skip: bool):
        for layer in self.layers.values():
            layer.mtp_block.self_attn.impl.skip_topk = skip
"""
        ),
        # The compaction bound on each instance in `__init__`, to a real gather.
        Valid(
            """
import functools
import torch.nn as nn

def _compact(layers, slot_ids):
    for layer in layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]

class Predictor(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers
        self.compact_topk_indices = functools.partial(_compact, self.layers)

    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip
"""
        ),
        # A class decorator of the project installs the compaction on the class.
        Valid(
            """
import torch.nn as nn

from .sharing import with_default_compaction

@with_default_compaction
class SparseMTPPredictor(nn.Module):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            files={
                "sharing.py": """
def _compact(self, slot_ids):
    for layer in self.layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]

def with_default_compaction(cls):
    if "compact_topk_indices" not in vars(cls):
        cls.compact_topk_indices = _compact
    return cls
"""
            },
        ),
        # A wrapper whose `__getattr__` hands the compaction on to the model it wraps.
        Valid(
            """
class GraphModeWrapper:
    def __init__(self, predictor):
        self.predictor = predictor

    def __getattr__(self, name):
        return getattr(self.predictor, name)

    def set_skip_topk(self, skip):
        self.predictor.set_skip_topk(skip)
        self.mode = skip
"""
        ),
        # Members are looked up in Python's order (C3, `__mro__`): in this diamond the mixin
        # comes before the base both sides share, so its compaction overrides the base's stub
        # (a depth-first walk would reach `Base`'s stub first).
        Valid(
            """
import torch.nn as nn

class Base(nn.Module):
    def set_skip_topk(self, skip: bool) -> None: ...
    def compact_topk_indices(self, slot_ids) -> None: ...

class Left(Base):
    pass

class CompactingMixin(Base):
    def compact_topk_indices(self, slot_ids):
        buf = self.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]

class Predictor(Left, CompactingMixin):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip
"""
        ),
        # The same diamond with the shared base spelled through an alias (`ModelBase = _Base`
        # re-exported by another module): one class, so the mixin still comes first.
        Valid(
            """
from .base import Base
from .compat import ModelBase

class Left(Base):
    pass

class Right(ModelBase):
    def compact_topk_indices(self, slot_ids):
        buf = self.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]

class Predictor(Left, Right):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            files={
                "base.py": """
import torch.nn as nn

class Base(nn.Module):
    def set_skip_topk(self, skip: bool) -> None: ...
    def compact_topk_indices(self, slot_ids) -> None: ...
""",
                "compat.py": """
from .base import Base as _Base

ModelBase = _Base
""",
            },
        ),
        # A diamond whose mixin names the shared base through its module, beside an unrelated
        # class of the same name: the base is the class the import names, shared by both sides.
        Valid(
            """
from .interfaces import TopkReuse
from .kernels import CompactingReuse

class Left(TopkReuse):
    pass

class Predictor(Left, CompactingReuse):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            files={
                "interfaces.py": """
import torch.nn as nn

class TopkReuse(nn.Module):
    def compact_topk_indices(self, slot_ids):
        raise NotImplementedError
""",
                "kernels.py": """
import torch.nn as nn
from . import interfaces

class TopkReuse(nn.Module):
    pass

class CompactingReuse(interfaces.TopkReuse):
    def compact_topk_indices(self, slot_ids):
        buf = self.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]
""",
            },
        ),
        # The compaction is bound in `__init__` on both branches: every instance has one.
        Valid(
            """
import functools
import torch.nn as nn

from .ops import triton_compact, torch_compact

class Predictor(nn.Module):
    def __init__(self, layers, use_triton: bool):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        if use_triton:
            self.compact_topk_indices = functools.partial(triton_compact, self.layers)
        else:
            self.compact_topk_indices = functools.partial(torch_compact, self.layers)

    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            files={"ops.py": """
def triton_compact(layers, slot_ids):
    for layer in layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]


def torch_compact(layers, slot_ids):
    triton_compact(layers, slot_ids)
"""},
        ),
        # A sampler's switch keeps a flag (as a `bool(...)`) that its own forward tests.
        Valid(
            """
import torch
import torch.nn as nn


class DraftSampler(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.vocab_size = vocab_size
        self._skip_topk = False

    def set_skip_topk(self, skip: bool) -> None:
        self._skip_topk = bool(skip)

    def forward(self, logits, top_k):
        if self._skip_topk:
            return torch.argmax(logits, dim=-1)
        _, indices = torch.topk(logits, top_k, dim=-1)
        return indices[:, 0]
"""
        ),
        # The compaction is a class attribute on every branch of a class-body `if`.
        Valid(
            """
import torch.nn as nn

from .ops import torch_compact, triton_compact

HAS_TRITON = False


class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip

    if HAS_TRITON:
        compact_topk_indices = triton_compact
    else:
        compact_topk_indices = torch_compact
""",
            files={"ops.py": """
def _gather(layers, slot_ids):
    for layer in layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]


def torch_compact(self, slot_ids):
    _gather(self.layers, slot_ids)


triton_compact = torch_compact
"""},
        ),
    ]
    INVALID = [
        Invalid(
            """
class Predictor(nn.Module):
    def __init__(self):
        super().__init__()

    def set_skip_topk(self, skip: bool):
        for layer in self.layers:
            layer.skip_topk = skip
""",
            line=1,
            column=7,
            message_contains="Predictor",
        ),
        Invalid(
            """
class Complete(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip

    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]


class Incomplete(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            line=9,
            message_contains="Incomplete",
        ),
        Invalid(
            """
class Base(nn.Module):
    pass

class Predictor(Base):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            line=4,
        ),
        Invalid(
            """
class Predictor(nn.Module):
    def use_shared_indices(self, on):
        self.skip = on
""",
            line=1,
            options={"switch-method": "use_shared_indices"},
        ),
        # The switch bound as a class attribute.
        Invalid(
            """
def _shared_impl(self, skip):
    self.skip = skip

class Predictor(nn.Module):
    set_skip_topk = _shared_impl
""",
            line=4,
        ),
        # The import names the base without the method, although a same-named class elsewhere
        # has it.
        Invalid(
            """
from .amd.mtp import MTPBase

class Predictor(MTPBase):
    def set_skip_topk(self, skip):
        self.skip = skip
""",
            line=3,
            files={
                "nvidia/__init__.py": "",
                "nvidia/mtp.py": """
class MTPBase:
    def compact_topk_indices(self, slot_ids):
        self.buf[: slot_ids.numel()] = self.buf[slot_ids]
""",
                "amd/__init__.py": "",
                "amd/mtp.py": """
import torch.nn as nn

class MTPBase(nn.Module):
    pass
""",
            },
        ),
        # The compaction exists only where the kernel imported.
        Invalid(
            """
import torch.nn as nn

class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip

    if HAS_KERNEL:
        def compact_topk_indices(self, slot_ids):
            compact_kernel([layer.indexer.topk_indices_buffer for layer in self.layers], slot_ids)
""",
            line=3,
        ),
        # The implementation of an interface that declares only the switch.
        Invalid(
            """
import torch.nn as nn
from .interfaces import SupportsIndexReuse

class Predictor(nn.Module, SupportsIndexReuse):
    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            line=4,
            files={
                "interfaces.py": """
from typing import Protocol

class SupportsIndexReuse(Protocol):
    def set_skip_topk(self, skip: bool) -> None: ...
"""
            },
        ),
        # A plugin's predictor on vLLM's backbone: no release modelled gives that class a
        # compaction (bundled models).
        Invalid(
            """
from vllm.model_executor.models.deepseek_v2 import DeepseekV2Model

class NpuMTPModel(DeepseekV2Model):
    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.self_attn.indexer.skip_topk = skip
""",
            line=3,
        ),
        # The flag the switch sets is handed to the indexer, which may hold a shared buffer.
        Invalid(
            """
import torch.nn as nn

class Predictor(nn.Module):
    def __init__(self, indexer):
        super().__init__()
        self.indexer = indexer
        self.reuse = False

    def set_skip_topk(self, skip):
        self.reuse = skip

    def forward(self, x):
        return self.indexer(x, reuse=self.reuse)
""",
            line=3,
        ),
        # vLLM's base, re-exported by a module of the plugin: still vLLM's class, without the method.
        Invalid(
            """
from .compat import DeepseekV2Model

class Backbone(DeepseekV2Model):
    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.self_attn.skip_topk = skip
""",
            line=3,
            files={"compat.py": "from vllm.model_executor.models.deepseek_v2 import DeepseekV2Model\n"},
        ),
        # A compaction that is only a placeholder: the buffer is never compacted.
        Invalid(
            """
import torch.nn as nn

class SparsePredictor(nn.Module):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip

    def compact_topk_indices(self, slot_ids):
        pass  # TODO
""",
            line=3,
            message_contains="compacts nothing",
        ),
        # The compaction inherited from an explicit Protocol base is its `...` stub.
        Invalid(
            """
from typing import Protocol

class IndexReuse(Protocol):
    def set_skip_topk(self, skip: bool) -> None: ...
    def compact_topk_indices(self, slot_ids) -> None: ...

class Predictor(IndexReuse):
    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            line=7,
        ),
        # C3 again: the right-hand mixin's stub comes before the real compaction of the base
        # both sides share, and it is the one Python calls (depth first would find `Base`'s).
        Invalid(
            """
import torch.nn as nn

class Base(nn.Module):
    def compact_topk_indices(self, slot_ids):
        buf = self.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]

class Left(Base):
    pass

class NoCompaction(Base):
    def compact_topk_indices(self, slot_ids):
        \"\"\"This backend keeps one row per token.\"\"\"

class Predictor(Left, NoCompaction):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            line=15,
            message_contains="`NoCompaction`'s",
        ),
        # Two different bases that share a name are two classes, not a diamond: `Left`'s base
        # (a stub) comes before `Right`, whose base of the same name has the compaction.
        Invalid(
            """
from .interfaces import TopkReuse
from . import kernels

class Left(TopkReuse):
    pass

class Right(kernels.TopkReuse):
    pass

class Predictor(Left, Right):
    def set_skip_topk(self, skip):
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            line=10,
            files={
                "interfaces.py": """
class TopkReuse:
    def compact_topk_indices(self, slot_ids):
        raise NotImplementedError
""",
                "kernels.py": """
import torch.nn as nn

class TopkReuse(nn.Module):
    def compact_topk_indices(self, slot_ids):
        buf = self.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]
""",
            },
        ),
        # A subclass turns the base's compaction off with `None`: its instances have nothing
        # to call.
        Invalid(
            """
from .base import SharedIndexMTP

class HPUSharedIndexMTP(SharedIndexMTP):
    compact_topk_indices = None

    def set_skip_topk(self, skip: bool) -> None:
        super().set_skip_topk(skip)
""",
            line=3,
            message_contains="is `None`",
            files={"base.py": """
import torch.nn as nn

class SharedIndexMTP(nn.Module):
    def compact_topk_indices(self, slot_ids):
        buf = self.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]

    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
"""},
        ),
        # The compaction is bound in `__init__` only when Triton is used.
        Invalid(
            """
import functools
import torch.nn as nn

from .ops import triton_compact

class Predictor(nn.Module):
    def __init__(self, layers, use_triton: bool):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        if use_triton:
            self.compact_topk_indices = functools.partial(triton_compact, self.layers)

    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            line=6,
            message_contains="on some paths only",
            files={"ops.py": """
def triton_compact(layers, slot_ids):
    for layer in layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]
"""},
        ),
        # A generic base, subscripted: the class derives from `nn.Module` and `Generic`.
        Invalid(
            """
from typing import Generic, TypeVar

import torch.nn as nn

ConfigT = TypeVar("ConfigT")


class SparseMTP(nn.Module, Generic[ConfigT]):
    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            line=8,
        ),
        # `__init__` returns early before it binds the compaction: those instances lack it.
        Invalid(
            """
import functools

import torch.nn as nn

from .ops import triton_compact


class Predictor(nn.Module):
    def __init__(self, layers, config):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        if not config.index_share:
            return
        self.compact_topk_indices = functools.partial(triton_compact, self.layers)

    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
""",
            line=8,
            message_contains="on some paths only",
            files={"ops.py": """
def triton_compact(layers, slot_ids):
    for layer in layers:
        buf = layer.indexer.topk_indices_buffer
        buf[: slot_ids.numel()] = buf[slot_ids]
"""},
        ),
        # A fork's override that only logs and returns: the base's gather no longer runs.
        Invalid(
            """
import logging

import torch.nn as nn

logger = logging.getLogger(__name__)


class NpuPredictor(nn.Module):
    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip

    def compact_topk_indices(self, slot_ids):
        logger.warning_once("top-k compaction is not ported to this device yet")
        return None
""",
            line=8,
        ),
    ]

    @classmethod
    def needs(cls, options: dict[str, Any]) -> Words:
        return Words(options["switch-method"])

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        defaults = self.default_options()
        self.names = TopkNames(
            options["switch-method"],
            options["compaction-method"],
            Names(["*topk_indices*"], case_sensitive=True),
            frozenset(options["external-bases"]),
            closed_world=options["switch-method"] == defaults["switch-method"] and options["compaction-method"] == defaults["compaction-method"],
        )
        self._roles: TopkRoles | None = None

    def check_class(self, view) -> Iterator[Report]:
        switch = self.options["switch-method"]
        compaction = self.options["compaction-method"]
        info = view.info
        members = info.own_members()
        if switch not in members:
            return
        if self._roles is None or self._roles.project is not view.project:
            self._roles = TopkRoles(view.project, self.names)
        how, giver = self._roles.compaction(info)
        if how in (METHOD, INSTANCE, ABSTRACT):
            return
        if members[switch] is None:
            own = info.module.function(f"{info.qual}.{switch}")
            node = own.node() if own is not None else None
            if node is not None and declares_only(node):
                return  # an interface that declares the switch: its implementations answer
        external = set(self.options["external-bases"])
        roles = self._roles

        def absent(module, spelled: str) -> bool:
            return roles.absent_upstream(module, spelled, None)

        unknown, fallback = unseen_bases(view.project, info, compaction, external, absent)
        if unknown:
            return  # a base the project cannot see might provide it
        if self._roles.of_class(info) == NONE:
            return  # its switch concerns no shared top-k buffer (a sampler's top-k filter)
        if any(installs_member(view.project, cls, compaction) or delegates_attributes(cls) for cls in info.classes()):
            return  # a class decorator installs it, or `__getattr__` hands it on to another object
        data = {"class": info.name, "bases": [b or "?" for b in info.base_spellings()]}
        if fallback:
            data["resolved_by"] = "short-name"
        if how == PLACEHOLDER and giver is not None:
            data["placeholder"] = giver.name
            where = "its" if giver is info else f"`{giver.qual}`'s"
            what = "is `None`" if bound_to_none(giver, compaction) else "only declares itself"
            problem = (
                f"Class `{info.qual}` defines `{switch}` but {where} `{compaction}` {what} "
                f"and compacts nothing"
            )
        elif set_in_init_on_some_paths(info, compaction):
            problem = f"Class `{info.qual}` defines `{switch}` but its `__init__` binds `{compaction}` on some paths only"
        else:
            problem = f"Class `{info.qual}` defines `{switch}` but neither it nor a base class has `{compaction}`"
        yield Report(
            view.name_span(),
            f"{problem}: draft steps that reuse the top-k buffer would read per-token rows",
            compaction_method_hint(compaction),
            data,
        )

    def fix(self, report: Report, view) -> Fix | None:
        from ._fixes import ic003

        return ic003.build(self, report, view)


__all__ = ["ReuseModeWithoutCompactionMethod"]
