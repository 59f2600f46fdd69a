"""IC005's fix: the metadata built again inside the draft step, from the advanced inputs.

vLLM 0.21.0 (PR #41162) fixed the model runner v2 draft loop of 0.18.0-0.20.0 this way: each
step builds its attention metadata (`attn_metadata = self._build_draft_attn_metadata(...)`)
before its forward, so the forward sees the positions and lengths the previous step advanced.

- Built in this function (`md = build(...)` before the loop, once, or on the first step
  only): the same build, right before the forward in the loop. A build already inside the
  loop in the wrong place is moved there instead of repeated (an `if step == 1:` around it
  goes with it: the build now runs every step).
- Passed in by the callers (a parameter, as in vLLM's `generate_draft`): the function gets a
  `rebuild_<md>=None` parameter and calls it before the forward while the metadata is set;
  each call site in the same file passes the very build it made the metadata with, evaluated
  again at every step: `md = build(...)` becomes `def build_draft_md(): return build(...)`
  and `md = build_draft_md()`, and the call passes `rebuild_<md>=build_draft_md` (one build,
  written once); a call of the class's own helper (`self._build_md(...)`, vLLM 0.19.0+), or a
  build written in the call itself, is passed as `lambda: <build>`.

No fix when the build cannot be found (a caller in another file, metadata that arrives
through an attribute set elsewhere, or several different builds), or when a name the build
reads changes between the build and the call. A function that is passed around rather than
called (a CUDA graph capture) keeps building once: the default `None` leaves it as it was.
"""

from __future__ import annotations

import ast

from invariant_check.analysis.facts import ref, walk_local
from invariant_check.analysis.fields import call_argument, callers, canonical, local_aliases
from invariant_check.analysis.objects import container_copy_of, copy_of
from invariant_check.api.edits import (
    Editor,
    add_import_from,
    add_keywords,
    add_parameter,
    block_of,
    parents_of,
    statement_holding,
)
from invariant_check.api.layout import trailing_comment
from invariant_check.api.types import UNSAFE, Edit, Fix

_WHY = "# Rebuild the metadata from the inputs the previous step advanced."


def build(rule, report, view) -> Fix | None:
    loop = report.node
    data = report.data or {}
    md = data.get("metadata")
    forward_text = (data.get("forward") or "").removesuffix("(...)")
    if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)) or not md or not forward_text:
        return None
    func = view.node
    ed = Editor(view.source)
    aliases = local_aliases(func)
    forward = _forward_call(ed, loop, forward_text, md, aliases, data.get("forward_line"))
    if forward is None:
        return None
    anchor = statement_holding(func, forward)
    if anchor is None or not _inside(loop, anchor):
        return None
    local = _local_build(func, md, aliases, anchor)
    if local is not None:
        return _rebuild_here(ed, func, loop, anchor, local, md)
    params = _params(func)
    if md in params and view.info is not None:
        return _rebuild_from_callers(ed, view, func, loop, anchor, md, params.index(md))
    return None


def _later_steps(loop: ast.AST) -> str | None:
    """The test that is true on every step but the first of `for v in range(a, ...)`
    (`v > a`): the metadata the step starts with was built for the first one."""
    if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Name):
        return None
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords):
        return None
    if not 1 <= len(it.args) <= 3 or any(isinstance(a, ast.Starred) for a in it.args):
        return None
    if len(it.args) == 3 and not (isinstance(it.args[2], ast.Constant) and isinstance(it.args[2].value, int) and it.args[2].value > 0):
        return None
    start = ast.unparse(it.args[0]) if len(it.args) >= 2 else "0"
    return f"{loop.target.id} > {start}"


# -- the forward and the build ----------------------------------------------------------------------


def _forward_call(ed: Editor, loop: ast.AST, text: str, md: str, aliases, line: int | None = None) -> ast.Call | None:
    """The first call in the loop spelled as the finding's forward that receives `md`: the
    one on the finding's `line` first (a CUDA-graph `else:` beside an eager branch that
    already rebuilds)."""
    calls = [c for c in ast.walk(loop) if isinstance(c, ast.Call)]
    calls.sort(key=lambda c: (c.lineno != line, c.lineno, c.col_offset))
    for call in calls:
        if " ".join(ed.node_text(call.func).split()) != text:
            continue
        passed = list(call.args) + [kw.value for kw in call.keywords]
        if any(canonical(ref(a), aliases) == md for a in passed if ref(a)):
            return call
    return None


