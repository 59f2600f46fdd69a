"""The project: its root, its modules, and names resolved through imports across them.

Modules are loaded lazily, and only the chunks a question needs are parsed: asking for the
bases of `pkg.mtp.Predictor` parses that class's head in `pkg/mtp.py` and the import lines of
the module, not the rest. Facts of parsed chunks are cached by file content (`FactStore`).

Resolution follows Python: a name is a function-local binding, a parameter (typed by its
annotation, `self` by its class), an import of the module or a definition in it; attributes
go through modules, classes (their MRO) and instances (`self.x = SomeClass(...)` anywhere in
the class's methods). Only where nothing binds a name does the short-name fallback look for a
class or function of that name anywhere in the project, and the result says so
(`Symbol.via == "short-name"`).
"""

from __future__ import annotations

import ast
import bisect
import builtins
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from . import facts as F
from .deps import Tracker
from .environment import Environment
from .linearize import c3_merge
from .outline import (
    CLASS,
    DEF,
    HEAD,
    Chunk,
    ChunkSyntaxError,
    Outline,
    build,
    parse_chunk,
)
from .source import DecodeError, Source, decode

BUILTINS = frozenset(dir(builtins))
MAX_DEPTH = 12  # alias chains and MRO walks; real code is far shallower
# whole words in the bytes of files: `\w` of a bytes pattern is an ASCII letter, digit or `_`
_BYTES_WORD = re.compile(rb"\w+")
# chunks parsed for their facts alone whose trees are kept a while (see `hold_briefly`): enough
# for one question's reach (a call resolved, its callee read), a few MB of trees
BRIEF_TREES = 128
_INDEX_WORDS_AFTER = 8  # words searched for file by file before the files' words are indexed


# -- symbols -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Symbol:
    """What a ref names. `kind`: module, class, instance (a value of a known class), function,
    external (outside the project: its dotted name), unknown."""

    kind: str
    name: str  # dotted: module name + qualname, or the external spelling
    module: "Module | None" = None
    qual: str | None = None
    via: str = "import"  # import | local | short-name

    @property
    def is_known(self) -> bool:
        return self.kind in ("module", "class", "instance", "function")


UNKNOWN = Symbol("unknown", "?")


# -- modules -------------------------------------------------------------------------------------


class FactStore:
    """Where chunk facts are kept between runs (the engine backs it with its cache)."""

    def get(self, digest: str) -> dict | None:
        return None

    def put(self, digest: str, chunk_facts: dict) -> None:
        pass

    # whole-word questions about files (who calls a function), answered without reading
    # the files when their bytes are known from an earlier run
    def known_digest(self, path: Path) -> str | None:
        """The digest of the file's current bytes when known without reading them."""
        return None

    keeps_words = False  # whether `put_word` keeps anything (else no digest is computed for it)

    def remember_digest(self, path: Path, digest: str) -> None:
        """The digest of a file just read from disk, for `known_digest` to answer later."""

    def holds_word(self, digest: str, word: str) -> bool | None:
        return None

    def put_word(self, digest: str, word: str, present: bool) -> None:
        pass


@dataclass
class ChunkFacts:
    functions: dict[str, F.FunctionFacts]
    classes: dict[str, F.ClassFacts]
    module: F.ModuleFacts

    def to_json(self) -> dict:
        return {
            "functions": [F.to_json(f) for f in self.functions.values()],
            "classes": [F.to_json(c) for c in self.classes.values()],
            "module": F.to_json(self.module),
        }

    @classmethod
    def from_json(cls, raw: dict) -> ChunkFacts:
        funcs = [F.function_from_json(f) for f in raw["functions"]]
        classes = [F.ClassFacts(**c) for c in raw["classes"]]
        return cls({f.qual: f for f in funcs}, {c.qual: c for c in classes}, F.ModuleFacts(**raw["module"]))


