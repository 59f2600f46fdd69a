"""IC003's fix: the missing compaction method, added to the class that switches reuse on.

The method finds the shared top-k buffers the way the `topk-layout` guard and the reference
compaction find them (`invariant_check.compaction.modules`): every module of the model, and
the attention `impl` each keeps, holding a `topk_indices_buffer`; it gathers each distinct
buffer (by storage address) once, since layers that share a buffer must not gather it twice.
"""

from __future__ import annotations

import ast
import textwrap

from invariant_check.api.edits import Editor, whole
from invariant_check.api.layout import style_for
from invariant_check.api.types import UNSAFE, Fix

# where the guard looks for the buffer: modules, and the plain attention objects they keep
BUFFER_ATTR = "topk_indices_buffer"
_MODULE_BASES = ("torch.nn.Module", "torch.nn.modules.module.Module")


def build(rule, report, view) -> Fix | None:
    switch = rule.options["switch-method"]
    compaction = rule.options["compaction-method"]
    node: ast.ClassDef = whole(view.source, view.node)  # with every method's body
    if not _is_torch_module(view.info):
        return None  # the method walks `self.modules()`: an nn.Module's
    if (report.data or {}).get("placeholder") == view.info.name:
        return None  # its own placeholder: what its body should gather is the author's call
    ed = Editor(view.source)
    body = node.body
    indent = ed.indent_of(body[0])
    if indent is None or body[0].lineno == node.lineno:
        return None  # `class X(nn.Module): pass` on one line
    # beside the switch, as vLLM 0.25.0 placed it; else after the last member
    anchor = next(
        (s for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == switch),
        body[-1],
    )
    torch_bound = "torch" in view.module.bindings().bindings
    width = style_for(view.source.path).line_length
    code = method_source(compaction, switch, torch_bound, room=width - len(indent) - 4)
    edit = ed.insert_after(anchor, code, indent, blank_before=True)
    if edit is None:
        return None
    return Fix(
        UNSAFE,
        f"Add `{compaction}` to `{view.info.qual}`: gather each distinct `{BUFFER_ATTR}` under the model to "
        "the rows of `slot_ids`, once",
        (edit,),
    )


def method_source(compaction: str, switch: str, torch_bound: bool, room: int = 80) -> str:
    """The method's source at indentation 0; its docstring wrapped to `room` columns (the
    project's line length less the method body's indentation)."""
    missing = "not isinstance(topk_indices_buffer, torch.Tensor)" if torch_bound else "topk_indices_buffer is None"
    annotation = ": torch.Tensor" if torch_bound else ""
    summary = "Gather the top-k indices at `slot_ids` to the front of each buffer."
    if len(summary) + 3 > room:
        summary = "Compact the shared top-k indices to one row per request."
    detail = textwrap.fill(
        f"Draft steps after `{switch}(True)` read one row per request; step 0 wrote one row "
        "per token. Layers that share a buffer hold the same storage: it is gathered once.",
        max(room, 40),
        break_long_words=False,
        break_on_hyphens=False,
    ).replace("\n", "\n    ")
    return f'''
def {compaction}(self, slot_ids{annotation}) -> None:
    """{summary}

    {detail}
    """
    num_slots = slot_ids.numel()
    # storage addresses of the buffers gathered so far
    gathered = set()
    for module in self.modules():
        for holder in (module, getattr(module, "impl", None)):
            topk_indices_buffer = getattr(holder, "{BUFFER_ATTR}", None)
            if {missing}:
                continue
            if topk_indices_buffer.data_ptr() in gathered:
                continue
            gathered.add(topk_indices_buffer.data_ptr())
            topk_indices_buffer[:num_slots] = topk_indices_buffer[slot_ids]
'''


def _is_torch_module(info) -> bool:
    """Whether the class derives from `torch.nn.Module`, as resolved or as spelled."""
    for sym in info.mro():
        if sym.kind != "class" and (sym.name in _MODULE_BASES or sym.name.endswith("nn.Module")):
            return True
    return any(
        spelled in ("nn.Module", "torch.nn.Module") for cls in info.classes() for spelled in cls.base_spellings()
    )