def _local_build(func: ast.AST, md: str, aliases, anchor: ast.stmt) -> ast.Assign | None:
    """The last `md = <call>(...)` of the function before the forward."""
    best = None
    for sub in walk_local(func):
        if (
            isinstance(sub, ast.Assign)
            and len(sub.targets) == 1
            and isinstance(sub.value, ast.Call)
            and canonical(ref(sub.targets[0]), aliases) == md
            and sub.lineno < anchor.lineno
            # a copy (`dict(md)`, `copy.copy(md)`) holds the old entries: no build
            and copy_of(sub.value, aliases) is None
            and not container_copy_of(sub.value)
        ):
            if best is None or sub.lineno > best.lineno:
                best = sub
    return best


def _inside(outer: ast.AST, node: ast.AST) -> bool:
    return any(sub is node for sub in ast.walk(outer)) and outer is not node


def _params(func: ast.AST) -> list[str]:
    args = getattr(func, "args", None)
    if args is None:
        return []
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


# -- a build of this function ------------------------------------------------------------------------


def _rebuild_here(ed: Editor, func: ast.AST, loop: ast.AST, anchor: ast.stmt, build: ast.Assign, md: str) -> Fix | None:
    if ed.indent_of(build) is None or not ed.ends_its_line(build):
        return None
    code = ed.node_text(build)
    first_indent = ed.indent_of(build)
    code = _dedent_continuations(code, first_indent)
    edits: list[Edit] = []
    verb = "Build"
    if _inside(loop, build) and not _other_branch(func, build, anchor):
        removal = _remove_build(ed, func, build)
        if removal is None:
            return None
        edits.append(removal)
        verb = "Move"
    insert = _insert_before(ed, anchor, f"{_WHY}\n{code}\n")
    if insert is None:
        return None
    edits.append(insert)
    if any(_overlap_lines(a, b) for i, a in enumerate(edits) for b in edits[i + 1 :]):
        return None
    what = f"{verb} `{md}` {'again ' if verb == 'Build' else ''}right before the forward of each step"
    return Fix(UNSAFE, what, tuple(edits))


def _other_branch(func: ast.AST, a: ast.stmt, b: ast.stmt) -> bool:
    """Whether `a` and `b` sit in the two branches of one `if` (the eager build beside the
    CUDA-graph `else:`): the build stays where it is, and is written again."""
    for sub in walk_local(func):
        if isinstance(sub, ast.If) and sub.orelse:
            in_body = [any(n is x for st in sub.body for n in ast.walk(st)) for x in (a, b)]
            in_else = [any(n is x for st in sub.orelse for n in ast.walk(st)) for x in (a, b)]
            if (in_body[0] and in_else[1]) or (in_else[0] and in_body[1]):
                return True
    return False


def _remove_build(ed: Editor, func: ast.AST, build: ast.stmt) -> Edit | None:
    """Remove a build that sits in the loop: its lines, or the `if` that only holds it."""
    found = block_of(func, build)
    if found is None:
        return None
    block, _ = found
    target = build
    if len(block) == 1:
        parent = parents_of(func).get(id(build))
        if not isinstance(parent, ast.If) or parent.orelse or parent.body is not block:
            return None
        if any(isinstance(n, ast.Call) for n in ast.walk(parent.test)):
            return None
        outer = block_of(func, parent)
        if outer is None or len(outer[0]) < 2:
            return None
        target = parent  # `if step == 1: md = build(...)`: the build now runs every step
    if ed.indent_of(target) is None or not ed.ends_its_line(target):
        return None
    last = target.end_lineno or target.lineno
    if last >= ed.line_count:
        return None
    return Edit(target.lineno, 1, last + 1, 1, "")


def _overlap_lines(a: Edit, b: Edit) -> bool:
    return a.start < b.end and b.start < a.end