class Module:
    """One file of the project, loaded as far as questions need."""

    def __init__(self, project: "Project", path: Path, name: str | None, data: bytes | None = None) -> None:
        self.project = project
        self.path = path
        self.name = name or path.stem
        self._data = data
        self._source: Source | None = None
        self._outline: Outline | None = None
        self._stmts: dict[int, tuple[list[ast.stmt], list[ast.stmt]]] = {}
        self._passing: set[int] = set()  # chunks in `_stmts` held only by `Project.hold_briefly`
        self._facts: dict[int, ChunkFacts] = {}
        self._bindings: F.ModuleFacts | None = None
        self.digest: str | None = None
        self.error: str | None = None  # why it could not be read, decoded or parsed
        self._whole: list[ast.stmt] | None = None  # the file parsed whole (chunks failed)
        self._stored: dict | None = None
        self._code_chunks: tuple[Outline, list[Chunk]] | None = None
        self.origin = "project"  # or extra, environment, bundled (see `environment`)

    # loading
    @property
    def data(self) -> bytes:
        if self._data is None:
            try:
                self._data = self.project.read(self.path)
            except OSError as exc:
                # gone or unreadable since it was listed: it holds nothing, and says why
                self._data = b""
                reason = "file disappeared while linting" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
                self.error = f"cannot read: {reason}"
        return self._data

    def _touch(self) -> None:
        self.project.tracker.note(("file", str(self.path)))

    @property
    def source(self) -> Source:
        self._touch()
        if self._source is None:
            data = self.data
            try:
                text = decode(data)
            except DecodeError as exc:
                self.error = self.error or f"cannot decode: {exc}"
                text = ""
            self._source = Source(self.project.display(self.path), text)
            if self.digest is not None:
                # the text is what every question reads from now on: the bytes (as large
                # again) are let go once their digest is known
                self._data = None
        return self._source

    @property
    def outline(self) -> Outline:
        self._touch()
        if self._outline is None:
            self._outline = build(self.source.text)
        return self._outline

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    def chunk_named(self, qual: str) -> Chunk | None:
        """The chunk that holds the definition `qual` (`f`, `C`, `C.m`): from the outline, or
        the chunk of module code that defines it (inside an `if` or `try` block)."""
        head, _, rest = qual.partition(".")
        ol = self.outline
        if ol.whole:
            return ol.chunks[0]
        top = ol.named(head)
        if not top:
            for chunk in self.module_code_chunks():
                found = self.chunk_facts(chunk)
                if head in found.classes or head in found.functions:
                    return chunk
            return None
        chunk = top[-1]  # a later definition of the same name wins, as at run time
        if rest and chunk.kind == CLASS:
            member = rest.split(".", 1)[0]
            subs = ol.child_named(chunk, member)
            if subs:
                return subs[-1]
            # a method defined inside an `if`/`try` of the class body (`if HAS_TRITON: def
            # m(...)`): in the class-body code after a method, the last such definition
            method = f"{head}.{member}"
            for sub in reversed(ol.children(chunk)):
                if sub.extra_class and method in self.chunk_facts(sub).functions:
                    return sub
        return chunk

    def module_code_chunks(self) -> list[Chunk]:
        """The chunks holding module-level code besides definitions (the head, code after a
        definition), classes split so that the code after a class is found."""
        ol = self.outline
        if ol.whole:
            return [ol.chunks[0]]
        if self._code_chunks is not None and self._code_chunks[0] is ol:
            return self._code_chunks[1]
        out = []
        for chunk in ol.top():
            if chunk.kind == HEAD:
                out.append(chunk)
            elif chunk.extra_module:
                subs = ol.children(chunk) if chunk.kind == CLASS else []
                tail = [c for c in subs if c.extra_module]
                out.extend(tail if tail else [chunk])
        self._code_chunks = (ol, out)
        return out

    def leaf_chunks(self, need=None) -> Iterator[Chunk]:
        """Every chunk that holds definitions, classes split into methods; with `need`, only
        those whose text may satisfy it (a class is split only if its whole text may).

        A need that names its anchors (a word's occurrences) is asked only of the chunks that
        hold one: the others cannot meet it, and a file of N definitions asked about each of
        their names is then read in O(N) chunk questions, not O(N^2)."""
        ol = self.outline
        text = ol.text
        ol.exclude_prose()
        anchors = need.anchors(text) if need is not None else None
        if anchors is None:
            tops = ol.top()
        else:
            tops = []
            for at in anchors:
                chunk = ol.top_at(at)
                if chunk is not None and (not tops or tops[-1] is not chunk):
                    tops.append(chunk)
        for chunk in tops:
            if need is not None and not need.holds(text, chunk.start, max(chunk.end, chunk.span_end)):
                continue
            subs = ol.children(chunk) if chunk.kind == CLASS and not ol.whole else []
            if need is None or not subs or need.holds(text, chunk.start, chunk.end):
                yield chunk
            if anchors is not None and subs:
                subs = _holding(ol, chunk, anchors)
            for sub in subs:
                if need is None or need.holds(text, sub.start, sub.end):
                    yield sub

    def statements(self, chunk: Chunk) -> tuple[list[ast.stmt], list[ast.stmt]]:
        """The parsed statements of a chunk (its own level, module code after it)."""
        self._touch()
        got = self._stmts.get(chunk.index)
        if got is not None and chunk.index in self._passing:
            self._passing.discard(chunk.index)  # asked again: kept from now on
        if got is None:
            if chunk.kind == CLASS and chunk.parent is None:
                self.outline.children(chunk)  # a class is parsed as its split head
            if self._whole is not None:
                got = self._from_whole(chunk)
            else:
                try:
                    got = parse_chunk(self.source.text, chunk, str(self.path))
                except ChunkSyntaxError:
                    got = self._from_whole(chunk)
            self._stmts[chunk.index] = got
        return got

    def _from_whole(self, chunk: Chunk) -> tuple[list[ast.stmt], list[ast.stmt]]:
        """A chunk that does not parse alone: parse the file whole (once) and treat it as one
        chunk from now on."""
        if self._whole is None:
            try:
                tree = compile(self.source.text, str(self.path), "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
                self._whole = list(tree.body)
            except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
                self._whole = []
                self.error = syntax_message(exc)
            self._outline = Outline(self.source.text, [Chunk(0, HEAD, None, 0, len(self.source.text), 1, 0)], whole=True)
            self._stmts = {0: (self._whole, [])}
            self._passing = set()
            self._facts = {}
        return self._whole, []

    # facts
    def chunk_facts(self, chunk: Chunk) -> ChunkFacts:
        self._touch()
        got = self._facts.get(chunk.index)
        if got is not None:
            return got
        stored = self._stored_facts()
        if chunk.kind == CLASS and chunk.parent is None:
            self.outline.children(chunk)  # facts of a class head are those of the split head
        key = chunk.key
        # a whole-file outline (built so from the bytes, or recorded as such) names its one
        # chunk as the head: its facts are those stored; an outline turned whole by a parse that
        # failed in this run reads them only once the store knows the file is whole
        if stored is not None and key in stored and (not self.outline.whole or self._whole is None or stored.get("whole")):
            raw = stored[key]
            if isinstance(raw, ChunkFacts):
                got = raw
            else:
                try:
                    got = ChunkFacts.from_json(raw)
                except (KeyError, TypeError, ValueError):
                    got = None
        if got is None:
            got = self._compute_facts(chunk)
            if self._whole is not None:
                self.project.store_facts(self, "whole", True)
            self.project.store_facts(self, chunk.key if self._whole is None else self.outline.chunks[0].key, got)
        self._facts[chunk.index] = got
        return got

    def _stored_facts(self) -> dict | None:
        if self._stored is None:
            stored = self.project.stored_facts(self)
            self._stored = stored if isinstance(stored, dict) else {}
            if self._stored.get("whole") and not (self._outline is not None and self._outline.whole):
                # an earlier run found that its chunks do not parse alone
                self._outline = Outline(self.source.text, [Chunk(0, HEAD, None, 0, len(self.source.text), 1, 0)], whole=True)
        return self._stored

    def release_trees(self) -> None:
        """After the module's own analysis: the trees it kept are held briefly from now on
        (the last `BRIEF_TREES` such chunks stay; a later question parses again)."""
        if self._whole is not None:
            return
        for index in list(self._stmts):
            if index not in self._passing:
                self._passing.add(index)
                self.project.hold_briefly(self, index)

    def _compute_facts(self, chunk: Chunk) -> ChunkFacts:
        # a chunk parsed only for its facts is kept briefly: most are never asked again (the
        # modules a call or an import reaches), and their trees were most of a run's memory;
        # but a question that reads a module's facts often reads its trees right after (a
        # call resolved, then the callee read). One asked again is kept from then on.
        kept = chunk.index in self._stmts or self._whole is not None
        own, trailing = self.statements(chunk)
        if not kept and self._whole is None:
            self._passing.add(chunk.index)
            self.project.hold_briefly(self, chunk.index)
        if self._whole is not None:
            chunk = self.outline.chunks[0]
            own, trailing = self._whole, []
        prefix, cls_qual = "", None
        if chunk.parent is not None:
            cls_qual = self.outline.chunks[chunk.parent].name
            prefix = cls_qual + "."
        functions: dict[str, F.FunctionFacts] = {}
        classes: dict[str, F.ClassFacts] = {}
        for stmts, pre, cls in ((own, prefix, cls_qual), (trailing, "", None)):
            for qual, owner, node in F.definitions(stmts, pre, cls):
                if isinstance(node, ast.ClassDef):
                    methods = ()
                    if chunk.kind == CLASS and chunk.parent is None and node.name == chunk.name:
                        methods = [c.name for c in self.outline.children(chunk) if c.name]
                    classes[qual] = F.class_facts(node, qual, methods)
                else:
                    functions[qual] = F.function_facts(node, qual, owner)
        module = F.module_facts(own if chunk.parent is None else trailing)
        if chunk.parent is not None and cls_qual is not None:
            # class-body statements after the method: attributes of the class
            members = F.class_facts(ast.ClassDef(name=cls_qual, bases=[], keywords=[], body=own, decorator_list=[], lineno=0), cls_qual)
            members.methods = []
            classes.setdefault("<members>", members)
        return ChunkFacts(functions, classes, module)

    def bindings(self) -> F.ModuleFacts:
        """Every name the module binds at its top level."""
        self._touch()
        if self._bindings is None:
            out = F.ModuleFacts()
            ol = self.outline
            for chunk in ol.chunks:
                if chunk.parent is None and chunk.kind in (DEF, CLASS) and chunk.name:
                    out.bindings.setdefault(chunk.name, []).append([chunk.kind, chunk.name])
            for chunk in self.module_code_chunks():
                mf = self.chunk_facts(chunk).module
                for name, hows in mf.bindings.items():
                    out.bindings.setdefault(name, []).extend(hows)
                out.stars.extend(mf.stars)
            self._bindings = out
        return self._bindings

    # definitions
    def function(self, qual: str) -> "FunctionInfo | None":
        chunk = self.chunk_named(qual)
        if chunk is None:
            return None
        facts = self.chunk_facts(chunk).functions.get(qual)
        if facts is None and self.outline.whole:
            facts = self.chunk_facts(self.outline.chunks[0]).functions.get(qual)
        if facts is None:
            return None
        return FunctionInfo(self, facts)

    def klass(self, qual: str) -> "ClassInfo | None":
        chunk = self.chunk_named(qual)
        if chunk is None:
            return None
        facts = self.chunk_facts(chunk).classes.get(qual)
        if facts is None:
            return None
        return self.project.class_info(self, facts)

    def class_chunks(self, qual: str) -> list[Chunk]:
        chunk = self.chunk_named(qual.split(".", 1)[0])
        if chunk is None:
            return []
        if self.outline.whole or chunk.kind != CLASS:
            return [chunk]
        return [chunk] + self.outline.children(chunk)

    def node_of(self, info: "FunctionInfo") -> ast.AST | None:
        """The `ast` node of a function of this module."""
        chunk = self.chunk_named(info.qual) if not self.outline.whole else self.outline.chunks[0]
        if chunk is None:
            return None
        own, trailing = self.statements(chunk)
        if self._whole is not None:
            own, trailing = self._whole, []
        prefix, cls_qual = "", None
        if chunk.parent is not None and not self.outline.whole:
            cls_qual = self.outline.chunks[chunk.parent].name
            prefix = cls_qual + "."
        for stmts, pre, cls in ((own, prefix, cls_qual), (trailing, "", None)):
            for qual, _, node in F.definitions(stmts, pre, cls):
                if qual == info.qual and not isinstance(node, ast.ClassDef):
                    return node
        return None


def _holding(ol: Outline, cls: Chunk, anchors: list[int]) -> list[Chunk]:
    """The chunks of a split top-level class that hold one of the (sorted) anchors, in order."""
    lo = bisect.bisect_left(anchors, cls.start)
    hi = bisect.bisect_left(anchors, max(cls.end, cls.span_end))
    out: list[Chunk] = []
    for at in anchors[lo:hi]:
        sub = ol.child_at(cls, at)
        if sub is not None and (not out or out[-1] is not sub):
            out.append(sub)
    return out


def syntax_message(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"syntax error: {' '.join(str(exc.msg).split()) or 'invalid syntax'}"
    if isinstance(exc, (RecursionError, MemoryError)):
        return "cannot parse: nesting too deep"
    return f"cannot parse: {' '.join(str(exc).split())}"


# -- classes and functions -------------------------------------------------------------------


@dataclass
class FunctionInfo:
    module: Module
    facts: F.FunctionFacts

    @property
    def qual(self) -> str:
        return self.facts.qual

    @property
    def name(self) -> str:
        return f"{self.module.name}.{self.facts.qual}"

    @property
    def short(self) -> str:
        return self.facts.qual.rsplit(".", 1)[-1]

    @property
    def opaque(self) -> bool:
        """A bundled model's function whose body is not modelled (`...`)."""
        return self.facts.ellipsis and self.module.origin == "bundled"

    def node(self) -> ast.AST | None:
        return self.module.node_of(self)

    def owner(self) -> "ClassInfo | None":
        if self.facts.cls is None:
            return None
        return self.module.klass(self.facts.cls)

    def __hash__(self) -> int:
        return hash((str(self.module.path), self.facts.qual))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FunctionInfo)
            and other.module.path == self.module.path
            and other.facts.qual == self.facts.qual
        )


