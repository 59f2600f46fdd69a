"""The `invariant-check` command: a thin click layer over config, engine and formats."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import click

from .. import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _fail(message: str) -> None:
    click.echo(f"invariant-check: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


# Commands of other linters that people type by habit (ruff check, flake8-style runners)
HABITS = {"check": "lint"}


class _Commands(click.Group):
    """A command that does not exist gets click's usage error, with the command meant."""

    def resolve_command(self, ctx, args):
        name = args[0] if args else None
        if name is not None and not name.startswith("-") and self.get_command(ctx, name) is None:
            import difflib

            known = self.list_commands(ctx)
            meant = HABITS.get(name.lower()) or next(iter(difflib.get_close_matches(name.lower(), known, n=1)), None)
            if meant in known:
                ctx.fail(f"No such command {name!r}. Did you mean {meant!r}?")
        return super().resolve_command(ctx, args)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
    _check_environment()
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


def _check_environment() -> None:
    """The linter's own environment variables hold values their table lists (as the guards'
    are checked when vLLM loads them): a misspelt value is one line and exit 2, not ignored."""
    from ..settings.envvars import VARS, EnvError, get

    for var in VARS:
        if var.part == "lint":
            try:
                get(var.name)
            except EnvError as exc:
                _fail(str(exc))


def _debug() -> bool:
    from ..settings.envvars import EnvError, get

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


def _lint(**flags):
    from ..settings.config import ConfigError
    from ..settings.options import LintOptions
    from ..lint.projects import ProjectIndex, lint_run
    from ..api.registry import all_rules

    all_rules()  # a broken rule package fails here, even for a run that finds no file
    # One run, then exit. Syntax trees and facts are many small objects without reference
    # cycles: the cyclic collector would rescan them again and again (about a tenth of a
    # run) and free nothing; reference counting frees what dies. Workers inherit this.
    gc.disable()
    fixing = None
    try:
        options = LintOptions.from_flags(Path.cwd(), **flags)
        index = ProjectIndex(options.config_file, options.cwd, options.config_paths)
        data = click.get_binary_stream("stdin").read() if options.use_stdin else None
        result, sources = lint_run(options, index, data)
        if options.fix or options.diff:
            fixing = _fixes(options, index, result, data)
            result = fixing.result
            if options.use_stdin:
                sources = {next(iter(sources)): fixing.fixed.get(options.stdin_path, data)}
    except ConfigError as exc:
        _fail(str(exc))
    if fixing is not None:
        from ..fixing.fixes import report_fixes

        report_fixes(fixing, diff=options.diff, stdin=options.stdin_path if options.use_stdin else None, cwd=options.cwd)
        _hidden_fixes(fixing, options)
        if options.diff:
            _finish_diff(fixing, result, options)
        if options.use_stdin:
            out = click.get_binary_stream("stdout")
            out.write(next(iter(sources.values())))
            out.flush()
    # baselines, --write-baseline, --add-noqa (adopt.py)
    from .adopt import BaselineError, adopt

    try:
        code = adopt(result, index.order, sources, options)
    except BaselineError as exc:
        _fail(str(exc))
    if code is not None:
        sys.exit(code)
    _report(result, options, sources, fixing)


def _fixes(options, index, result, data):
    """`--fix`/`--diff`: the fixes of `result`, relinted until nothing changes (nothing written)."""
    from ..fixing.fixes import FixError, run_fixes
    from ..lint.projects import lint_run

    relint = lambda given: lint_run(options, index, data, given)[0]  # noqa: E731
    read = (lambda _path: data) if options.use_stdin else None
    try:
        fixing = run_fixes(result, relint, unsafe=options.unsafe_fixes, cwd=options.cwd, read=read)
    except FixError as exc:
        _fail(str(exc))
    fixing.result.warnings.extend(fixing.notes)
    return fixing


def _hidden_fixes(fixing, options) -> None:
    """How many fixes were left out for want of `--unsafe-fixes` (as ruff says it), on standard
    error; the text report of `--fix` says it in its summary."""
    n = fixing.unsafe_left
    if not n or options.quiet or (options.fix and not options.diff and options.fmt == "text"):
        return
    what = "shown" if options.diff else "applied"
    click.echo(f"invariant-check: {n} fix{'es' * (n != 1)} available with `--unsafe-fixes` "
               f"(not {what}; review them with `--diff --unsafe-fixes`)", err=True)


