"""The linter's side of the language server, without any protocol: buffers in, findings out.

A `Session` lives as long as the server process. It finds each buffer's project as the command
line does (`projects.ProjectIndex`: the nearest `pyproject.toml` with a `[tool.invariant-check]`
table, or the `config` setting for every file) and keeps, per project:

- the rules, their options and the environment of outside imports (`python`, `extra-paths`);
- the result cache, loaded once and kept in memory: facts of the rest of the tree stay warm
  between edits; it is written back when a file is saved and when the server stops, not on
  every keystroke;
- the project's file listing (walked once; walked again when files are created or deleted).

A buffer is linted as `lint -` lints standard input: its text instead of the file on disk, the
rest of the project read from disk, the other open buffers given as their unsaved text. Each
lint builds a fresh project model over that warm cache, so a file changed on disk or in another
buffer is never read stale. What a buffer's analysis read (the cache's dependency records) is
kept, so that a change of one buffer re-lints exactly the open buffers that read it.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..lint.cache import Cache, digest
from ..settings.config import ConfigError, check_codes
from ..lint.engine import Engine
from ..lint.discovery import display_path
from ..lint.projects import Project, ProjectIndex, Selection
from ..api.types import FileError, Finding


class SettingsError(Exception):
    """A client setting that cannot be used; the message names it."""


@dataclass
class Settings:
    """What the editor's client may set (`initializationOptions` or the `invariant-check`
    section of `workspace/configuration`); the project's `pyproject.toml` decides the rest."""

    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    config: str | None = None  # a pyproject.toml for every file, as `--config`
    python: str | None = None  # as `--python`: overrides every project's `python`
    cache: bool = True
    debounce_ms: int = 50
    unsafe_fixes: bool = True  # offer unsafe fixes as code actions (never preferred, marked)

    @classmethod
    def from_client(cls, raw: Any) -> Settings:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise SettingsError(f"invariant-check settings must be an object, got {type(raw).__name__}")
        # accept both the JSON spelling of editors (camelCase) and the TOML one (kebab-case)
        norm = {re.sub(r"(?<=[a-z])([A-Z])", r"-\1", str(k)).lower().replace("_", "-"): v for k, v in raw.items()}
        known = {"select", "extend-select", "ignore", "config", "python", "cache", "debounce-ms", "unsafe-fixes"}
        unknown = sorted(set(norm) - known)
        if unknown:
            raise SettingsError(f"invariant-check settings: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
        out = cls()

        def codes(key: str) -> list[str]:
            value = norm[key]
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SettingsError(f"invariant-check settings: {key!r} must be a list of rule codes")
            try:
                return check_codes([t.strip() for v in value for t in v.split(",") if t.strip()], f"setting {key!r}")
            except ConfigError as exc:
                raise SettingsError(f"invariant-check settings: {exc}") from None

        if "select" in norm and norm["select"] is not None:
            out.select = codes("select")
        if "extend-select" in norm:
            out.extend_select = codes("extend-select")
        if "ignore" in norm:
            out.ignore = codes("ignore")
        for key in ("config", "python"):
            value = norm.get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise SettingsError(f"invariant-check settings: {key!r} must be a path")
            setattr(out, key, value or None)
        for key, attr in (("cache", "cache"), ("unsafe-fixes", "unsafe_fixes")):
            if key in norm:
                if not isinstance(norm[key], bool):
                    raise SettingsError(f"invariant-check settings: {key!r} must be true or false")
                setattr(out, attr, norm[key])
        if "debounce-ms" in norm:
            value = norm["debounce-ms"]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SettingsError("invariant-check settings: 'debounce-ms' must be an integer >= 0")
            out.debounce_ms = value
        return out


class _HeldCache(Cache):
    """The result cache of a long-lived process: `save` (called by the engine after every
    lint) only remembers what to keep; `flush` writes it."""

    pending: tuple[set[str] | None, set[str] | None] | None = None

    def save(self, live_digests=None, facts_used=None):  # noqa: D102
        if self.pending is None:
            self.pending = (set(live_digests or ()), set(facts_used or ()))
        else:
            self.pending[0].update(live_digests or ())
            self.pending[1].update(facts_used or ())
        return None

    def flush(self) -> str | None:
        if self.pending is None:
            return None
        live, used = self.pending
        self.pending = None
        return Cache.save(self, live, used)

    def forget(self, file_digest: str) -> None:
        """Drop what was learned about bytes no file holds any more (an old buffer version)."""
        if self._facts is not None:
            self._facts.pop(file_digest, None)
        self.words.pop(file_digest, None)
        if self.pending is not None:
            self.pending[0].discard(file_digest)
            self.pending[1].discard(file_digest)


# -- what an edit leaves as it was ------------------------------------------------------------------
#
# A buffer's facts are cached by its digest and its chunks' offsets, and its definitions are
# parsed afresh by every lint: an edit of one definition would redo the whole file. Two memos
# keep what the edit cannot have changed, both exact:
#
# - parses: a chunk's statements are those of its text at its line (the parser sees nothing
#   else), so they are kept by (text, line, kind) and shared by later lints;
# - facts: the facts of a chunk of the previous text whose text, line and class are the same in
#   the new text (before the edited span, or after it when the edit keeps the number of lines)
#   are given to the new text under the chunk's new offset.

_PARSES_KEPT = 1000  # chunks (a long session edits many texts; an edited chunk is a new entry)


def _install_parse_memo() -> None:
    from ..analysis import project as project_mod

    if getattr(project_mod.parse_chunk, "memo", None) is not None:
        return
    original = project_mod.parse_chunk
    memo: OrderedDict = OrderedDict()

    def parse_chunk(text, chunk, filename="<lint>"):
        key = (text[chunk.start : chunk.end], chunk.filler, chunk.line, chunk.parent is not None, filename)
        got = memo.get(key)
        if got is None:
            got = memo[key] = original(text, chunk, filename)
            if len(memo) > _PARSES_KEPT:
                memo.popitem(last=False)
        else:
            memo.move_to_end(key)
        return list(got[0]), list(got[1])

    parse_chunk.memo = memo
    project_mod.parse_chunk = parse_chunk


def _chunks(text: str) -> dict[str, tuple]:
    """Every chunk of a text, classes split: key -> (start, extent end, parent head or None)."""
    from ..analysis.outline import CLASS, build

    ol = build(text)
    out = {}
    for chunk in list(ol.top()):
        kids = ol.children(chunk) if chunk.kind == CLASS else []
        end = max([chunk.end, chunk.span_end] + [max(k.end, k.span_end) for k in kids])
        out[chunk.key] = (chunk.start, end, None)
        for k in kids:
            out[k.key] = (k.start, max(k.end, k.span_end), (chunk.start, chunk.end))
    return out


def carried_facts(old: str, new: str, old_facts: dict) -> dict:
    """The facts of `old`'s chunks that hold as they are for `new`, under their keys in `new`."""
    if not old_facts or old_facts.get("whole") or old == new:
        return {}
    n = min(len(old), len(new))
    p = 0
    while p < n and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and old[-1 - s] == new[-1 - s]:
        s += 1
    delta = len(new) - len(old)
    same_lines = old.count("\n") == new.count("\n") and old.count("\r") == new.count("\r")
    tail = len(new) - s  # where the unchanged end of `new` starts
    olds = _chunks(old)
    out = {}
    for key, (start, end, parent) in _chunks(new).items():
        kind = key.split(":", 1)[1]
        if end <= p and (parent is None or parent[1] <= p):
            shift = 0
        elif same_lines and start >= tail and (parent is None or parent[0] >= tail or parent[1] <= p):
            shift = delta
        else:
            continue
        moved = parent if parent is None or parent[1] <= p else (parent[0] - shift, parent[1] - shift)
        old_key = f"{start - shift}:{kind}"
        if olds.get(old_key) == (start - shift, end - shift, moved) and old_key in old_facts:
            out[key] = old_facts[old_key]
    return out


class _Engine(Engine):
    """The engine, keeping what each file's analysis depended on (the cache's dependency
    records) for the session to find a buffer's dependents."""

    def _run(self, paths, result):
        done = super()._run(paths, result)
        self.deps = {d.record.path: (d.outcome.deps if d.outcome is not None else []) for d in done}
        return done


@dataclass
class BufferResult:
    path: Path
    findings: list[Finding] = field(default_factory=list)
    syntax_errors: list[FileError] = field(default_factory=list)  # with a line: shown in the buffer
    problems: list[str] = field(default_factory=list)  # for the log: failing rules, a bad setup
    warnings: list[str] = field(default_factory=list)
    excluded: bool = False


class ProjectState:
    """What the session keeps for one project (one configuration)."""

    def __init__(self, project: Project, settings: Settings, selection: Selection) -> None:
        from ..analysis.environment import Environment, UnusableEnvironment
        from ..lint.cache import config_key
        from ..api.registry import all_rules, emitted_by_engine
        from ..adoption.suppressions import SYNTAX_VERSION

        self.project = project
        cfg = self.config = project.config
        self.root = Path(os.path.abspath(cfg.root))
        python = settings.python or cfg.python
        try:
            self.environment = Environment.of(python, cfg.extra_paths)
        except UnusableEnvironment as exc:
            where = f"setting 'python' {python}" if settings.python else f"{cfg.source}: [tool.invariant-check] python"
            raise ConfigError(f"{where}: {exc}") from None
        self.rules = [all_rules()[c] for c in selection.codes(cfg)]
        self.options = {r.CODE: cfg.rule_options(r.CODE) for r in self.rules}
        self.cache: _HeldCache | None = None
        if settings.cache:
            from ..settings.envvars import get

            env_dir = get("INVARIANT_CHECK_CACHE_DIR")  # as `lint`: it is --cache-dir's variable
            directory = Path(env_dir) if env_dir else cfg.cache_dir or (self.root / ".invariant-check-cache")
            analysis = [r.CODE for r in self.rules if not emitted_by_engine(r)]
            key = config_key(
                analysis, {c: self.options[c] for c in analysis},
                {"suppressions": SYNTAX_VERSION, "environment": self.environment.fingerprint()},
            )
            self.cache = _HeldCache(Path(directory), key)
            self.cache.load()
        self._listing: list[Path] | None = None
        self.buffer_digests: dict[Path, str] = {}

    def listing(self) -> list[Path]:
        if self._listing is None:
            from ..lint.discovery import discover

            found = discover([str(self.root)], scope_for=lambda _folder: self.project, cwd=self.root)
            self._listing = [p for p, _scope in found.files]
        return self._listing

    def forget_listing(self) -> None:
        self._listing = None

    def engine(self) -> _Engine:
        cfg = self.config
        return _Engine(
            self.rules,
            self.options,
            jobs=1,
            cache=self.cache,
            per_file_ignores=cfg.per_file_ignores,
            root=self.root,
            cwd=self.root,
            listing=self.listing,
            environment=self.environment,
        )


class Session:
    def __init__(self, settings: Settings | None = None, folders: list[Path] | None = None) -> None:
        self.settings = settings or Settings()
        self.folders: list[Path] = [Path(os.path.abspath(f)) for f in folders or []]
        self.buffers: dict[Path, bytes] = {}  # open documents: their text now
        self.deps: dict[Path, list] = {}  # what each open buffer's last lint read
        self.texts: dict[Path, tuple[str, str]] = {}  # each buffer's last linted text: (digest, text)
        _install_parse_memo()
        self._reset()

    # -- setup ------------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._indexes: dict[Path, ProjectIndex] = {}
        self._states: dict[tuple[str, str], ProjectState] = {}
        s = self.settings
        self.selection = Selection(select=s.select, extend_select=list(s.extend_select), ignore=list(s.ignore))

    def configure(self, settings: Settings | None = None, folders: list[Path] | None = None) -> None:
        """New settings or workspace folders, or a configuration file changed: every project
        is found and set up again (what was cached is written first)."""
        self.flush()
        if settings is not None:
            self.settings = settings
        if folders is not None:
            self.folders = [Path(os.path.abspath(f)) for f in folders]
        self._reset()

    def folder_of(self, path: Path) -> Path | None:
        best = None
        for f in self.folders:
            if path == f or f in path.parents:
                if best is None or len(str(f)) > len(str(best)):
                    best = f
        return best

    def state_for(self, path: Path) -> ProjectState:
        """The project a file belongs to, set up on first use. Raises ConfigError."""
        folder = self.folder_of(path)
        # outside every workspace folder: the file's own folder decides, as `lint -` there
        key = folder if folder is not None else path.parent
        index = self._indexes.get(key)
        if index is None:
            config = Path(os.path.expanduser(self.settings.config)) if self.settings.config else None
            if config is not None and not config.is_absolute():
                config = (folder or path.parent) / config
            # a file without configuration: its workspace folder's project, as `lint` run
            # there (else the file's own, as `lint -` finds it)
            index = ProjectIndex(config, folder or path.parent, [str(folder or path)])
            self._indexes[key] = index
        project = index.for_folder(str(path.parent))
        # one state per configuration and root, whichever folder's index found it
        skey = (str(project.config.source), str(project.config.root))
        state = self._states.get(skey)
        if state is None:
            state = self._states[skey] = ProjectState(project, self.settings, self.selection)
        return state

    # -- buffers -----------------------------------------------------------------------------------
    def open(self, path: Path, data: bytes) -> None:
        self.buffers[path] = data

    def close(self, path: Path) -> None:
        self.buffers.pop(path, None)
        self.deps.pop(path, None)
        self.texts.pop(path, None)

    def lint(self, path: Path, data: bytes | None = None) -> BufferResult:
        """Lint one buffer (its text now, or `data`). Raises ConfigError for a configuration
        that cannot be used."""
        path = Path(os.path.abspath(path))
        if data is not None:
            self.buffers[path] = data
        data = self.buffers.get(path)
        if data is None:
            data = path.read_bytes()
        state = self.state_for(path)
        out = BufferResult(path)
        out.warnings.extend(state.config.warnings)
        if state.project.user_excludes.match_tree(str(path), False):
            out.excluded = True
            return out
        now = digest(data)
        self._carry(state, path, now, data)
        engine = state.engine()
        sources = {p: b for p, b in self.buffers.items() if p == path or state.root in p.parents}
        sources[path] = data
        result = engine.lint([path], sources)
        self.deps[path] = engine.deps.get(path, [])
        shown = display_path(path, state.root)
        out.findings = [f for f in result.findings if f.path == shown]
        for e in result.errors:
            if e.path != shown and not e.path.startswith("<rule "):
                continue
            # a rule's internal error is the tool's problem, not the buffer's: logged, not shown
            if e.line is not None and e.path == shown and e.rule is None:
                out.syntax_errors.append(e)
            else:
                out.problems.append(f"{e.path}: {e.message}")
        out.warnings.extend(result.warnings)
        # the facts of the buffer's previous text are kept by no file any more
        if state.cache is not None:
            before = state.buffer_digests.get(path)
            if before is not None and before != now and before not in {m[2] for m in state.cache.stat.values()}:
                state.cache.forget(before)
            state.buffer_digests[path] = now
        return out

    def _carry(self, state: ProjectState, path: Path, now: str, data: bytes) -> None:
        """Seeds the facts of the buffer's new text with those its edit left as they were."""
        from ..analysis.source import DecodeError, decode

        before = self.texts.get(path)
        try:
            text = decode(data)
        except DecodeError:
            self.texts.pop(path, None)
            return
        self.texts[path] = (now, text)
        if state.cache is None or before is None or before[0] == now:
            return
        facts = state.cache.facts()
        if now in facts:
            return
        carried = carried_facts(before[1], text, facts.get(before[0]) or {})
        if carried:
            facts[now] = carried

    def dependents(self, path: Path, old: bytes | None, new: bytes) -> list[Path]:
        """The other open buffers whose last lint read something of `path` that the change from
        `old` to `new` changes: its bytes (a `file` record) or whether it holds a word."""
        target = str(path)
        old_digest = digest(old) if old is not None else None
        new_digest = digest(new)
        if old_digest == new_digest:
            return []
        out = []
        for other, deps in self.deps.items():
            if other == path or other not in self.buffers:
                continue
            for dep in deps:
                kind = dep[0]
                if kind in ("file", "exists") and dep[1] == target:
                    out.append(other)
                    break
                if kind == "word":
                    rx = re.compile(rb"(?<![\w])" + re.escape(str(dep[1]).encode()) + rb"(?![\w])")
                    if bool(rx.search(new)) != (target in dep[2]):
                        out.append(other)
                        break
        return out

    def flush(self) -> list[str]:
        """Write every project's cache; the warnings of those that could not be written."""
        notes = []
        for state in self._states.values():
            if state.cache is not None:
                err = state.cache.flush()
                if err:
                    notes.append(err)
        return notes

    def forget_listings(self) -> None:
        for state in self._states.values():
            state.forget_listing()
