"""The settings of one `lint` run: built once from the command line's flags, then handed down.

    options = LintOptions.from_flags(cwd, **flags)     # the click layer; raises ConfigError
    index = ProjectIndex(options.config_file, options.cwd, options.config_paths)
    result, sources = lint_run(options, index)         # projects -> discovery -> engine
    adopt(result, index.order, sources, options)       # baselines, --write-baseline, --add-noqa
    render(options.fmt, result, result.rules, **options.render_kwargs(...))

Each stage reads the fields it needs and nothing else; none of them looks at click. What a
project's `[tool.invariant-check]` table says is merged per project where it applies (the rule
selection in `Selection.codes`, the cache folder, the interpreter, the excludes), because one
run may span several configurations: these are the command line's values, `None` (or empty)
where the flag was not given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


def split_codes(values) -> tuple[str, ...]:
    """`--select A,B --select C` -> (A, B, C)."""
    return tuple(v.strip() for raw in values for v in raw.split(",") if v.strip())


@dataclass(frozen=True)
class Selection:
    """The command line's rule selection; None/empty: the configuration's."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    warn_unused_ignores: bool = False

    def codes(self, cfg) -> list[str]:
        """--select replaces the configuration's select and extend-select; ignores add up and
        win; IC901 is on unless ignored; --warn-unused-ignores is --extend-select IC900."""
        from ..api.registry import always_codes, default_codes

        if self.select is not None:
            chosen = list(self.select)
        else:
            chosen = (cfg.select if cfg.select is not None else default_codes()) + list(cfg.extend_select)
        chosen += [*self.extend_select, *always_codes()]
        if self.warn_unused_ignores:
            chosen.append("IC900")
        dropped = set(cfg.ignore) | set(self.ignore)
        return [c for c in dict.fromkeys(chosen) if c not in dropped]


@dataclass(frozen=True)
class LintOptions:
    """Everything `lint` was told. Frozen: a stage that needs another value derives it."""

    cwd: Path
    # what to lint
    paths: tuple[str, ...] = (".",)
    use_stdin: bool = False
    stdin_filename: str | None = None
    config_file: Path | None = None
    exclude: tuple[str, ...] = ()  # --exclude globs, relative to cwd
    respect_gitignore: bool | None = None  # None: each configuration's
    # the rules and the engine
    selection: Selection = field(default_factory=Selection)
    jobs: int | None = None  # None: the configuration's, else the CPU count
    cache: bool = True
    cache_dir: Path | None = None  # overrides every project's
    prefilter: bool = True
    python: str | None = None  # --python, resolved against cwd: overrides every project's `python`
    # fixes
    fix: bool = False
    diff: bool = False
    unsafe_fixes: bool = False
    show_fixes: bool = False
    # adoption
    baseline: Path | None = None
    write_baseline: Path | None = None
    no_baseline: bool = False
    add_noqa: bool = False
    # the report
    fmt: str = "text"
    output: Path | None = None
    statistics: bool = False
    quiet: bool = False
    show_source: bool | None = None  # None: on for terminals
    verbose: bool = False
    exit_zero: bool = False

    @classmethod
    def from_flags(
        cls,
        cwd: Path,
        *,
        paths=(),
        select=(),
        extend_select=(),
        ignore=(),
        warn_unused_ignores=False,
        no_cache=False,
        no_prefilter=False,
        python=None,
        **flags,
    ) -> LintOptions:
        """From the click command's keyword arguments (the flags' names). Raises ConfigError
        with a one-line message for values that cannot go together or do not exist."""
        from .config import ConfigError, check_codes, interpreter_path

        paths = tuple(paths)
        stdin_filename = flags.get("stdin_filename")
        use_stdin = paths == ("-",) or (stdin_filename is not None and not paths)
        if "-" in paths and not use_stdin:
            raise ConfigError("`-` (standard input) cannot be combined with other paths")
        if stdin_filename is not None and not use_stdin:
            raise ConfigError("--stdin-filename is for linting standard input: give `-` as the only path")
        selection = Selection(
            select=tuple(check_codes(list(split_codes(select)), "--select")) if select else None,
            extend_select=tuple(check_codes(list(split_codes(extend_select)), "--extend-select")),
            ignore=tuple(check_codes(list(split_codes(ignore)), "--ignore")),
            warn_unused_ignores=warn_unused_ignores,
        )
        return cls(
            cwd=cwd,
            paths=paths or (".",),
            use_stdin=use_stdin,
            selection=selection,
            cache=not no_cache,
            prefilter=not no_prefilter,
            python=interpreter_path(python, cwd) if python else None,
            **{k: (tuple(v) if k == "exclude" else v) for k, v in flags.items()},
        )

    @property
    def config_paths(self) -> list[str]:
        """The paths a configuration-less project's root is found from."""
        if self.use_stdin:
            return [self.stdin_filename or "."]
        return [p for p in self.paths if p != "-"]

    @property
    def stdin_path(self) -> Path:
        """The file standard input is linted as (absolute)."""
        import os

        return Path(os.path.abspath(self.cwd / (self.stdin_filename if self.stdin_filename is not None else "-")))