def _insert_before(ed: Editor, stmt: ast.stmt, code: str) -> Edit | None:
    """Before a statement and the comment lines right above it (they describe it)."""
    edit = ed.insert_before(stmt, code)
    if edit is None:
        return None
    indent = ed.indent_of(stmt)
    line = edit.line
    while line > 1 and ed.line(line - 1).startswith(indent) and ed.line(line - 1).strip().startswith("#"):
        line -= 1
    return Edit(line, 1, line, 1, edit.content)


def _dedent_continuations(code: str, indent: str) -> str:
    """A statement's source with its continuation lines relative to its first line."""
    lines = code.split("\n")
    return "\n".join([lines[0]] + [l[len(indent):] if l.startswith(indent) else l for l in lines[1:]])


# -- a build of the callers --------------------------------------------------------------------------


def _rebuild_from_callers(ed: Editor, view, func: ast.AST, loop: ast.AST, anchor: ast.stmt, md: str, index: int) -> Fix | None:
    fn = view.info
    sites = callers(view, fn)
    if not sites or any(site.caller.module is not view.module for site in sites):
        return None  # no caller, or one in another file: the build is not this file's to move
    rebuild = _fresh(func, f"rebuild_{md.rsplit('.', 1)[-1]}")
    edits: list[Edit] = []
    annotation, imports = _annotation(ed, view, func, md)
    taken: set[str] = set()
    for site in sites:
        arg = call_argument(site.call, fn, index)
        if arg is None:
            return None
        if any(kw.arg == rebuild for kw in site.call.keywords):
            return None
        closure = _closure_for(ed, view, site, arg, md, _returned(ed, func, md), taken)
        if closure is not None:
            # the build bound to a local moves into a function of the caller, called there
            # and handed over: one build, written once
            name, moved = closure
            edit = add_keywords(ed, site.call, [f"{rebuild}={name}"])
            if edit is None:
                return None
            edits += moved
            edits.append(edit)
            continue
        built = _build_for(ed, site, arg)
        if built is None:
            return None
        # the copy without the comments of the original (they stay there); laid out
        # afterwards as the project's formatter would (`invariant_check.api.layout`)
        built = "\n".join(l[: len(l) - len(trailing_comment(l))].rstrip() if trailing_comment(l) else l for l in built.split("\n"))
        edit = add_keywords(ed, site.call, [f"{rebuild}=lambda: {built}"])
        if edit is None:
            return None
        edits.append(edit)
    param = add_parameter(ed, func, f"{rebuild}{annotation}" + (" = None" if annotation else "=None"))
    if param is None:
        return None
    edits.append(param)
    edits += imports
    spelled = md
    later = _later_steps(loop)
    test = f"{later} and " if later else ""
    code = f"{_WHY}\nif {test}{spelled} is not None and {rebuild} is not None:\n    {spelled} = {rebuild}()\n"
    insert = _insert_before(ed, anchor, code)
    if insert is None:
        return None
    edits.append(insert)
    edits.sort(key=lambda e: (e.start, e.end))
    if any(_overlap_lines(a, b) for a, b in zip(edits, edits[1:])):
        return None
    n = len(sites)
    replayed = _captured(view, func)
    return Fix(
        UNSAFE,
        f"Rebuild `{md}` right before the forward of each step after the first: `{fn.short}` takes "
        f"`{rebuild}`, {'its caller passes' if n == 1 else f'its {n} callers pass'} the build"
        + (
            f"; not fixed: the CUDA graph captured from `{fn.short}` (line {replayed}) replays every "
            "step with the metadata of its capture: capture one step and rebuild before each replay, "
            "as vLLM 0.21.0 does"
            if replayed
            else ""
        ),
        tuple(edits),
    )


def _captured(view, func: ast.AST) -> int | None:
    """The line where the class hands this method to a graph capture (`m.capture(self.f,
    ...)`): a replay of that graph runs the steps without calling the method."""
    name = getattr(func, "name", None)
    text = view.source.text
    if not name:
        return None
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and "capture" in node.func.attr:
            for a in node.args:
                if isinstance(a, ast.Attribute) and a.attr == name and isinstance(a.value, ast.Name) and a.value.id == "self":
                    return node.lineno
    return None


