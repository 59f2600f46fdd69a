"""The `invariant-check` command: a thin click layer over config, engine and formats."""

from __future__ import annotations

import gc
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
@click.option("--select", multiple=True, metavar="CODES", help="Only these rules (codes, prefixes or names; comma-separated); replaces the configuration's.")
@click.option("--extend-select", multiple=True, metavar="CODES", help="These rules too, besides the selected ones.")
@click.option("--ignore", multiple=True, metavar="CODES", help="Skip these rules (added to the configuration's).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files and folders matching GLOB, relative to the current folder (added to the configuration's).")
@click.option("--format", "--output-format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text", show_default=True, help="Report format.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write the report to FILE instead of stdout.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Worker processes for parsing [default: CPU count].")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), envvar="INVARIANT_CHECK_CACHE_DIR", help="Where the cache lives [default: .invariant-check-cache beside the configuration].")
@click.option("--statistics", is_flag=True, help="Also print the number of findings per rule.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), help="Use this pyproject.toml for every file instead of the nearest one.")
@click.option("--warn-unused-ignores", is_flag=True, help="Report suppression comments that suppress nothing (IC900; same as --extend-select IC900).")
@click.option("--respect-gitignore/--no-respect-gitignore", default=None, help="Skip files that .gitignore ignores [default: on, or the configuration's respect-gitignore].")
@click.option("--stdin-filename", metavar="PATH", help="Lint standard input (path `-`) as if it were the file PATH.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when something is found (2 still means the tool failed).")
@click.option("--quiet", "-q", is_flag=True, help="Print the findings only: no summary, no pointer to explain, no warnings.")
@click.option("--show-source/--no-show-source", default=None, help="Print the source line with a caret [default: on for terminals].")
@click.option("--baseline", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help="Report only findings not in this baseline file, and its entries that match nothing (IC902) [default: the configuration's `baseline`].")
@click.option("--write-baseline", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE", help="Write the findings to FILE as a baseline (keeping its entries of files not linted) and report nothing.")
@click.option("--no-baseline", is_flag=True, help="Ignore the configuration's `baseline`: report every finding.")
@click.option("--add-noqa", is_flag=True, help="Add a suppression comment, with a reason to fill in, for every finding; report nothing.")
@click.option("--python", "python", metavar="PATH", help="Read imports from outside the project from this interpreter's environment [default: the configuration's `python`, else the interpreter running invariant-check].")
@click.option("--verbose", "-v", is_flag=True, help="Also say, on stderr, which source answered for each module imported from outside the project.")
@click.option("--fix", is_flag=True, help="Apply the safe fixes, then report what is left.")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix or --diff, the unsafe fixes too (review them).")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff and write nothing; exit 1 when there is one.")
@click.option("--show-fixes", is_flag=True, help="With --fix, list the findings that were fixed.")
@click.option("--no-prefilter", is_flag=True, hidden=True, help="Parse every file (for testing the prefilter).")
def lint(**kwargs):
    """Lint PATHS (files or folders; default: the current folder; `-`: standard input)."""
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
        if _debug():
            raise
        detail = " ".join(str(exc).split())
        _fail(f"internal error: {type(exc).__name__}" + (f": {detail}" if detail else ""))


def _debug() -> bool:
    from .envvars import EnvError, get

    try:
        return bool(get("INVARIANT_CHECK_DEBUG"))
    except EnvError as exc:
        click.echo(f"invariant-check: warning: {exc}", err=True)
        return False


def _quiet_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _lint(paths, select, extend_select, ignore, exclude, fmt, output, jobs, no_cache, cache_dir, statistics, config_file, warn_unused_ignores, respect_gitignore, stdin_filename, exit_zero, quiet, show_source, python, verbose, fix, unsafe_fixes, diff, show_fixes, no_prefilter, **adoption):
    from .config import ConfigError, check_codes, interpreter_path
    from .globs import PathGlobs
    from .projects import ProjectIndex, RunSettings, Selection
    from .registry import all_rules

    all_rules()  # a broken rule package fails here, even for a run that finds no file
    # One run, then exit. Syntax trees and facts are many small objects without reference
    # cycles: the cyclic collector would rescan them again and again (about a tenth of a
    # run) and free nothing; reference counting frees what dies. Workers inherit this.
    gc.disable()
    paths = list(paths)
    use_stdin = paths == ["-"] or (stdin_filename is not None and not paths)
    if "-" in paths and not use_stdin:
        _fail("`-` (standard input) cannot be combined with other paths")
    if stdin_filename is not None and not use_stdin:
        _fail("--stdin-filename is for linting standard input: give `-` as the only path")
    paths = paths or ["."]
    cwd = Path.cwd()
    try:
        selection = Selection(
            select=check_codes(_split_codes(select), "--select") if select else None,
            extend_select=check_codes(_split_codes(extend_select), "--extend-select"),
            ignore=check_codes(_split_codes(ignore), "--ignore"),
            warn_unused_ignores=warn_unused_ignores,
        )
        index = ProjectIndex(config_file, cwd, [p for p in paths if p != "-"] if not use_stdin else [stdin_filename or "."])
        settings = RunSettings(
            selection, jobs=jobs, cache=not no_cache, cache_dir=cache_dir, prefilter=not no_prefilter,
            python=interpreter_path(python, cwd) if python else None,
        )
        cli_exclude = PathGlobs(exclude, cwd)
        if use_stdin:
            data = click.get_binary_stream("stdin").read()
            result, sources = _lint_stdin(data, stdin_filename, index, settings, cli_exclude, respect_gitignore, cwd)
        else:
            result, sources = _lint_paths(paths, index, settings, cli_exclude, respect_gitignore, cwd), {}
        fixing = None
        if fix or diff:
            from .fixes import FixError, run_fixes

            if use_stdin:
                where = Path(os.path.abspath(cwd / (stdin_filename if stdin_filename is not None else "-")))
                relint = lambda given: _lint_stdin(given.get(where, data), stdin_filename, index, settings, cli_exclude, respect_gitignore, cwd)[0]  # noqa: E731
                read = lambda _path: data  # noqa: E731
            else:
                relint = lambda given: _lint_paths(paths, index, settings, cli_exclude, respect_gitignore, cwd, given)  # noqa: E731
                read = None
            try:
                fixing = run_fixes(result, relint, unsafe=unsafe_fixes, cwd=cwd, read=read)
            except FixError as exc:
                _fail(str(exc))
            result = fixing.result
            result.warnings.extend(fixing.notes)
            if use_stdin:
                sources = {next(iter(sources)): fixing.fixed.get(where, data)}
    except ConfigError as exc:
        _fail(str(exc))
    if fixing is not None:
        from .fixes import report_fixes

        report_fixes(fixing, diff=diff, stdin=where if use_stdin else None, cwd=cwd)
        if diff:
            _finish_diff(fixing, result, quiet)
        if use_stdin:
            out = click.get_binary_stream("stdout")
            out.write(next(iter(sources.values())))
            out.flush()
    # baselines, --write-baseline, --add-noqa (adopt.py)
    from .adopt import BaselineError, adopt

    try:
        code = adopt(result, index.order, paths, cwd, sources, use_stdin=use_stdin, **adoption)
    except BaselineError as exc:
        _fail(str(exc))
    if code is not None:
        sys.exit(code)

    from .formats import render
    from .formats.text import render_errors

    to_terminal = output is None and sys.stdout.isatty()
    if show_source is None:
        show_source = to_terminal
    text = render(
        fmt,
        result,
        result.rules,
        color=to_terminal and "NO_COLOR" not in os.environ,
        show_source=show_source,
        statistics=statistics,
        quiet=quiet,
        sources=sources,
        fixing=fixing,
        show_fixes=show_fixes,
    )
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")  # not the locale's: SARIF/JSON readers expect UTF-8
        except OSError as exc:
            _fail(f"{output}: cannot write: {exc.strerror or exc}")
    else:
        # `lint - --fix` prints the fixed source on stdout (as ruff does): the report goes to stderr
        click.echo(text, nl=False, err=fixing is not None and use_stdin)
    if fmt == "text" and result.errors:
        click.echo(render_errors(result), err=True, nl=False)
    if verbose:
        click.echo(_outside_report(result.outside), err=True, nl=False)
    if not quiet:
        for warning in result.warnings:
            click.echo(f"invariant-check: warning: {warning}", err=True)
    if result.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if result.findings and not exit_zero else EXIT_CLEAN)


