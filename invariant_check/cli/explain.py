"""`invariant-check explain RULE`: a rule's page, as Markdown or rendered for a terminal.

    markdown(rule) -> str        the short page: `# CODE name`, what it finds, why, an example
                                 and its repair, the fix, the options, a pointer to the rest
    markdown(rule, examples=True)  the whole page: every section of the documentation, the
                                 option defaults, every tested example, and the diff the rule's
                                 fix makes on a flagged example
    show(text, fmt, pager)       prints it: rendered (headings, code blocks, wrapped to the
                                 terminal) when standard output is a terminal, through a pager
                                 when it is longer than the screen; the Markdown unchanged when
                                 it is not (a pipe, a file)
    unknown_rule_message(token)  the one-line error for a code or name that names no rule
"""

from __future__ import annotations

import os
import shutil
import sys

import click

MAX_WIDTH = 100  # prose wider than this is hard to read, whatever the terminal


# The sections of a rule's documentation that the short page keeps: what a user reads first.
SHORT_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix", "Options")


def markdown(rule, examples: bool = False) -> str:
    """The rule's page. By default the short one: what it finds, why, an example and its
    repair, the fix, the options, and a pointer to the rest; `examples`: the whole page, with
    every section, the tested examples and the diff of the rule's fix."""
    doc = rule.documentation()
    if not examples:
        return _short(rule, doc)
    parts = [f"# {rule.CODE} {rule.NAME}\n\n{doc}"]
    parts.append(_option_defaults(rule))
    shown: set[tuple[str, str]] = set()  # a module beside many examples is printed once
    for title, cases in (("Flagged", rule.INVALID), ("Not flagged", rule.VALID)):
        if cases:
            parts.append(f"\n## {title} (tested examples)\n\n")
            for i, ex in enumerate(cases):
                parts.append("\n" if i else "")
                parts.append("```python\n" + ex.code.strip("\n") + "\n```\n")
                for name, code in ex.files.items():  # other modules of the example, a baseline file
                    if (name, code.strip("\n")) in shown:
                        parts.append(f"\nBeside it, `{name}` as above.\n")
                        continue
                    shown.add((name, code.strip("\n")))
                    lang = "json" if name.endswith(".json") else "python"
                    parts.append(f"\nBeside it, `{name}`:\n\n```{lang}\n" + code.strip("\n") + "\n```\n")
    from ..fixing.fixes import example_fix  # (stdlib only: explain imports no libcst)

    fixed = example_fix(rule)
    if fixed:
        parts.append(f"\n## The fix, on the first flagged example that has one\n\n{fixed}")
    return "".join(parts)


def _option_defaults(rule) -> str:
    if not rule.OPTIONS:
        return ""
    lines = ["\n## Option defaults\n\n"]
    for key, opt in rule.OPTIONS.items():
        lines.append(f"- `{key}` = {opt.default!r}: {opt.help}\n")
    return "".join(lines)


def sections(doc: str) -> list[tuple[str | None, str]]:
    """(heading, text) for each `## ` section of a documentation (None: the text before the
    first one). Headings inside code blocks are text."""
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    fenced = False
    for line in doc.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            out.append((line[3:].strip(), []))
        out[-1][1].append(line)
    return [(h, "".join(t)) for h, t in out if h is not None or "".join(t).strip()]


def _short(rule, doc: str) -> str:
    kept, left = [], []
    for heading, text in sections(doc):
        if heading is None or heading in SHORT_SECTIONS:
            kept.append(text)
        else:
            left.append(heading)
    page = f"# {rule.CODE} {rule.NAME}\n\n" + "".join(kept).rstrip("\n") + "\n"
    more = []
    counts = [f"{len(rule.INVALID)} flagged", f"{len(rule.VALID)} not flagged"]
    more.append(f"- `invariant-check explain {rule.CODE} --examples`: the whole page, with the "
                f"tested examples ({', '.join(counts)}) and the diff of the rule's fix")
    if left:
        more.append("; it also has " + ", ".join(f"*{h}*" for h in left))
    page += "\n## More\n\n" + "".join(more) + ".\n"
    return page


def unknown_rule_message(token: str) -> str:
    from ..settings.config import did_you_mean
    from ..api.registry import all_rules

    rules = all_rules()
    pool = [*rules, *(r.NAME for r in rules.values())]
    return f"unknown rule {token!r}{did_you_mean([token], pool)}; known: {', '.join(rules)} (`invariant-check rules` lists them)"


def show(text: str, fmt: str = "auto", pager: bool = True) -> None:
    """`fmt`: "auto" (rendered on a terminal, Markdown otherwise), "terminal" or "markdown"."""
    to_terminal = sys.stdout.isatty()
    if fmt == "markdown" or (fmt == "auto" and not to_terminal):
        click.echo(text, nl=False)
        return
    from .markdown_term import render

    size = shutil.get_terminal_size((80, 24))
    color = to_terminal and "NO_COLOR" not in os.environ
    rendered = render(text, width=min(size.columns - 1, MAX_WIDTH), color=color)
    if pager and to_terminal and rendered.count("\n") >= size.lines:
        # click pages through $PAGER (default `less`, given -R for the colours)
        click.echo_via_pager(rendered)
    else:
        click.echo(rendered, nl=False)
