#!/usr/bin/env python3
"""Writes docs/rules/: one page per rule, generated from the rule classes, and an index.

    python scripts/gen_rule_docs.py            # (re)write the pages
    python scripts/gen_rule_docs.py --check    # exit 1 if a page is stale, missing or extra

A page holds the rule's code, name and summary, its docstring (What it does / Why is this bad? /
Example / Use instead / Options), its option defaults as a table and as a pyproject snippet, and
every VALID/INVALID example that tests/test_rule_examples.py runs, each with the comment written
above it in the rule's source. Rules are found the way the linter finds them
(`invariant_check.api.registry.all_rules()`), so a new rule module gets its page with no change here.
Exit status: 0 up to date (or written), 1 stale pages (--check), 2 the pages could not be made.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "docs" / "rules"
INDEX = "README.md"  # GitHub shows a folder's README when the folder is opened
COMMAND = "python scripts/gen_rule_docs.py"
KIND_NAMES = {list: "list of strings", str: "string", bool: "boolean", int: "integer", dict: "table of lists"}


def page_name(rule: type) -> str:
    return f"{rule.CODE}-{rule.NAME}.md"


def source_path(rule: type) -> str:
    """The rule module's path in the repository (not in site-packages): stable wherever the
    package is installed. `rules/` and `runtime_guards/` install under `invariant_check.`."""
    parts = rule.__module__.split(".")
    if parts[:2] == ["invariant_check", "rules"]:
        parts = ["rules", *parts[2:]]
    elif parts[:2] == ["invariant_check", "runtime_guards"]:
        parts = ["runtime_guards", *parts[2:]]
    return "/".join(parts) + ".py"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


def toml_key(key: str) -> str:
    return key if all(c.isalnum() or c in "-_" for c in key) else json.dumps(key)


def example_captions(rule: type) -> dict[str, list[str]]:
    """The comment lines written right above each `Valid(...)`/`Invalid(...)` in the rule's
    class body, per list; a list that is not a literal of as many items gets no captions."""
    try:
        source = inspect.getsource(sys.modules[rule.__module__])
    except (OSError, TypeError, KeyError):
        return {}
    lines = source.splitlines()
    captions: dict[str, list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name == rule.__name__):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.List)):
                continue
            for target in stmt.targets:
                if not (isinstance(target, ast.Name) and target.id in ("VALID", "INVALID")):
                    continue
                if len(stmt.value.elts) != len(getattr(rule, target.id)):
                    continue
                found = []
                for elt in stmt.value.elts:
                    comment: list[str] = []
                    row = elt.lineno - 2  # the line above, 0-based
                    while row >= 0 and lines[row].strip().startswith("#"):
                        comment.insert(0, lines[row].strip().lstrip("#").strip())
                        row -= 1
                    found.append(" ".join(c for c in comment if c))
                captions[target.id] = found
    return captions


def _fence(code: str, lang: str = "python") -> str:
    body = textwrap.dedent(code).strip("\n")
    fence = "```"
    while fence in body:
        fence += "`"
    return f"{fence}{lang}\n{body}\n{fence}"


def _code(text: str) -> str:
    """Inline code that survives backticks in the text (CommonMark: a longer backtick run)."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def render_example(kind: str, number: int, example: Any, caption: str, reported_in: str | None = None) -> str:
    """`reported_in`: the file of `example.files` the rule reports in (IC902: the baseline),
    when it is not the example's code."""
    lead = f"**{number}.**"
    if caption:
        lead += " " + caption.rstrip(".") + "."
    if kind == "INVALID":
        reported = example.files[reported_in] if reported_in else example.code
        code_lines = textwrap.dedent(reported).lstrip("\n").splitlines()
        where = f"line {example.line}" + (f", column {example.column}" if example.column else "")
        where += f" of `{reported_in}`" if reported_in else ""
        lead += f" Reported at {where}"
        if 0 < example.line <= len(code_lines):
            lead += ": " + _code(code_lines[example.line - 1].strip())
        lead += "."
        if example.message_contains:
            lead += f" The message contains {_code(example.message_contains)}."
    if example.options:
        settings = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in example.options.items())
        lead += f" With options {_code(settings)}."
    parts = [lead, "", _fence(example.code)]
    for name, code in example.files.items():
        lang = {"json": "json", "toml": "toml"}.get(name.rsplit(".", 1)[-1], "python")
        parts += ["", f"Beside it, `{name}`:", "", _fence(code, lang)]
    return "\n".join(parts)


def render_options(rule: type) -> str:
    rows = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for key, opt in rule.OPTIONS.items():
        kind = KIND_NAMES.get(opt.kind, getattr(opt.kind, "__name__", str(opt.kind)))
        default = toml_value(opt.default).replace("|", "\\|")
        meaning = opt.help.replace("|", "\\|")
        rows.append(f"| `{key}` | {kind} | {_code(default)} | {meaning} |")
    snippet = [f"[tool.invariant-check.options.{rule.CODE}]"]
    snippet += [f"{toml_key(k)} = {toml_value(o.default)}" for k, o in rule.OPTIONS.items()]
    return "\n".join(rows) + "\n\nIn `pyproject.toml`, with every default spelt out:\n\n" + _fence(
        "\n".join(snippet), "toml"
    )