def _report(result, options, sources, fixing) -> None:
    from ..formats import report
    from ..formats.text import render_errors

    to_terminal = options.output is None and sys.stdout.isatty()
    text = report(result, options, to_terminal=to_terminal, color=to_terminal and "NO_COLOR" not in os.environ,
                  sources=sources, fixing=fixing)
    if options.output is not None:
        try:
            options.output.write_text(text, encoding="utf-8")  # not the locale's: SARIF/JSON readers expect UTF-8
        except OSError as exc:
            _fail(f"{options.output}: cannot write: {exc.strerror or exc}")
    else:
        # `lint - --fix` prints the fixed source on stdout (as ruff does): the report goes to stderr
        click.echo(text, nl=False, err=fixing is not None and options.use_stdin)
    if result.errors:
        # on standard error in every format (JSON, SARIF and github carry them too): a CI log
        # says which file could not be linted, whatever the report went into
        click.echo(render_errors(result), err=True, nl=False)
    if options.verbose:
        click.echo(_outside_report(result.outside), err=True, nl=False)
    if not options.quiet:
        for warning in result.warnings:
            click.echo(f"invariant-check: warning: {warning}", err=True)
    if result.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if result.findings and not options.exit_zero else EXIT_CLEAN)


def _outside_report(outside: dict[str, str]) -> str:
    if not outside:
        return "invariant-check: no module was imported from outside the project\n"
    lines = [f"invariant-check: {len(outside)} module(s) imported from outside the project:"]
    width = max(len(n) for n in outside)
    lines += [f"  {name:<{width}}  {how}" for name, how in sorted(outside.items())]
    return "\n".join(lines) + "\n"


def _finish_diff(fixing, result, options):
    """`--diff`: the diff is the output; exit 1 when there is a fix, 2 when linting failed."""
    from ..formats.text import render_errors

    if result.errors:
        click.echo(render_errors(result), err=True, nl=False)
    if not options.quiet:
        for warning in result.warnings:
            click.echo(f"invariant-check: warning: {warning}", err=True)
    sys.exit(EXIT_ERROR if result.errors else EXIT_FINDINGS if fixing.changed else EXIT_CLEAN)


@main.command(name="rules")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def rules_cmd(fmt):
    """List every rule: code, name and summary."""
    _guarded(_rules, fmt)


def _rules(fmt):
    from ..api.registry import all_rules

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
@click.option("--examples", is_flag=True, help="The whole page: every section, the tested examples and the fix's diff.")
@click.option("--no-pager", is_flag=True, help="Never page, however long the page (also: PAGER=cat).")
def explain(rule, fmt, examples, no_pager):
    """Print what a rule finds, why, an example, the fix and its options (RULE: code or name)."""
    _guarded(_explain, rule, fmt, not no_pager, examples)


def _explain(rule, fmt="auto", pager=True, examples=False):
    from .explain import markdown, show, unknown_rule_message
    from ..api.registry import all_rules, resolve_code

    codes = resolve_code(rule)
    if len(codes) > 1:
        _fail(f"{rule!r} names several rules ({', '.join(codes)}); give one code or name")
    if not codes:
        _fail(unknown_rule_message(rule))
    show(markdown(all_rules()[codes[0]], examples), fmt, pager)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=str))
@click.option("--class", "class_name", metavar="NAME", help="Only the fields of this class (defined in PATHS, or named by the releases' evidence).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def derivations(paths, class_name, fmt):
    """Print the derived fields the rules know: what each is computed from, and the line that shows it.

    Without PATHS: what was learned from the vLLM releases the bundled models come from. With
    PATHS: what those files show too (memos, constructors, `replace(...)`, fields advanced
    together), as IC004 learns it from the code it reads."""
    _guarded(_derivations, list(paths), class_name, fmt)


def _derivations(paths, class_name, fmt):
    from .derivations import InputError, run

    try:
        run(paths, class_name, fmt)
    except InputError as exc:
        _fail(str(exc))


@main.command()
@click.option("--stdio", is_flag=True, help="Talk over standard input/output (the only transport; for clients that pass it).")
def server(stdio):
    """Run the language server (LSP) over standard input/output; needs the `server` extra."""
    from ..server import main as serve

    _guarded(serve)


def _add_runtime_commands() -> None:
    # The guard commands import vLLM lazily inside their bodies; defining them here is cheap.
    try:
        from ..runtime_guards.commands import guards_command, report_command
    except Exception:  # a broken optional part must not take `lint` down with it
        return
    main.add_command(guards_command, "guards")
    main.add_command(report_command, "report")


_add_runtime_commands()

if __name__ == "__main__":  # pragma: no cover
    main()
