"""What `lint` does with `--baseline`, `--write-baseline`, `--no-baseline` and `--add-noqa`, once
the rules have run: adopting the tool on a tree that already has findings.

    code = adopt(result, projects, sources, options)   # None: go on and report

- a baseline (`--baseline FILE`, else each configuration's `baseline`, unless `--no-baseline`)
  drops the findings it holds from `result` and adds IC902 findings for its unused entries;
- `--write-baseline FILE` writes the run's findings to FILE and reports nothing (exit 0);
- `--add-noqa` writes a suppression comment for each finding and reports nothing (exit 0).

Problems (a missing or broken baseline file, options that do not go together) raise
BaselineError with a one-line message; the command line exits 2 with it.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..adoption.baseline import (
    UNUSED,
    BaselineError,
    Fingerprints,
    Scope,
    apply,
    keys_of,
    load,
    merged_for_writing,
    render,
)
from ..lint.discovery import display_path


def _scope(projects, paths, cwd: Path, result) -> Scope:
    files = {os.path.abspath(f) for p in projects for f in p.files}
    folders = [os.path.abspath(cwd / p) for p in paths if p != "-" and os.path.isdir(cwd / p)]
    return Scope(files, folders, {r.CODE for r in result.rules})


def adopt(result, projects, sources, options) -> int | None:
    """`options`: the run's `LintOptions` (its paths, cwd and adoption flags)."""
    paths, cwd, use_stdin = list(options.paths), options.cwd, options.use_stdin
    baseline, write_baseline = options.baseline, options.write_baseline
    no_baseline, add_noqa = options.no_baseline, options.add_noqa
    if add_noqa and write_baseline is not None:
        raise BaselineError("--add-noqa and --write-baseline do not go together: choose one way to adopt")
    if use_stdin and (add_noqa or write_baseline is not None):
        flag = "--add-noqa" if add_noqa else "--write-baseline"
        raise BaselineError(f"{flag} writes files: it cannot be used with standard input")
    if baseline is not None and no_baseline:
        raise BaselineError("--baseline and --no-baseline do not go together")
    prints = Fingerprints(cwd, sources)
    if write_baseline is not None:
        return _write(result, projects, paths, cwd, prints, Path(os.path.abspath(cwd / write_baseline)))
    if not no_baseline:
        _apply(result, projects, paths, cwd, prints, baseline)
    if add_noqa:
        return _add_noqa(result, cwd)
    return None


def _apply(result, projects, paths, cwd, prints, option: Path | None) -> None:
    # which baseline covers which files: the command line's covers all, else each project's own
    groups: dict[Path, list] = {}
    if option is not None:
        groups[Path(os.path.abspath(cwd / option))] = list(projects)
    else:
        for project in projects:
            if project.config.baseline is not None and project.files:
                groups.setdefault(project.config.baseline, []).append(project)
    if not groups:
        return
    matched = 0
    findings = list(result.findings)
    for path, members in groups.items():
        base = load(path, display_path(path, cwd))
        scope = _scope(members, paths, cwd, result)
        mine = [f for f in findings if str(prints.absolute(f.path)) in scope.files]
        others = [f for f in findings if str(prints.absolute(f.path)) not in scope.files]
        applied = apply(mine, base, prints, scope, display_path(path, cwd), UNUSED[0] in scope.rules)
        matched += applied.matched
        findings = others + applied.findings
    from ..api.types import Finding

    result.findings = sorted(findings, key=Finding.sort_key)
    result.baselined = matched


def _write(result, projects, paths, cwd, prints, target: Path) -> int:
    old = load(target, display_path(target, cwd)) if target.exists() else None
    scope = _scope(projects, paths, cwd, result)
    new = keys_of(result.findings, prints, target.parent)
    counts = merged_for_writing(new, old, scope)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(render(counts), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        raise BaselineError(f"{display_path(target, cwd)}: cannot write: {exc.strerror or exc}") from None
    kept = sum(counts.values()) - sum(new.values())
    files = len({k.path for k in new})
    n = sum(new.values())
    message = (f"wrote {display_path(target, cwd)}: {n} finding{'s' * (n != 1)} in {files} "
               f"file{'s' * (files != 1)} ({len(new)} entr{'ies' if len(new) != 1 else 'y'})")
    if kept:
        message += f"; kept {kept} of files this run did not lint"
    click.echo(f"invariant-check: {message}", err=True)
    if result.errors:
        from ..formats.text import render_errors

        click.echo(render_errors(result), err=True, nl=False)
        return 2
    return 0


def _add_noqa(result, cwd: Path) -> int:
    from ..adoption.add_noqa import add_noqa

    done = add_noqa(result.findings, cwd)
    for why in done.skipped:
        click.echo(f"invariant-check: warning: {why}", err=True)
    n, files = done.comments, len(done.files)
    click.echo(f"invariant-check: added {n} suppression comment{'s' * (n != 1)} "
               f"({done.findings} finding{'s' * (done.findings != 1)}) in {files} file{'s' * (files != 1)}"
               + (f"; {done.left} finding{'s' * (done.left != 1)} about comments or baseline entries left to fix"
                  if done.left else ""), err=True)
    if result.errors:
        from ..formats.text import render_errors

        click.echo(render_errors(result), err=True, nl=False)
        return 2
    return 0
