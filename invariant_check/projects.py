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

from .config import Config, has_table, load_config
from .globs import PathGlobs
from .types import FileError, Finding


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
class Selection:
    """The command line's rule selection; None/empty: the configuration's."""

    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    warn_unused_ignores: bool = False

    def codes(self, cfg: Config) -> list[str]:
        """--select replaces the configuration's select and extend-select; ignores add up and
        win; IC901 is on unless ignored; --warn-unused-ignores is --extend-select IC900."""
        from .registry import always_codes, default_codes

        if self.select is not None:
            chosen = list(self.select)
        else:
            chosen = (cfg.select if cfg.select is not None else default_codes()) + cfg.extend_select
        chosen += self.extend_select + always_codes()
        if self.warn_unused_ignores:
            chosen.append("IC900")
        dropped = set(cfg.ignore) | set(self.ignore)
        return [c for c in dict.fromkeys(chosen) if c not in dropped]


@dataclass
class RunSettings:
    selection: Selection
    jobs: int | None = None
    cache: bool = True
    cache_dir: Path | None = None  # overrides every project's
    prefilter: bool = True
    python: str | None = None  # --python: overrides every project's `python`


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
    settings: RunSettings,
    *,
    cwd: Path,
    sources: dict[Path, bytes] | None = None,
) -> RunResult:
    from .analysis.environment import Environment, UnusableEnvironment
    from .cache import Cache, config_key
    from .config import ConfigError
    from .engine import Engine
    from .registry import all_rules, emitted_by_engine
    from .suppressions import SYNTAX_VERSION

    merged = RunResult()
    enabled: dict[str, Any] = {}
    environments: dict[tuple, Environment] = {}
    for project in projects:
        if not project.files:
            continue
        cfg = project.config
        python = settings.python or cfg.python
        env_key = (python, tuple(cfg.extra_paths))
        env = environments.get(env_key)
        if env is None:
            try:
                env = environments[env_key] = Environment.of(python, cfg.extra_paths)
            except UnusableEnvironment as exc:
                where = f"--python {python}" if settings.python else f"{cfg.source}: [tool.invariant-check] python"
                raise ConfigError(f"{where}: {exc}") from None
        rules = [all_rules()[c] for c in settings.selection.codes(cfg)]
        for r in rules:
            enabled[r.CODE] = r
        options = {r.CODE: cfg.rule_options(r.CODE) for r in rules}
        cache = None
        if settings.cache:
            directory = settings.cache_dir or cfg.cache_dir or (cfg.root / ".invariant-check-cache")
            # the engine-emitted rules change no cached result: toggling IC900 keeps the cache
            analysis = [r.CODE for r in rules if not emitted_by_engine(r)]
            key = config_key(
                analysis, {c: options[c] for c in analysis}, {"suppressions": SYNTAX_VERSION, "environment": env.fingerprint()}
            )
            cache = Cache(Path(directory), key)
            cache.load()
        engine = Engine(
            rules,
            options,
            prefilter=settings.prefilter,
            jobs=settings.jobs or cfg.jobs,
            cache=cache,
            per_file_ignores=cfg.per_file_ignores,
            root=cfg.root,
            cwd=cwd,
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