def render_page(rule: type) -> str:
    src = source_path(rule)
    out = [
        f"<!-- Generated by {COMMAND} from {src}: edit the rule, then rerun it. -->",
        f"# {rule.CODE} `{rule.NAME}`",
        "",
        f"> {rule.SUMMARY}",
        "",
        f"Source: [`{src}`](../../{src}). In the terminal: `invariant-check explain {rule.CODE}`. "
        f"Select or ignore it by code (`{rule.CODE}`) or name (`{rule.NAME}`); see "
        "[configuration](../configuration.md).",
        "",
        rule.documentation().strip(),
    ]
    if rule.OPTIONS:
        out += ["", "## Option defaults", "", render_options(rule)]
    from invariant_check.fixing.fixes import example_fix

    fixed = example_fix(rule)
    if fixed:
        out += [
            "",
            "## The fix on an example",
            "",
            "The first flagged example below that gets a fix: the fix's message, then the diff "
            "`invariant-check lint --diff --unsafe-fixes` prints for it (`tests/test_fixes.py` applies "
            "the fix of every flagged example that has one and lints the result again):",
            "",
            fixed.rstrip("\n"),
        ]
    captions = example_captions(rule)
    if rule.INVALID or rule.VALID:
        out += [
            "",
            "## Tested examples",
            "",
            "`tests/test_rule_examples.py` runs each one through the linter, with and without the "
            "prefilter: the flagged ones must be reported at the line given, the others not at all.",
        ]
    for kind, title in (("INVALID", "Flagged"), ("VALID", "Not flagged")):
        examples = getattr(rule, kind)
        if not examples:
            continue
        out += ["", f"### {title}"]
        names = captions.get(kind) or [""] * len(examples)
        for i, (example, caption) in enumerate(zip(examples, names), 1):
            out += ["", render_example(kind, i, example, caption, getattr(rule, "EXAMPLE_REPORTED_IN", None))]
    return "\n".join(out) + "\n"


def render_index(rules: dict[str, type]) -> str:
    out = [
        f"<!-- Generated by {COMMAND}: do not edit. -->",
        "# Rules",
        "",
        "| code | name | what it finds |",
        "|---|---|---|",
    ]
    for code, rule in rules.items():
        out.append(f"| [{code}]({page_name(rule)}) | `{rule.NAME}` | {rule.SUMMARY} |")
    out += [
        "",
        "`invariant-check rules` prints this list and `invariant-check explain CODE` a rule's page "
        "in the terminal. Rules are selected and ignored by code, code prefix or name; options go "
        "under `[tool.invariant-check.options.CODE]` (see [configuration](../configuration.md)).",
    ]
    return "\n".join(out) + "\n"


def expected_pages() -> dict[str, str]:
    from invariant_check.api.registry import all_rules

    rules = all_rules()
    pages = {page_name(rule): render_page(rule) for rule in rules.values()}
    pages[INDEX] = render_index(rules)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale pages, write nothing")
    parser.add_argument("--docs-dir", type=Path, default=DEFAULT_DIR, help="default: docs/rules")
    args = parser.parse_args(argv)
    prog = "gen_rule_docs"
    try:
        pages = expected_pages()
    except Exception as exc:  # a rule that fails to import or render: one line, not a traceback
        print(f"{prog}: error: cannot render the rule pages: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    folder: Path = args.docs_dir
    if folder.exists() and not folder.is_dir():
        print(f"{prog}: error: {folder} is not a folder", file=sys.stderr)
        return 2
    present = {p.name for p in folder.glob("*.md")} if folder.is_dir() else set()
    problems = []
    for name in sorted(pages):
        path = folder / name
        if name not in present:
            problems.append((path, "missing"))
        elif path.read_text(encoding="utf-8") != pages[name]:
            problems.append((path, "stale"))
    problems += [(folder / name, "no rule generates it") for name in sorted(present - set(pages))]

    if args.check:
        for path, why in problems:
            print(f"{_show(path)}: {why}")
        if problems:
            print(f"{len(problems)} rule page(s) out of date; run: {COMMAND}")
            return 1
        print(f"{len(pages)} rule pages up to date in {_show(folder)}")
        return 0
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path, why in problems:
            if why == "no rule generates it":
                path.unlink()
            else:
                with open(path, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(pages[path.name])
    except OSError as exc:
        print(f"{prog}: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    for path, why in problems:
        print(f"{_show(path)}: {'removed' if why == 'no rule generates it' else 'written'}")
    print(f"{len(pages)} rule pages in {_show(folder)} ({len(problems)} changed)")
    return 0


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