def _annotation(ed: Editor, view, func: ast.AST, md: str) -> tuple[str, list[Edit]]:
    """`: Callable[[], <md's annotation>] | None` when the parameters are annotated, with
    the import of `Callable` the module lacks; "" when they are not."""
    args = func.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    ann = next((p.annotation for p in params if p.arg == md), None)
    if ann is None:
        return "", []
    base = ed.node_text(ann)
    if "\n" in base:
        return "", []
    bound = view.module.bindings().bindings
    if "Callable" in bound:
        return f": Callable[[], {base}] | None", []
    edit = add_import_from(ed, "collections.abc", "Callable")
    if edit is None:
        return "", []
    return f": Callable[[], {base}] | None", [edit]



def _returned(ed: Editor, func: ast.AST, md: str) -> str:
    """` -> <md's annotation>` for the function holding a moved build, "" when the metadata
    parameter is not annotated (nor are its neighbours, then)."""
    args = func.args
    ann = next((p.annotation for p in args.posonlyargs + args.args + args.kwonlyargs if p.arg == md), None)
    if ann is None:
        return ""
    text = ed.node_text(ann)
    return "" if "\n" in text else f" -> {text}"


def _single_build(site, name: str) -> ast.Assign | ast.AnnAssign | None:
    """The one `name = <call>(...)` of the caller before the call site, when nothing else
    binds `name` there (`None` aside) and nothing the build reads is bound again before the
    call."""
    caller = site.node
    builds, others = [], []
    for sub in walk_local(caller):
        if isinstance(sub, (ast.Assign, ast.AnnAssign)):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                value = sub.value
                if isinstance(value, ast.Call):
                    builds.append(sub)
                elif not (isinstance(value, ast.Constant) and value.value is None):
                    others.append(sub)
        elif isinstance(sub, (ast.AugAssign, ast.For, ast.With, ast.NamedExpr)):
            if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(sub)):
                others.append(sub)
    if len(builds) != 1 or others or builds[0].lineno > site.call.lineno:
        return None
    if not _reads_stay(caller, builds[0].value, builds[0].lineno, site.call.lineno):
        return None
    return builds[0]


def _reads_stay(caller: ast.AST, build: ast.AST, since: int, until: int) -> bool:
    """Whether every name the build reads means the same when it runs again at the call."""
    reads = {n.id for n in ast.walk(build) if isinstance(n, ast.Name)}
    for sub in walk_local(caller):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and sub.id in reads and since < sub.lineno <= until:
            return False
    return True


_NOT_MOVABLE = (ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Lambda)


def _closure_for(ed: Editor, view, site, arg: ast.AST, md: str, returns: str, taken: set[str]) -> tuple[str, list[Edit]] | None:
    """`md = build(...)` in the caller made `def <f>(): return build(...)` and `md = <f>()`,
    so that the call site hands `<f>` over: the build is moved, not copied. The function goes
    right where the build was, or, when the call is outside the block that holds the build
    (an `if` around it), before that block's outermost statement in the call's block: it
    runs only after the build's inputs exist, as the rebuild runs only while the metadata is
    set. None when the build is a call of the class's own helper (`self._build_md(...)`:
    calling it again is the idiom), is not a single statement of its own, or cannot move into
    a function (an `await`, a `yield`, a walrus, a bare `super()`)."""
    if not isinstance(arg, ast.Name):
        return None
    stmt = _single_build(site, arg.id)
    if stmt is None or not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
        return None
    value = stmt.value
    f = value.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
        return None  # the class's own build helper: the call site calls it again (a lambda)
    for n in ast.walk(value):
        if isinstance(n, _NOT_MOVABLE):
            return None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super" and not n.args:
            return None
        if isinstance(n, ast.Name) and n.id == arg.id:
            return None
    caller = site.node
    indent = ed.indent_of(stmt)
    if indent is None or not ed.ends_its_line(stmt):
        return None
    holder = _common_holder(caller, stmt, statement_holding(caller, site.call))
    if holder is None:
        return None
    bound = set(view.module.bindings().bindings)
    used = {n.id for n in ast.walk(caller) if isinstance(n, ast.Name)} | set(_params(caller)) | bound | taken
    name = f"build_draft_{md.rsplit('.', 1)[-1]}".replace("draft_draft_", "draft_")
    base, i = name, 2
    while name in used:
        name, i = f"{base}{i}", i + 1
    taken.add(name)
    text = ed.node_text(value)
    lines = text.split("\n")
    # continuation lines keep their place relative to the first, one level deeper
    body = "\n".join([lines[0]] + [("    " + l) if l.strip() else l for l in lines[1:]])
    if holder is stmt:
        first_line = _leading_comments(ed, stmt, indent)
        edits = []
        if _needs_blank_before(ed, caller, stmt, first_line):
            edits.append(Edit(first_line, 1, first_line, 1, "\n"))
        target = ed.node_text(stmt.targets[0])
        code = f"def {name}(){returns}:\n{indent}    return {body}\n\n{indent}{target} = {name}()"
        edits.append(ed.replace(stmt, code))
        return name, edits
    hindent = ed.indent_of(holder)
    if hindent is None:
        return None
    # moved out of the block around it: one level less deep
    shift = len(indent) - len(hindent)
    moved = "\n".join([lines[0]] + [l[shift:] if l[:shift].strip() == "" else l for l in lines[1:]])
    moved = "\n".join([moved.split("\n")[0]] + [("    " + l) if l.strip() else l for l in moved.split("\n")[1:]])
    first_line = _leading_comments(ed, holder, hindent)
    blank = "\n" if _needs_blank_before(ed, caller, holder, first_line) else ""
    code = f"{blank}{hindent}def {name}(){returns}:\n{hindent}    return {moved}\n\n"
    return name, [Edit(first_line, 1, first_line, 1, code), ed.replace(value, f"{name}()")]