# the key of `object` in a linearization: the implicit last base of every class
_OBJECT = ("builtins.object",)


def _leaf_key(owner: ClassInfo, index: int, base: Symbol) -> object:
    """The key of a base whose own bases are unknown. An external class is one object
    whoever names it (`torch.nn.Module`); an unbound name is taken to be one object within
    the module that spells it; a base with no spelling (`class A(make())`) is its own."""
    if base.kind == "external" and base.name == "builtins.object":
        return _OBJECT
    if base.kind == "unknown":
        if base.name == "?" or base.module is None:
            return ("?", owner.name, index)
        return ("?", base.module.name, base.name)
    return (base.kind, base.name)


class ClassInfo:
    def __init__(self, project: "Project", module: Module, facts: F.ClassFacts) -> None:
        self.project = project
        self.module = module
        self.facts = facts
        self._memo: dict = {}
        self._members: dict[str, str | None] | None = None
        self._in_progress: set[str] = set()

    @property
    def qual(self) -> str:
        return self.facts.qual

    @property
    def name(self) -> str:
        return f"{self.module.name}.{self.facts.qual}"

    def symbol(self) -> Symbol:
        return Symbol("class", self.name, self.module, self.qual)

    def bases(self) -> list[Symbol]:
        out = []
        for spelled in self.facts.bases:
            if spelled is None:
                out.append(UNKNOWN)
                continue
            sym = self.project.resolve(self.module, spelled, scope=None)
            out.append(sym)
        return out

    def base_spellings(self) -> list[str | None]:
        return list(self.facts.bases)

    def mro(self) -> list[Symbol]:
        """This class and its ancestors in Python's order (C3 linearization, `__mro__`).
        Bases that cannot be resolved (external or unknown symbols) are leaves: their own
        bases are not known. Where Python would raise `TypeError` (an inconsistent hierarchy,
        a duplicate base, a cycle the source spells), or the hierarchy is deeper than
        `MAX_DEPTH`, the order falls back to depth first, left to right, each class once."""
        return self.project.tracker.memo(self._memo, "mro", self._compute_mro)

    def _compute_mro(self) -> list[Symbol]:
        symbols: dict[object, Symbol] = {}
        keys = self._c3(frozenset(), {}, symbols)
        if keys is None:
            return self._depth_first()
        out: list[Symbol] = []
        anonymous = False
        for key in keys:
            if key == _OBJECT:
                continue  # implicit at the end of every MRO; listed below where spelled
            sym = symbols[key]
            if sym.kind == "unknown" and sym.name == "?":
                if anonymous:
                    continue
                anonymous = True
            out.append(sym)
        if _OBJECT in symbols:
            out.append(symbols[_OBJECT])  # a base spelled `object`: last, as in `__mro__`
        return out

    def _c3(self, active: frozenset[str], done: dict[str, list], symbols: dict[object, Symbol]) -> list | None:
        """The keys of this class's linearization, or None where there is none (see `mro`).
        `active`: the classes whose linearization is being built (a cycle); `done`: the
        linearizations built so far in this computation."""
        if self.name in done:
            return done[self.name]
        if self.name in active or len(active) >= MAX_DEPTH:
            return None
        symbols.setdefault(self.name, self.symbol())
        inner = active | {self.name}
        seqs: list[list] = []
        for i, base in enumerate(self.bases()):
            sub = self.project.class_of(base) if base.kind == "class" else None
            if sub is not None:
                lin = sub._c3(inner, done, symbols)
                if lin is None:
                    return None
            else:
                key = _leaf_key(self, i, base)
                symbols.setdefault(key, base)  # `_OBJECT` only where a base spells it
                lin = [key] if key == _OBJECT else [key, _OBJECT]
            seqs.append(lin)
        heads = [lin[0] for lin in seqs] or [_OBJECT]
        merged = c3_merge(seqs + [heads])
        if merged is None:
            return None
        done[self.name] = [self.name] + merged
        return done[self.name]

    def _depth_first(self) -> list[Symbol]:
        out: list[Symbol] = []
        seen: set[str] = set()

        def walk(info: ClassInfo, depth: int) -> None:
            key = info.name
            if key in seen or depth > MAX_DEPTH:
                return
            seen.add(key)
            out.append(info.symbol())
            for base in info.bases():
                if base.kind == "class":
                    sub = self.project.class_of(base)
                    if sub is not None:
                        walk(sub, depth + 1)
                        continue
                if base.name not in seen:
                    seen.add(base.name)
                    out.append(base)

        walk(self, 0)
        return out

    def classes(self) -> list["ClassInfo"]:
        """The resolved classes of the MRO (self first)."""
        return [c for c in (self.project.class_of(s) for s in self.mro() if s.kind == "class") if c is not None]

    def own_members(self) -> dict[str, str | None]:
        """Names bound in this class's own body: methods (value None) and class attributes
        (the ref of their value: `name = func`)."""
        self.module._touch()
        if self._members is None:
            members: dict[str, str | None] = {m: None for m in self.facts.methods}
            members.update(self.facts.attrs)
            for chunk in self.module.class_chunks(self.qual)[1:]:
                if chunk.extra_class:
                    extra = self.module.chunk_facts(chunk).classes.get("<members>")
                    if extra is not None:
                        members.update(extra.attrs)
                        for f in extra.fields:
                            if f not in self.facts.fields:
                                self.facts.fields.append(f)
            self._members = members
        return self._members

    def lookup(self, name: str) -> tuple["ClassInfo | None", str | None, bool]:
        """(defining class, attribute ref, found) for a member along the MRO. `found` is
        False when it is not defined by any resolved class; the MRO may still hold an
        external or unknown base that defines it."""
        for info in self.classes():
            members = info.own_members()
            if name in members:
                return info, members[name], True
        return None, None, False

    def has_unresolved_base(self) -> bool:
        return any(s.kind != "class" or self.project.class_of(s) is None for s in self.mro()[1:])

    def method(self, name: str) -> FunctionInfo | None:
        """The function a member name calls: a method, or a class attribute bound to a function."""
        owner, value, found = self.lookup(name)
        if not found or owner is None:
            return None
        if value is None:
            info = owner.module.function(f"{owner.qual}.{name}")
            return None if info is not None and info.opaque else info
        sym = self.project.resolve(owner.module, value, scope=None)
        return self.project.function_of(sym)

    def fields(self) -> set[str]:
        out: set[str] = set()
        for info in self.classes():
            info.own_members()
            out.update(info.facts.fields)
            out.update(m for m in info.own_members())
        return out

    def instance_attr(self, attr: str) -> Symbol:
        """What `self.<attr>` holds, from assignments in the methods of the class and its
        bases: an instance of a class, a function (`self.f = func`, `partial(func, ...)`)."""
        if attr in self._in_progress:
            return UNKNOWN  # `self.a = self.b` and `self.b = self.a`
        self._in_progress.add(attr)
        try:
            return self.project.tracker.memo(self._memo, ("attr", attr), lambda: self._instance_attr(attr))
        finally:
            self._in_progress.discard(attr)

    def _instance_attr(self, attr: str) -> Symbol:
        pattern = re.compile(r"\bself\s*\.\s*" + re.escape(attr) + r"\s*(?::[^=\n]*)?=(?!=)")
        result = UNKNOWN
        for info in self.classes():
            declared = info.facts.types.get(attr)  # a class-body annotation (`md: Cls`)
            if declared:
                sym = self.project.resolve(info.module, declared, scope=None)
                if sym.kind == "class":
                    return Symbol("instance", sym.name, sym.module, sym.qual, sym.via)
            for chunk in info.module.class_chunks(info.qual):
                text = info.module.source.text
                if not pattern.search(text, chunk.start, chunk.end):
                    continue
                for fn in info.module.chunk_facts(chunk).functions.values():
                    how = fn.self_attrs.get(attr)
                    if how is None:
                        continue
                    kind, target = how
                    scope = Scope(info.module, fn, info)
                    sym = self.project.resolve(info.module, target, scope=scope)
                    if kind == "new" and sym.kind == "class":
                        result = Symbol("instance", sym.name, sym.module, sym.qual, sym.via)
                    elif kind == "new" and sym.kind == "function":
                        result = self._made_instance(sym)  # `Meta.allocate(...)`, a factory
                    elif kind in ("ref", "partial") and sym.kind == "function":
                        result = sym
                    elif kind in ("ref", "copy") and sym.kind == "instance":
                        result = sym
                    if result.is_known:
                        break
                if result.is_known:
                    break
            if result.is_known:
                break
        return result

    def _made_instance(self, sym: Symbol) -> Symbol:
        """An instance of the class a function makes: the class its return annotation names
        (`-> "Meta"` too), or the class of a `@classmethod` whose every `return` builds
        `cls(...)`."""
        fn = self.project.function_of(sym)
        node = fn.node() if fn is not None else None
        if node is None:
            return UNKNOWN
        named = F.annotation_ref(node.returns) if getattr(node, "returns", None) is not None else None
        if named is None and F.returns_own_class(node):
            named = fn.facts.cls
        made = self.project.resolve(fn.module, named, scope=None) if named else UNKNOWN
        return Symbol("instance", made.name, made.module, made.qual, made.via) if made.kind == "class" else UNKNOWN

    def bound_callable(self, attr: str) -> str | None:
        """The dotted ref of what a call of `self.<attr>` runs when a method of the class (or
        a base) binds the attribute to a callable of another object: `self.f =
        functools.partial(self.model.g, ...)` or `self.f = self.model.g` (through that
        method's local aliases) give `self.model.g`; None when no method binds it so."""
        return self.project.tracker.memo(self._memo, ("bound", attr), lambda: self._bound_callable(attr))

    def _bound_callable(self, attr: str) -> str | None:
        pattern = re.compile(r"\bself\s*\.\s*" + re.escape(attr) + r"\s*(?::[^=\n]*)?=(?!=)")
        for info in self.classes():
            text = info.module.source.text
            for chunk in info.module.class_chunks(info.qual):
                if not pattern.search(text, chunk.start, chunk.end):
                    continue
                for fn in info.module.chunk_facts(chunk).functions.values():
                    how = fn.self_attrs.get(attr)
                    if how is None or how[0] not in ("partial", "ref") or "." not in how[1]:
                        continue
                    head, dot, rest = how[1].partition(".")
                    alias = fn.aliases.get(head)
                    if alias is None and head in fn.params[1:]:
                        # a parameter the method also stores on self: `self.model = model`
                        alias = next((f"self.{a}" for a, h in fn.self_attrs.items() if h == ["ref", head]), None)
                    return (alias + dot + rest) if alias else how[1]
        return None