def _outside_report(outside: dict[str, str]) -> str:
    if not outside:
        return "invariant-check: no module was imported from outside the project\n"
    lines = [f"invariant-check: {len(outside)} module(s) imported from outside the project:"]
    width = max(len(n) for n in outside)
    lines += [f"  {name:<{width}}  {how}" for name, how in sorted(outside.items())]
    return "\n".join(lines) + "\n"


def _finish_diff(fixing, result, quiet):
    """`--diff`: the diff is the output; exit 1 when there is a fix, 2 when linting failed."""
    from .formats.text import render_errors

    if result.errors:
        click.echo(render_errors(result), err=True, nl=False)
    if not quiet:
        for warning in result.warnings:
            click.echo(f"invariant-check: warning: {warning}", err=True)
    sys.exit(EXIT_ERROR if result.errors else EXIT_FINDINGS if fixing.changed else EXIT_CLEAN)


def _lint_paths(paths, index, settings, cli_exclude, respect_gitignore, cwd, sources=None):
    from .discovery import discover
    from .projects import group, lint_projects

    found = discover(paths, scope_for=index.for_folder, exclude=cli_exclude, respect_gitignore=respect_gitignore, cwd=cwd)
    projects = group(found.files, index)
    for project in projects:
        project.listing = _listing(project, index, cli_exclude, respect_gitignore, cwd, found)
    result = lint_projects(projects, settings, cwd=cwd, sources=sources)
    from .config_checks import unmatched_per_file_ignores

    result.warnings.extend(unmatched_per_file_ignores(projects, paths, cwd))
    result.errors.extend(found.errors)
    result.errors.sort(key=lambda e: (e.path, e.line or 0))  # one order, wherever they arose
    # a path that does not exist was never a file to check; one that cannot be read was
    result.files_seen += len(found.errors) - found.not_found
    result.paths_not_found = found.not_found
    return result


