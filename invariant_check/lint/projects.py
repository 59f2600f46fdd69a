"""One run over files that may belong to several projects.

Each file is linted under the nearest `pyproject.toml` with a `[tool.invariant-check]` table
in its folder or above (as ruff does), or under `--config` for every file. Files without one
get the defaults. One `Engine` runs per project, with `root` = that configuration's folder;
the results are merged into one report and one exit status.

The project root is where the project model (imports, base classes, helpers, callers) is read
from, whatever files are passed: the configuration's folder; without one, the version-control
root (`.git`, `.hg`) above the linted paths; else their common parent, widened to the folder
above the top package holding it (so `vllm/v1/x.py` and `vllm/` name the same project).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..settings.config import Config, ConfigError, has_table, load_config
from ..globs import PathGlobs
from ..settings.options import LintOptions, Selection  # noqa: F401  (Selection: for library callers)
from ..api.types import FileError, Finding


@dataclass(eq=False)
class Project:
    config: Config
    user_excludes: PathGlobs
    walk_excludes: PathGlobs
    respect_gitignore: bool
    files: list[Path] = field(default_factory=list)
    # every Python file of the project (for project-wide questions); set by the command line,
    # which knows the discovery settings
    listing: Any = None

    @classmethod
    def of(cls, config: Config) -> Project:
        return cls(
            config,
            PathGlobs(config.user_excludes, config.root),
            PathGlobs(config.walk_excludes, config.root),
            config.respect_gitignore,
        )


class ProjectIndex:
    """The project of each folder, found once per folder. Raises ConfigError for a bad
    configuration file (the run stops: it is the user's setup, not one bad input)."""

    def __init__(self, config_file: Path | None, cwd: Path, paths: list[str] | None = None) -> None:
        self.cwd = cwd
        self.default_root = default_root([Path(os.path.abspath(cwd / p)) for p in (paths or ["."])])
        self._fixed = Project.of(load_config(config_file)) if config_file is not None else None
        self._by_folder: dict[str, Project] = {}
        self._by_source: dict[str, Project] = {}
        self._default: Project | None = None
        self.order: list[Project] = []  # in order of first use

    def _remember(self, project: Project) -> Project:
        if project not in self.order:
            self.order.append(project)
        return project

    def for_folder(self, folder: str) -> Project:
        if self._fixed is not None:
            return self._remember(self._fixed)
        folder = os.path.abspath(folder)
        chain = []
        found: Project | None = None
        cur = folder
        while True:
            if cur in self._by_folder:
                found = self._by_folder[cur]
                break
            chain.append(cur)
            candidate = os.path.join(cur, "pyproject.toml")
            if has_table(Path(candidate)):
                found = self._by_source.get(candidate)
                if found is None:
                    found = self._by_source[candidate] = Project.of(load_config(Path(candidate)))
                break
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
        if found is None:
            if self._default is None:
                self._default = Project.of(load_config(None, fallback_root=self.default_root))
            found = self._default
        for f in chain:
            self._by_folder[f] = found
        return self._remember(found)


@dataclass
class RunResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    files_seen: int = 0
    files_parsed: int = 0
    cache_hits: int = 0
    warnings: list[str] = field(default_factory=list)
    paths_not_found: int = 0
    rules: list[Any] = field(default_factory=list)  # every rule enabled in some project
    baselined: int | None = None  # findings a baseline held back (None: no baseline in use)
    # modules read from outside the projects: dotted name -> how `-v` describes the source
    outside: dict[str, str] = field(default_factory=dict)


def lint_projects(
    projects: list[Project],
    options: LintOptions,
    *,
    sources: dict[Path, bytes] | None = None,
) -> RunResult:
    """One engine per project with files, under that project's configuration and the run's
    options; the results merged."""
    from ..analysis.environment import Environment, UnusableEnvironment
    from .cache import Cache, config_key
    from ..settings.config import ConfigError
    from .engine import Engine
    from ..api.linewrap import line_length
    from ..api.registry import all_rules, emitted_by_engine
    from ..adoption.suppressions import SYNTAX_VERSION

    merged = RunResult()
    enabled: dict[str, Any] = {}
    environments: dict[tuple, Environment] = {}
    for project in projects:
        if not project.files:
            continue
        cfg = project.config
        python = options.python or cfg.python
        env_key = (python, tuple(cfg.extra_paths))
        env = environments.get(env_key)
        if env is None:
            try:
                env = environments[env_key] = Environment.of(python, cfg.extra_paths)
            except UnusableEnvironment as exc:
                where = f"--python {python}" if options.python else f"{cfg.source}: [tool.invariant-check] python"
                raise ConfigError(f"{where}: {exc}") from None
        rules = [all_rules()[c] for c in options.selection.codes(cfg)]
        for r in rules:
            enabled[r.CODE] = r
        rule_options = {r.CODE: cfg.rule_options(r.CODE) for r in rules}
        cache = None
        if options.cache:
            directory = options.cache_dir or cfg.cache_dir or (cfg.root / ".invariant-check-cache")
            # the engine-emitted rules change no cached result: toggling IC900 keeps the cache
            analysis = [r.CODE for r in rules if not emitted_by_engine(r)]
            key = config_key(
                analysis, {c: rule_options[c] for c in analysis}, {"suppressions": SYNTAX_VERSION, "environment": env.fingerprint(),
                 # hints are wrapped to the project's formatter line length (linewrap)
                 "line_length": line_length(str(cfg.root))}
            )
            cache = Cache(Path(directory), key)
            cache.load()
        engine = Engine(
            rules,
            rule_options,
            prefilter=options.prefilter,
            jobs=options.jobs or cfg.jobs,
            cache=cache,
            per_file_ignores=cfg.per_file_ignores,
            root=cfg.root,
            cwd=options.cwd,
            listing=project.listing,
            environment=env,
        )
        members = set(project.files)
        given = {p: b for p, b in (sources or {}).items() if p in members}
        result = engine.lint(project.files, given) if given else engine.lint(project.files)
        merged.findings.extend(result.findings)
        merged.errors.extend(result.errors)
        merged.files_seen += result.files_seen
        merged.files_parsed += result.files_parsed
        merged.cache_hits += result.cache_hits
        merged.warnings.extend(w for w in [*cfg.warnings, *result.warnings] if w not in merged.warnings)
        for name, (origin, path) in result.outside.items():
            merged.outside.setdefault(name, env.describe(origin, Path(path) if path else None, name))
    merged.rules = [enabled[c] for c in sorted(enabled)]
    merged.findings.sort(key=Finding.sort_key)
    return merged


def default_root(paths: list[Path]) -> Path:
    """The root of a project without configuration (see the module's documentation)."""
    folders = [p if p.is_dir() else p.parent for p in paths]
    try:
        common = Path(os.path.commonpath([str(f) for f in folders]))
    except ValueError:  # different drives
        common = folders[0]
    for folder in (common, *common.parents):
        if (folder / ".git").exists() or (folder / ".hg").exists():
            return folder
    top = common
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    return top


def group(found_files: list[tuple[Path, Project]], index: ProjectIndex) -> list[Project]:
    """Puts each discovered file into its project, keeping discovery's order."""
    for project in index.order:
        project.files = []
    for path, project in found_files:
        project.files.append(path)
    return [p for p in index.order if p.files]


def lint_run(options: LintOptions, index: ProjectIndex, data: bytes | None = None,
             sources: dict[Path, bytes] | None = None) -> tuple[RunResult, dict[str, bytes]]:
    """The whole lint of one run: the paths of `options` (or standard input's `data`), found,
    grouped into projects and linted. `sources`: files' bytes to lint instead of the disk's
    (`--fix` relints its fixed files). Returns the result and, for standard input, the shown
    path -> the bytes linted."""
    if options.use_stdin:
        given = (sources or {}).get(options.stdin_path, data)
        return _lint_stdin(given, options, index)
    return _lint_paths(options, index, sources), {}


def _lint_paths(options: LintOptions, index: ProjectIndex, sources=None) -> RunResult:
    from ..settings.config_checks import unmatched_per_file_ignores
    from .discovery import discover

    paths = list(options.paths)
    cli_exclude = PathGlobs(options.exclude, options.cwd)
    found = discover(paths, scope_for=index.for_folder, exclude=cli_exclude,
                     respect_gitignore=options.respect_gitignore, cwd=options.cwd)
    projects = group(found.files, index)
    for project in projects:
        project.listing = _listing(project, index, options, cli_exclude, found)
    result = lint_projects(projects, options, sources=sources)
    result.warnings.extend(unmatched_per_file_ignores(projects, paths, options.cwd))
    result.errors.extend(found.errors)
    result.errors.sort(key=lambda e: (e.path, e.line or 0))  # one order, wherever they arose
    # a path that does not exist was never a file to check; one that cannot be read was
    result.files_seen += len(found.errors) - found.not_found
    result.paths_not_found = found.not_found
    if not result.files_seen and not found.errors:
        # (ruff warns too) an empty folder, a path of no Python file, or every file excluded
        where = ", ".join(paths)
        result.warnings.append(f"no Python file found in {where} (excluded files, folders and .gitignore'd ones are skipped)")
    return result


def _listing(project: Project, index: ProjectIndex, options: LintOptions, cli_exclude: PathGlobs, known=None):
    """Every Python file of a project, found as discovery finds them (lazily: only a
    project-wide question asks). Folders the command line's discovery walked are not walked
    again."""
    from .discovery import discover

    def scope_for(folder: str) -> Project:
        try:
            return index.for_folder(folder)
        except ConfigError:
            # another project's configuration, broken: its files are not this project's (the
            # run reports it where it lints them), and a word search must not fail on it
            return Project.of(load_config(None, fallback_root=Path(folder)))

    def listing():
        found = discover([str(project.config.root)], scope_for=scope_for, exclude=cli_exclude,
                         respect_gitignore=options.respect_gitignore, cwd=options.cwd, known=known)
        return [p for p, scope in found.files if scope is project]

    return listing


def _lint_stdin(data: bytes, options: LintOptions, index: ProjectIndex) -> tuple[RunResult, dict[str, bytes]]:
    """Standard input linted as the file it names; the rest of its project is read from disk
    for the cross-file facts (base classes, helpers), but only the buffer is reported."""
    from .discovery import display_path

    path = options.stdin_path
    project = index.for_folder(str(path.parent))
    # only the buffer is linted; the project model reads the rest of the project as needed
    project.files = [path]
    project.listing = _listing(project, index, options, PathGlobs(options.exclude, options.cwd))
    result = lint_projects([project], options, sources={path: data})
    shown = display_path(path, options.cwd)
    result.findings = [f for f in result.findings if f.path == shown]
    result.errors = [e for e in result.errors if e.path == shown or e.path.startswith("<rule ")]
    result.files_seen = 1
    return result, {shown: data}