def _common_holder(caller: ast.AST, stmt: ast.stmt, call_stmt: ast.stmt | None) -> ast.stmt | None:
    """The statement holding `stmt` (itself or an enclosing one) in the innermost block that
    also holds the call after it; None when there is none or a loop lies between them."""
    if call_stmt is None:
        return None
    parents = parents_of(caller)
    cur: ast.AST = stmt
    while cur is not caller:
        found = block_of(caller, cur)
        if found is None:
            return None
        block, i = found
        if any(s is call_stmt or _inside(s, call_stmt) for s in block[i + 1 :]):
            return cur
        if _inside(cur, call_stmt):
            return None
        parent = parents.get(id(cur))
        if parent is None or isinstance(parent, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # a loop runs the build again, a `with` or `try` guards it: it stays there
            return None
        cur = parent
    return None


def _leading_comments(ed: Editor, stmt: ast.stmt, indent: str) -> int:
    """The first line of the comment lines right above a statement (they describe it)."""
    line = stmt.lineno
    while line > 1 and ed.line(line - 1).startswith(indent) and ed.line(line - 1).strip().startswith("#"):
        line -= 1
    return line


def _needs_blank_before(ed: Editor, caller: ast.AST, stmt: ast.stmt, first_line: int) -> bool:
    """Whether a function put at `first_line` needs the blank line the formatter puts before
    a nested `def` (none at the start of a block, nor after a blank line)."""
    found = block_of(caller, stmt)
    if found is None or found[1] == 0:
        return False
    return first_line > 1 and ed.line(first_line - 1).strip() != ""


def _build_for(ed: Editor, site, arg: ast.AST) -> str | None:
    """The build the caller passed, as its source (later lines relative to the first), or
    None when it is not a build of its own."""
    caller = site.node
    if isinstance(arg, ast.Call):
        build = arg
        since = arg.lineno
    elif isinstance(arg, ast.Name):
        found = _single_build(site, arg.id)
        if found is None:
            return None
        build = found.value
        since = found.lineno
    else:
        return None
    # what the build reads must mean the same when the lambda runs
    if not _reads_stay(caller, build, since, site.call.lineno):
        return None
    text = ed.node_text(build)
    if "\n" in text:
        first = ed.line(build.lineno)
        indent = first[: len(first) - len(first.lstrip())]
        lines = text.split("\n")
        text = "\n".join([lines[0]] + [l[len(indent):] if l.startswith(indent) else l for l in lines[1:]])
    return text


def _fresh(func: ast.AST, name: str) -> str:
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | set(_params(func))
    out, i = name, 2
    while out in used:
        out, i = f"{name}{i}", i + 1
    return out