def _listing(project, index, cli_exclude, respect_gitignore, cwd, known=None):
    """Every Python file of a project, found as discovery finds them (lazily: only a
    project-wide question asks). Folders the command line's discovery walked are not walked
    again."""
    from .discovery import discover

    def listing():
        found = discover([str(project.config.root)], scope_for=index.for_folder, exclude=cli_exclude,
                         respect_gitignore=respect_gitignore, cwd=cwd, known=known)
        return [p for p, scope in found.files if scope is project]

    return listing


def _lint_stdin(data, stdin_filename, index, settings, cli_exclude, respect_gitignore, cwd):
    """Standard input linted as the file it names; the rest of its project is read from disk
    for the cross-file facts (base classes, helpers), but only the buffer is reported."""
    from .discovery import display_path
    from .projects import lint_projects

    path = Path(os.path.abspath(cwd / (stdin_filename if stdin_filename is not None else "-")))
    project = index.for_folder(str(path.parent))
    # only the buffer is linted; the project model reads the rest of the project as needed
    project.files = [path]
    project.listing = _listing(project, index, cli_exclude, respect_gitignore, cwd)
    result = lint_projects([project], settings, cwd=cwd, sources={path: data})
    shown = display_path(path, cwd)
    result.findings = [f for f in result.findings if f.path == shown]
    result.errors = [e for e in result.errors if e.path == shown or e.path.startswith("<rule ")]
    result.files_seen = 1
    return result, {shown: data}


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
@click.option("--format", "fmt", type=click.Choice(["auto", "terminal", "markdown"]), default="auto", show_default=True,
              help="auto: rendered for a terminal (wrapped, paged), Markdown when piped.")
@click.option("--no-pager", is_flag=True, help="Never page, however long the page (also: PAGER=cat).")
def explain(rule, fmt, no_pager):
    """Print a rule's documentation and examples (RULE: code or name)."""
    _guarded(_explain, rule, fmt, not no_pager)


def _explain(rule, fmt="auto", pager=True):
    from .explain import markdown, show, unknown_rule_message
    from .registry import all_rules, resolve_code

    codes = resolve_code(rule)
    if len(codes) > 1:
        _fail(f"{rule!r} names several rules ({', '.join(codes)}); give one code or name")
    if not codes:
        _fail(unknown_rule_message(rule))
    show(markdown(all_rules()[codes[0]]), fmt, pager)


@main.command()
@click.option("--stdio", is_flag=True, help="Talk over standard input/output (the only transport; for clients that pass it).")
def server(stdio):
    """Run the language server (LSP) over standard input/output; needs the `server` extra."""
    from .server import main as serve

    _guarded(serve)


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
