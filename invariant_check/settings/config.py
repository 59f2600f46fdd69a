"""`[tool.invariant-check]` in the nearest pyproject.toml, merged with the command line."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from ..api.registry import all_rules, padded_code, resolve_code

TABLE = "invariant-check"
KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "exclude",
    "extend-exclude",
    "per-file-ignores",
    "respect-gitignore",
    "options",
    "cache-dir",
    "jobs",
    "baseline",
    "python",
    "extra-paths",
}

# Skipped while walking folders, never when a file is named on the command line. Setting
# `exclude` replaces this list (as in ruff); `extend-exclude` adds to it.
DEFAULT_EXCLUDES = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "venv",
    ".env",
    "env",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".invariant-check-cache",
)


class ConfigError(Exception):
    """Bad configuration; the message is one line naming the file and the key."""


@dataclass
class Config:
    root: Path  # the folder its globs are relative to
    source: Path | None = None  # None: no configuration file (defaults, root = current folder)
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] | None = None  # None: DEFAULT_EXCLUDES
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    respect_gitignore: bool = True
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache_dir: Path | None = None
    jobs: int | None = None
    baseline: Path | None = None  # `baseline = "..."`, relative to the configuration's folder
    # what is accepted but probably not meant (a rule's options given twice); printed as
    # `invariant-check: warning: ...` by the command line
    warnings: list[str] = field(default_factory=list)
    # where imports from outside the project are read (see analysis/environment.py)
    python: str | None = None  # an interpreter whose environment to read; None: the running one
    extra_paths: list[Path] = field(default_factory=list)

    @property
    def walk_excludes(self) -> tuple[str, ...]:
        """Patterns skipped while walking folders only (the defaults, or `exclude`)."""
        return DEFAULT_EXCLUDES if self.exclude is None else ()

    @property
    def user_excludes(self) -> list[str]:
        """Patterns skipped while walking and for paths named on the command line."""
        return (self.exclude or []) + self.extend_exclude

    def rule_options(self, code: str) -> dict[str, Any]:
        rule = all_rules()[code]
        merged = rule.default_options()
        merged.update(self.options.get(code, {}))
        return merged


def has_table(candidate: Path) -> bool:
    """Whether this pyproject.toml configures invariant-check (a broken one that names our
    table counts: load_config reports it rather than skipping it silently)."""
    try:
        if not candidate.is_file():
            return False
        raw = candidate.read_bytes()
    except OSError:
        return False
    if TABLE.encode() not in raw:
        return False
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True
    tool = data.get("tool")
    return isinstance(tool, dict) and TABLE in tool


def nearest_config(folder: Path) -> Path | None:
    """The pyproject.toml with a [tool.invariant-check] table in `folder` or the nearest above."""
    # os.path.realpath, not Path.resolve: the latter raises on a symlink loop before 3.13,
    # and a looping path is reported by discovery, not here.
    start = Path(os.path.realpath(folder))
    for candidate_dir in [start, *start.parents]:
        candidate = candidate_dir / "pyproject.toml"
        if has_table(candidate):
            return candidate
    return None


def find_config(paths: list[Path]) -> Path | None:
    """The nearest configuration above the common folder of `paths` (for library callers;
    the command uses the nearest one per file)."""
    resolved = [Path(os.path.realpath(p)) for p in paths] or [Path(os.path.realpath(os.getcwd()))]
    return nearest_config(Path(_common_dir(resolved)))


def _common_dir(paths: list[Path]) -> str:
    dirs = [str(p if p.is_dir() else p.parent) for p in paths]
    try:
        return os.path.commonpath(dirs)
    except ValueError:
        return str(Path.cwd())


def load_config(path: Path | None, *, fallback_root: Path | None = None) -> Config:
    if path is None:
        return Config(root=(fallback_root or Path.cwd()).resolve())
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(f"{path}: [tool] must be a table")
        table = tool.get(TABLE, {})
    else:
        tool = data.get("tool")
        if isinstance(tool, dict) and TABLE in tool:
            raise ConfigError(
                f"{path}: holds a [tool.{TABLE}] table, but only a file named pyproject.toml is read "
                f"that way: in any other file the keys stand at the top level (remove the "
                f"[tool.{TABLE}] heading and the `tool.{TABLE}.` of its subtables), or pass the "
                f"project's pyproject.toml"
            )
        table = data
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{TABLE}] must be a table")
    return parse_table(table, path)


def parse_table(table: dict[str, Any], source: Path) -> Config:
    where = f"{source}: [tool.{TABLE}]"
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}{did_you_mean(unknown, KNOWN_KEYS)}; "
            f"known: {', '.join(sorted(KNOWN_KEYS))}"
        )
    # the folder as the paths reach it (not resolved): globs are matched against those paths
    cfg = Config(root=Path(os.path.abspath(source.parent)), source=source)

    def str_list(key: str) -> list[str]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: {key} must be a list of strings")
        return value

    if "select" in table:
        cfg.select = check_codes(str_list("select"), f"{where} select")
    cfg.extend_select = check_codes(str_list("extend-select"), f"{where} extend-select")
    cfg.ignore = check_codes(str_list("ignore"), f"{where} ignore")
    if "exclude" in table:
        cfg.exclude = str_list("exclude")
    cfg.extend_exclude = str_list("extend-exclude")
    if "respect-gitignore" in table:
        if not isinstance(table["respect-gitignore"], bool):
            raise ConfigError(f"{where}: respect-gitignore must be true or false")
        cfg.respect_gitignore = table["respect-gitignore"]
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where}: per-file-ignores must be a table of glob = [codes]")
    for glob, codes in pfi.items():
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise ConfigError(f"{where}: per-file-ignores.{glob!r} must be a list of codes")
        cfg.per_file_ignores[glob] = check_codes(codes, f"{where} per-file-ignores.{glob!r}")
    options = table.get("options", {})
    if not isinstance(options, dict):
        raise ConfigError(f"{where}: options must be a table of [options.<CODE>] tables")
    given_as: dict[str, str] = {}
    for key, values in options.items():
        codes = resolve_code(key)
        if len(codes) != 1:
            pool = [*all_rules(), *(r.NAME for r in all_rules().values())]
            raise ConfigError(f"{where}: options.{key}: unknown rule code or name{did_you_mean([key], pool)}")
        code = codes[0]
        checked = check_rule_options(code, values, f"{where} options.{key}")
        if code in given_as:
            # the same rule under its code and its name (or two spellings): merged, in file order
            clash = sorted(k for k in checked if k in cfg.options[code] and cfg.options[code][k] != checked[k])
            detail = f"; options.{key} wins for {', '.join(clash)}" if clash else ""
            cfg.warnings.append(
                f"{where}: options.{given_as[code]} and options.{key} both configure {code} "
                f"({all_rules()[code].NAME}); they are merged{detail}. Keep one table."
            )
            cfg.options[code].update(checked)
        else:
            given_as[code] = key
            cfg.options[code] = checked
    if "cache-dir" in table:
        if not isinstance(table["cache-dir"], str):
            raise ConfigError(f"{where}: cache-dir must be a string, got {table['cache-dir']!r}")
        cfg.cache_dir = (cfg.root / table["cache-dir"]).resolve()
    if "baseline" in table:
        if not isinstance(table["baseline"], str) or not table["baseline"]:
            raise ConfigError(f"{where}: baseline must be a file name, got {table['baseline']!r}")
        cfg.baseline = Path(os.path.abspath(cfg.root / table["baseline"]))
    if "jobs" in table:
        jobs = table["jobs"]
        if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
            raise ConfigError(f"{where}: jobs must be an integer >= 1, got {jobs!r}")
        cfg.jobs = table["jobs"]
    if "python" in table:
        python = table["python"]
        if not isinstance(python, str) or not python.strip():
            raise ConfigError(f"{where}: python must be the path of an interpreter, got {python!r}")
        cfg.python = interpreter_path(python, cfg.root)
    cfg.extra_paths = [Path(os.path.abspath(cfg.root / p)) for p in str_list("extra-paths")]
    for given, folder in zip(str_list("extra-paths"), cfg.extra_paths):
        if not folder.is_dir():
            why = "is not a folder" if folder.exists() else "does not exist"
            cfg.warnings.append(f"{where}: extra-paths: {given!r} {why} ({folder}); no import is looked up there")
    return cfg


def interpreter_path(python: str, base: Path) -> str:
    """`python` as given in the configuration: a path relative to the configuration's folder
    when it names a folder (`.venv/bin/python`), else a command found on PATH (`python3.11`)."""
    expanded = os.path.expanduser(python)
    if os.sep in expanded or (os.altsep and os.altsep in expanded):
        return os.path.abspath(base / expanded)
    return expanded


def check_codes(tokens: list[str], where: str) -> list[str]:
    codes: list[str] = []
    bad = []
    for token in tokens:
        found = resolve_code(token)
        if not found:
            bad.append(token)
        codes.extend(found)
    if bad:
        known = ", ".join(all_rules())
        pool = [*all_rules(), *(r.NAME for r in all_rules().values())]
        raise ConfigError(f"{where}: unknown rule code(s) {', '.join(bad)}{did_you_mean(bad, pool)}; known: {known}")
    return codes


def did_you_mean(words: list[str], pool) -> str:
    """` (did you mean X?)` for the words with a close match in `pool` (codes in any case,
    `_` for `-`), else ``."""
    import difflib

    pool = list(pool)
    norm = {p.lower().replace("_", "-"): p for p in pool}
    found = []
    for word in words:
        key = word.lower().replace("_", "-")
        padded = padded_code(word)
        hit = (padded if padded in pool else None) or norm.get(key) or next((norm[n] for n in norm if n.startswith(key) and len(key) >= 3), None)
        if hit is None:
            close = difflib.get_close_matches(key, list(norm), n=1, cutoff=0.6)
            hit = norm[close[0]] if close else None
        if hit is not None and hit not in found:
            found.append(hit)
    return f" (did you mean {', '.join(found)}?)" if found else ""


def check_rule_options(code: str, values: Any, where: str) -> dict[str, Any]:
    rule = all_rules()[code]
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = sorted(set(values) - set(rule.OPTIONS))
    if unknown:
        known = ", ".join(sorted(rule.OPTIONS)) or "none"
        raise ConfigError(
            f"{where}: unknown option(s) {', '.join(unknown)}{did_you_mean(unknown, rule.OPTIONS)}; known: {known}"
        )
    out = {}
    for key, value in values.items():
        try:
            out[key] = rule.OPTIONS[key].validate(key, value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return out
