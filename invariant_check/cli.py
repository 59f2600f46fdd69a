"""The `invariant-check` command: a thin click layer over config, engine and formats."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from . import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _fail(message: str) -> None:
    click.echo(f"invariant-check: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _split_codes(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for raw in values for v in raw.split(",") if v.strip()]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="invariant-check")
def main() -> None:
    """Checks the attention-metadata invariants of speculative decoding (vLLM first)."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--select", multiple=True, metavar="CODES", help="Only these rules (codes, prefixes or names; comma-separated).")
@click.option("--ignore", multiple=True, metavar="CODES", help="Skip these rules.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files and folders matching GLOB (added to the config's).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to FILE instead of stdout.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes for parsing [default: CPU count].")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar="INVARIANT_CHECK_CACHE_DIR", help="Where the cache lives [default: .invariant-check-cache beside the config].")
@click.option("--statistics", is_flag=True, help="Also print the number of findings per rule.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), help="Read settings from this pyproject.toml instead of the nearest one.")
@click.option("--warn-unused-ignores", is_flag=True, help="Report suppression comments that suppress nothing (IC900).")
@click.option("--show-source/--no-show-source", default=None, help="Print the source line with a caret [default: on for terminals].")
@click.option("--no-prefilter", is_flag=True, hidden=True, help="Parse every file (for testing the prefilter).")
def lint(**kwargs):
    """Lint PATHS (files or folders; default: the current folder)."""
    _guarded(_lint, **kwargs)


def _guarded(func, /, *args, **kwargs):
    """Runs a command body; whatever goes wrong is one line on stderr and exit 2, never a
    traceback (set INVARIANT_CHECK_DEBUG=1 to see it)."""
    try:
        return func(*args, **kwargs)
    except (SystemExit, click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except KeyboardInterrupt:
        # click would print "Aborted!" and exit 1, which reads as "findings"
        _fail("interrupted")
    except BrokenPipeError:
        # `invariant-check lint | head`: the reader left; say nothing more.
        _quiet_stdout()
        sys.exit(EXIT_ERROR)
    except Exception as exc:
        if os.environ.get("INVARIANT_CHECK_DEBUG"):
            raise
        detail = " ".join(str(exc).split())
        _fail(f"internal error: {type(exc).__name__}" + (f": {detail}" if detail else ""))


def _quiet_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _lint(paths, select, ignore, exclude, fmt, output, jobs, no_cache, cache_dir, statistics, config_file, warn_unused_ignores, show_source, no_prefilter):
    from .config import DEFAULT_EXCLUDES, ConfigError, check_codes, find_config, load_config
    from .discovery import discover
    from .registry import all_rules

    paths = list(paths) or ["."]
    try:
        cfg_path = config_file or find_config([Path(p) for p in paths])
        cfg = load_config(cfg_path)
        enabled = cfg.select if cfg.select is not None else list(all_rules())
        if select:
            enabled = check_codes(_split_codes(select), "--select")
        dropped = set(cfg.ignore) | set(check_codes(_split_codes(ignore), "--ignore"))
    except ConfigError as exc:
        _fail(str(exc))
    rules = [all_rules()[c] for c in dict.fromkeys(enabled) if c not in dropped]
    options = {r.CODE: cfg.rule_options(r.CODE) for r in rules}

    found = discover(paths, root=cfg.root, exclude=cfg.exclude + list(exclude), default_excludes=DEFAULT_EXCLUDES)
    cache = None
    if not no_cache:
        from .cache import Cache, config_key

        directory = cache_dir or cfg.cache_dir or (cfg.root / ".invariant-check-cache")
        cache = Cache(Path(directory), config_key([r.CODE for r in rules], options))
        cache.load()

    from .engine import Engine

    engine = Engine(
        rules,
        options,
        prefilter=not no_prefilter,
        jobs=jobs or cfg.jobs,
        cache=cache,
        warn_unused_ignores=warn_unused_ignores,
        per_file_ignores=cfg.per_file_ignores,
        root=cfg.root,
    )
    result = engine.lint(found.files)
    result.errors.extend(found.errors)
    result.errors.sort(key=lambda e: (e.path, e.line or 0))  # one order, wherever they arose
    result.files_seen += len(found.errors)

    from .formats import render
    from .formats.text import render_errors

    to_terminal = output is None and sys.stdout.isatty()
    if show_source is None:
        show_source = to_terminal
    text = render(fmt, result, rules, color=to_terminal and "NO_COLOR" not in os.environ, show_source=show_source, statistics=statistics)
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")  # not the locale's: SARIF/JSON readers expect UTF-8
        except OSError as exc:
            _fail(f"{output}: cannot write: {exc.strerror or exc}")
    else:
        click.echo(text, nl=False)
    if fmt == "text" and result.errors:
        click.echo(render_errors(result), err=True, nl=False)
    for warning in result.warnings:
        click.echo(f"invariant-check: warning: {warning}", err=True)
    if result.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if result.findings else EXIT_CLEAN)


@main.command(name="rules")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_cmd(fmt):
    """List every rule: code, name and summary."""
    _guarded(_rules, fmt)


def _rules(fmt):
    from .registry import all_rules

    rules = all_rules()
    if fmt == "json":
        import json

        click.echo(json.dumps([{"code": c, "name": r.NAME, "summary": r.SUMMARY} for c, r in rules.items()], indent=2))
        return
    width = max((len(r.NAME) for r in rules.values()), default=0)
    for code, r in rules.items():
        click.echo(f"{code}  {r.NAME:<{width}}  {r.SUMMARY}")


@main.command()
@click.argument("rule")
def explain(rule):
    """Print a rule's documentation and examples (RULE: code or name)."""
    _guarded(_explain, rule)


def _explain(rule):
    from .registry import all_rules, resolve_code

    codes = resolve_code(rule)
    if len(codes) > 1:
        _fail(f"{rule!r} names several rules ({', '.join(codes)}); give one code or name")
    if not codes:
        _fail(f"unknown rule {rule!r}; known: {', '.join(all_rules())}")
    r = all_rules()[codes[0]]
    click.echo(f"# {r.CODE} {r.NAME}\n\n{r.documentation()}", nl=False)
    if r.OPTIONS:
        click.echo("\n## Option defaults\n")
        for key, opt in r.OPTIONS.items():
            click.echo(f"- `{key}` = {opt.default!r}: {opt.help}")
    for title, examples in (("Flagged", r.INVALID), ("Not flagged", r.VALID)):
        if examples:
            click.echo(f"\n## {title} (tested examples)\n")
            for ex in examples[:3]:
                click.echo("```python\n" + ex.code.strip("\n") + "\n```")


def _add_runtime_commands() -> None:
    # The guard commands import vLLM lazily inside their bodies; defining them here is cheap.
    try:
        from .runtime_guards.commands import guards_command, report_command
    except Exception:  # a broken optional part must not take `lint` down with it
        return
    main.add_command(guards_command, "guards")
    main.add_command(report_command, "report")


_add_runtime_commands()

if __name__ == "__main__":  # pragma: no cover
    main()