@dataclass
class Scope:
    """Where a ref is read: a module, and optionally a function (its locals) and the class
    the function is a method of."""

    module: Module
    function: F.FunctionFacts | None = None
    cls: ClassInfo | None = None
    self_cls: ClassInfo | None = None  # the class `self` is, when it is a subclass's instance


# -- the project ---------------------------------------------------------------------------------


class Project:
    def __init__(
        self,
        root: Path,
        *,
        files: Iterable[Path] = (),
        read: Callable[[Path], bytes] | None = None,
        facts: FactStore | None = None,
        display: Callable[[Path], str] | None = None,
        listing: Callable[[], list[Path]] | None = None,
        digest: Callable[[bytes], str] | None = None,
        environment: Environment | None = None,
    ) -> None:
        self.root = Path(os.path.abspath(root))
        # outside the project: extra-paths, the Python environment, bundled models
        self.env = environment if environment is not None else Environment.models_only()
        self._read = read or (lambda p: p.read_bytes())
        self._store = facts or FactStore()
        self._display = display or (lambda p: str(p))
        self._listing = listing
        self._digest = digest
        self.modules: dict[Path, Module] = {}
        self._by_str: dict[str, Module] = {}  # the same, by the path as a dependency names it
        self._root_of: dict[Path, Path] = {}
        self._by_name: dict[tuple, Path | None] = {}
        self._lookup_deps: dict[tuple, frozenset] = {}
        self._classes: dict[tuple[Path, str], ClassInfo] = {}
        self._files: list[Path] | None = None
        self._contains: dict[str, tuple[list[Path], tuple[str, ...]]] = {}  # word -> files, as noted
        self._brief: dict[tuple[int, int], Module] = {}  # see `hold_briefly`, oldest first
        # whole-word questions about the project's files (see `files_containing`)
        self._known_digests: dict[Path, str | None] = {}
        self._words_asked = 0
        self._file_ids: dict[Path, int] = {}  # files whose words are indexed
        self._file_digests: dict[Path, str | None] = {}
        self._postings: dict[bytes, list[int]] = {}  # word -> ids of the files holding it
        self._sites: dict = {}  # call sites by callee name (`call_sites`)
        # paths of every file whose content a question depended on: the caller records them
        self.tracker = Tracker()

    # files
    def read(self, path: Path) -> bytes:
        return self._read(path)

    def _exists(self, path: Path) -> bool:
        found = path.is_file()
        self.tracker.note(("exists", str(path), found))
        return found

    def display(self, path: Path) -> str:
        return self._display(path)

    def digest_of(self, module: Module) -> str | None:
        if module.digest is None and self._digest is not None:
            try:
                module.digest = self._digest(module.data)
            except OSError:
                return None
            if module._source is not None:
                module._data = None  # decoded already (see `Module.source`)
        return module.digest

    def stored_facts(self, module: Module) -> dict | None:
        d = self.digest_of(module)
        return self._store.get(d) if d else None

    def store_facts(self, module: Module, key: str, facts: "ChunkFacts | bool") -> None:
        """Kept as objects; turned into JSON only if the store saves them."""
        d = self.digest_of(module)
        if d:
            current = self._store.get(d) or {}
            current[key] = facts
            self._store.put(d, current)

    def source_root(self, path: Path) -> Path:
        """The folder above the top package holding `path`: where its absolute imports start."""
        start = Path(os.path.abspath(path)).parent
        got = self._root_of.get(start)
        if got is None:
            folder = start
            while (folder / "__init__.py").is_file() and folder.parent != folder:
                folder = folder.parent
            got = self._root_of[start] = folder
        return got

    def roots_for(self, near: "Module | None") -> tuple[Path, ...]:
        """Where absolute imports of a module are looked up: its own package's root, then the
        project root and its `src` folder. Never what happens to be linted in this run.

        A module from outside the project (extra-paths, the environment, a bundled model) gets
        no root of its own: its imports go through the documented order like any other, so a
        bundled model's `import vllm.x` is answered by the environment's `vllm.x` when it has
        one, never by the model beside it."""
        roots = [self.source_root(near.path)] if near is not None and near.origin == "project" else []
        for extra in (self.root, self.root / "src"):
            if extra not in roots:
                roots.append(extra)
        return tuple(roots)

    def module_name(self, path: Path) -> str:
        path = Path(os.path.abspath(path))
        parts = [] if path.name == "__init__.py" else [path.stem]
        folder = path.parent
        while (folder / "__init__.py").is_file() and folder.parent != folder:
            parts.append(folder.name)
            folder = folder.parent
        if not parts:
            parts.append(path.parent.name)
        return ".".join(reversed(parts))

    def module_at(self, path: Path, data: bytes | None = None, *, name: str | None = None, origin: str = "project") -> Module:
        path = Path(os.path.abspath(path))
        mod = self.modules.get(path)
        if mod is None:
            # an outside module is named as it was imported (an editable install's folder
            # may not be named like its package)
            mod = Module(self, path, name if origin != "project" and name else self.module_name(path), data)
            mod.origin = origin
            self.modules[path] = mod
            self._by_str[str(path)] = mod
        elif data is not None and mod._data is None:
            mod._data = data
        return mod

    def loaded(self, path: str) -> Module | None:
        """The module loaded from this path (as a dependency names it), if any."""
        return self._by_str.get(path)

    def find_module(self, name: str, near: "Module | None" = None, probe: bool = False) -> Module | None:
        """A module by its dotted name, as `near` imports it: from the project, else from
        outside it (`environment`). `probe`: a guess (is this name a submodule?), not an import
        that `lint -v` lists when nothing answers."""
        roots = self.roots_for(near)
        key = (name, roots)
        if key in self._by_name:
            self.tracker.note_all(self._lookup_deps.get(key, ()))
            found = self._by_name[key]
            return self.module_at(found[1], name=name, origin=found[0]) if found is not None else None
        hit: tuple[str, Path] | None = None
        rel = Path(*name.split("."))
        with self.tracker.frame() as checked:
            for root in roots:
                for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
                    if self._exists(candidate):
                        # the project's own, even where the environment's import path also
                        # holds it (`python -m` puts the current folder there)
                        hit = ("project", candidate)
                        break
                if hit:
                    break
            if hit is None:
                for origin, candidate in self.env.candidates(name):
                    if self._exists(candidate):
                        hit = (origin, candidate)
                        break
            if (hit is None and not probe) or (hit is not None and hit[0] != "project"):
                # which source answered for an outside module (`lint -v`); no cache check
                self.tracker.note(("module", name, hit[0] if hit else "missing", str(hit[1]) if hit else None))
        self._lookup_deps[key] = frozenset(checked)
        self._by_name[key] = hit
        return self.module_at(hit[1], name=name, origin=hit[0]) if hit is not None else None

    def relative_module(self, module: Module, level: int, name: str) -> Module | None:
        if module.origin != "project":
            # an outside module's `from .x import y` is the absolute import of its package's
            # `x`, looked up in the documented order (the environment's before a bundled model)
            package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
            if level - 1 > len(package) or (level - 1 == len(package) and not name):
                return None
            base = package[: len(package) - (level - 1)]
            dotted = ".".join([*base, *([name] if name else [])])
            return self.find_module(dotted, module, probe=True) if dotted else None
        folder = module.path.parent
        for _ in range(level - 1):
            folder = folder.parent
        rel = Path(*name.split(".")) if name else None
        candidates = [folder / "__init__.py"] if rel is None else [folder / rel.with_suffix(".py"), folder / rel / "__init__.py"]
        for candidate in candidates:
            if self._exists(candidate):
                return self.module_at(candidate, origin="project")
        return None

    def list_files(self) -> list[Path]:
        if self._files is None:
            self._files = list(self._listing()) if self._listing else []
        return self._files

    def hold_briefly(self, module: Module, index: int) -> None:
        """Keep the parsed trees of a chunk read for its facts alone while it is among the
        last `BRIEF_TREES` such chunks; then let them go, unless it was asked for again."""
        self._brief[(id(module), index)] = module
        while len(self._brief) > BRIEF_TREES:
            key = next(iter(self._brief))  # the oldest
            held, old = self._brief.pop(key), key[1]
            if old in held._passing and held._whole is None:
                held._passing.discard(old)
                held._stmts.pop(old, None)

    def files_containing(self, word: str) -> list[Path]:
        """Project files whose text holds `word` (a whole word: no ASCII letter, digit or `_`
        on either side in the bytes)."""
        got = self._contains.get(word)
        if got is None:
            found = self._containing(word)
            got = self._contains[word] = (found, tuple(sorted(str(p) for p in found)))
        self.tracker.note(("word", word, got[1]))
        return got[0]

    def files_containing_noted(self, word: str) -> tuple[str, ...]:
        """`files_containing(word)` as a dependency records it: sorted path strings."""
        self.files_containing(word)
        return self._contains[word][1]

    def _containing(self, word: str) -> list[Path]:
        # The first few words are searched for file by file (a byte search, then a regex where
        # it hits: cheap for a few words). Past `_INDEX_WORDS_AFTER` words, each file's words
        # are indexed once, on its first read, and every later word is a lookup: N names
        # asked about cost one pass over the files, not N. Either way a file whose answer the
        # store keeps (the cache, by content) is not read.
        raw = word.encode()
        indexed = self._words_asked >= _INDEX_WORDS_AFTER and _BYTES_WORD.fullmatch(raw) is not None
        self._words_asked += 1
        rx = None
        holders: set[int] | None = None
        store = self._store
        got = []
        for path in self.list_files():
            known = self._known_digest(path)
            present = store.holds_word(known, word) if known is not None else None
            if present is None:
                d = known
                if indexed:
                    fid = self._file_ids.get(path)
                    if fid is None:
                        words = self._index_file(path)
                        if words is None:
                            continue  # unreadable
                        present = raw in words
                    else:
                        if holders is None:
                            holders = set(self._postings.get(raw, ()))
                        present = fid in holders
                    d = d or self._file_digests.get(path)
                else:
                    try:
                        data = self._read(path)
                    except OSError:
                        continue
                    if rx is None:
                        rx = re.compile(rb"(?<![\w])" + re.escape(raw) + rb"(?![\w])")
                    present = bool(raw in data and rx.search(data))
                    if store.keeps_words and d is None and self._digest is not None:
                        d = self._digest(data)
                        store.remember_digest(path, d)
                if store.keeps_words and d is not None:
                    store.put_word(d, word, present)
            if present:
                got.append(path)
        return got

    def forget_file_states(self) -> None:
        """Forget which digests the store vouched for (a new run: files may have changed, or
        be given as buffers now)."""
        self._known_digests.clear()

    def _known_digest(self, path: Path) -> str | None:
        if path in self._known_digests:
            return self._known_digests[path]
        got = self._known_digests[path] = self._store.known_digest(path)
        return got

    def _index_file(self, path: Path) -> set[bytes] | None:
        """Index the words of one file (read once, then answered from the postings); its
        words, None when it cannot be read."""
        try:
            data = self._read(path)
        except OSError:
            return None
        fid = self._file_ids[path] = len(self._file_ids)
        postings = self._postings
        words = set(_BYTES_WORD.findall(data))
        for w in words:
            got = postings.get(w)
            if got is None:
                postings[w] = [fid]
            else:
                got.append(fid)
        if self._store.keeps_words and self._digest is not None and self._known_digest(path) is None:
            self._file_digests[path] = self._digest(data)
            self._store.remember_digest(path, self._file_digests[path])
        return words

    def call_sites(self, name: str) -> list[tuple[Module, F.FunctionFacts, list[F.CallFact]]]:
        """Every function of the project that calls something named `name` (the last part of
        the callee's spelling), with those calls, in file and definition order: found once per
        name (the files holding the word, the definitions holding it in each) and kept, with
        what finding them read, for every function of that name whose callers are asked."""
        return self.tracker.memo(self._sites, name, lambda: list(self._call_sites(name)))

    def _call_sites(self, name: str) -> Iterator[tuple[Module, F.FunctionFacts, list[F.CallFact]]]:
        from .needs import Words

        word = Words(name)
        for path in self.files_containing(name):
            module = self.module_at(path)
            for chunk in module.leaf_chunks(word):
                for facts in module.chunk_facts(chunk).functions.values():
                    spots = [c for c in facts.calls if c.name == name]
                    if spots:
                        yield module, facts, spots

    # classes and functions
    def class_info(self, module: Module, facts: F.ClassFacts) -> ClassInfo:
        key = (module.path, facts.qual)
        info = self._classes.get(key)
        if info is None:
            info = self._classes[key] = ClassInfo(self, module, facts)
        return info

    def class_of(self, sym: Symbol) -> ClassInfo | None:
        if sym.kind not in ("class", "instance") or sym.module is None or sym.qual is None:
            return None
        return sym.module.klass(sym.qual)

    def function_of(self, sym: Symbol) -> FunctionInfo | None:
        """The function a symbol names, when its body is known: a bundled model's function
        whose body is not modelled is a call that cannot be followed, as if unresolved."""
        if sym.kind != "function" or sym.module is None or sym.qual is None:
            return None
        info = sym.module.function(sym.qual)
        if info is not None and info.opaque:
            return None
        return info

    # resolution
    def resolve(self, module: Module, spelled: str, scope: Scope | None = None, _depth: int = 0) -> Symbol:
        """What a dotted spelling names when read in `scope` (or at module level)."""
        if _depth > MAX_DEPTH or not spelled:
            return UNKNOWN
        parts = spelled.split(".")
        head = parts[0]
        sym = self._resolve_head(module, head, scope, _depth)
        for part in parts[1:]:
            if not sym.is_known and sym.kind != "external":
                return UNKNOWN
            sym = self.attribute(sym, part, _depth)
        return sym

    def _resolve_head(self, module: Module, head: str, scope: Scope | None, depth: int) -> Symbol:
        fn = scope.function if scope else None
        if head == "super()" and scope is not None and scope.cls is not None:
            cls = scope.self_cls or scope.cls
            mro = cls.classes()
            names = [c.name for c in mro]
            if scope.cls.name in names:
                rest = mro[names.index(scope.cls.name) + 1 :]
                if rest:
                    return Symbol("instance", rest[0].name, rest[0].module, rest[0].qual, "local")
            return UNKNOWN
        if fn is not None:
            if fn.cls is not None and fn.params and head == fn.params[0] and scope.cls is not None:
                cls = scope.self_cls or scope.cls
                kind = "class" if _is_classmethod_param(head) else "instance"
                return Symbol(kind, cls.name, cls.module, cls.qual, "local")
            if head in fn.params:
                ann = fn.annotations.get(head)
                if ann:
                    sym = self.resolve(module, ann, None, depth + 1)
                    if sym.kind == "class":
                        return Symbol("instance", sym.name, sym.module, sym.qual, sym.via)
                elif scope.cls is not None:
                    inherited = self._inherited_parameter(scope.cls, fn, head, depth)
                    if inherited is not None:
                        return inherited
                return Symbol("unknown", head, module, None, "local")
            if head in fn.imports:
                return self._binding(module, head, fn.imports[head], depth)
            if head in fn.aliases:
                return self.resolve(module, fn.aliases[head], scope, depth + 1)
            local = f"{fn.qual}.<locals>.{head}"
            info = module.function(local)
            if info is not None:
                return Symbol("function", f"{module.name}.{local}", module, local, "local")
        hows = module.bindings().bindings.get(head)
        if hows:
            for how in reversed(hows):
                sym = self._binding(module, head, how, depth)
                if sym.kind != "unknown":
                    return sym
            return UNKNOWN
        target = self._star_source(module, head)
        if target is not None:
            return self.attribute(Symbol("module", target.name, target), head, depth)
        if head in BUILTINS:
            return Symbol("external", f"builtins.{head}", via="builtin")
        return Symbol("unknown", head, module, None, "unbound")

    def _star_source(self, module: Module, name: str, seen: set[int] | None = None) -> Module | None:
        """The module that binds `name` for `module`'s star imports: one it star-imports, or
        one those star-import in turn (a package whose `__init__` is `from .topk import *`)."""
        seen = {id(module)} if seen is None else seen
        for level, star in module.bindings().stars:
            target = self.relative_module(module, level, star) if level else self.find_module(star, module)
            if target is None or id(target) in seen or len(seen) > MAX_DEPTH:
                continue
            seen.add(id(target))
            if name in target.bindings().bindings:
                return target
            deeper = self._star_source(target, name, seen)
            if deeper is not None:
                return deeper
        return None

    def _inherited_parameter(self, cls: ClassInfo, fn: F.FunctionFacts, param: str, depth: int) -> Symbol | None:
        """An override's unannotated parameter has the class the overridden method declares
        for the parameter of the same name (as pyright infers it): a plugin's
        `propose(self, common_attn_metadata, ...)` overriding vLLM's."""
        method = fn.qual.rsplit(".", 1)[-1]
        for base in cls.classes()[1:]:
            if method not in base.own_members():
                continue
            info = base.module.function(f"{base.qual}.{method}")
            if info is None:
                return None
            ann = info.facts.annotations.get(param)
            if not ann:
                return None
            sym = self.resolve(base.module, ann, None, depth + 1)
            return Symbol("instance", sym.name, sym.module, sym.qual, "inherited") if sym.kind == "class" else None
        return None

    def _binding(self, module: Module, name: str, how: list, depth: int) -> Symbol:
        kind = how[0]
        if kind == "def":
            return Symbol("function", f"{module.name}.{how[1]}", module, how[1], "local")
        if kind == "class":
            return Symbol("class", f"{module.name}.{how[1]}", module, how[1], "local")
        if kind == "module":
            target = self.find_module(how[1], module)
            if target is not None:
                return Symbol("module", target.name, target)
            return Symbol("external", how[1])
        if kind == "from":
            _, level, mod_name, attr = how
            target = self.relative_module(module, level, mod_name) if level else self.find_module(mod_name, module)
            if target is None:
                # a folder without `__init__.py` (a namespace package): the name is a submodule
                full = f"{mod_name}.{attr}" if mod_name else attr
                sub = self.relative_module(module, level, full) if level else self.find_module(full, module, probe=True)
                if sub is not None:
                    return Symbol("module", sub.name, sub)
                base = mod_name if not level else "." * level + mod_name
                return Symbol("external", f"{base}.{attr}" if base else attr)
            if target is module and not module.is_package:
                return UNKNOWN
            got = self.attribute(Symbol("module", target.name, target), attr, depth + 1)
            if got.kind == "unknown" and not level:
                # a package read from outside (the environment) while the project holds the
                # submodule: `from vllm.v1.spec_decode import helpers` with helpers.py in-tree
                sub = self.find_module(f"{mod_name}.{attr}", module, probe=True)
                if sub is not None:
                    return Symbol("module", sub.name, sub)
            return got
        if kind == "alias" and how[1] and how[1] != name:
            return self.resolve(module, how[1], None, depth + 1)
        return UNKNOWN

    def attribute(self, sym: Symbol, attr: str, depth: int = 0) -> Symbol:
        if depth > MAX_DEPTH:
            return UNKNOWN
        if sym.kind == "external":
            return Symbol("external", f"{sym.name}.{attr}", via=sym.via)
        if sym.kind == "module" and sym.module is not None:
            mod = sym.module
            hows = mod.bindings().bindings.get(attr)
            if hows:
                for how in reversed(hows):
                    got = self._binding(mod, attr, how, depth + 1)
                    if got.kind != "unknown":
                        return got
            if mod.is_package:
                sub = self.relative_module(mod, 1, attr)
                if sub is not None:
                    return Symbol("module", sub.name, sub)
            target = self._star_source(mod, attr)
            if target is not None:
                return self.attribute(Symbol("module", target.name, target), attr, depth + 1)
            return UNKNOWN
        if sym.kind in ("class", "instance"):
            info = self.class_of(sym)
            if info is None:
                return UNKNOWN
            owner, value, found = info.lookup(attr)
            if found and owner is not None:
                if value is None:
                    qual = f"{owner.qual}.{attr}"
                    if owner.module.function(qual) is not None:
                        return Symbol("function", f"{owner.module.name}.{qual}", owner.module, qual, sym.via)
                    nested = owner.module.klass(qual)
                    if nested is not None:
                        return nested.symbol()
                    return UNKNOWN
                return self.resolve(owner.module, value, None, depth + 1)
            if sym.kind == "instance":
                return info.instance_attr(attr)
            return UNKNOWN
        return UNKNOWN

    def short_name(self, name: str, kind: str) -> list[Symbol]:
        """Every project class (`kind` 'class') or function named `name`: the fallback where
        nothing else resolves a name."""
        out = []
        for path in self.files_containing(name):
            mod = self.module_at(path)
            for chunk in mod.outline.named(name):
                if (chunk.kind == CLASS) == (kind == "class"):
                    sym_kind = "class" if kind == "class" else "function"
                    out.append(Symbol(sym_kind, f"{mod.name}.{name}", mod, name, "short-name"))
        return out


def _is_classmethod_param(name: str) -> bool:
    return name in ("cls", "klass", "mcs")
