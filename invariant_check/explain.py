"""`invariant-check explain RULE`: a rule's page, as Markdown or rendered for a terminal.

    markdown(rule) -> str        the page: `# CODE name`, the documentation, the option
                                 defaults, up to three tested examples of each kind, and the
                                 diff the rule's fix makes on a flagged example
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


def markdown(rule) -> str:
    parts = [f"# {rule.CODE} {rule.NAME}\n\n{rule.documentation()}"]
    if rule.OPTIONS:
        parts.append("\n## Option defaults\n\n")
        for key, opt in rule.OPTIONS.items():
            parts.append(f"- `{key}` = {opt.default!r}: {opt.help}\n")
    for title, examples in (("Flagged", rule.INVALID), ("Not flagged", rule.VALID)):
        if examples:
            parts.append(f"\n## {title} (tested examples)\n\n")
            for i, ex in enumerate(examples[:3]):
                parts.append("\n" if i else "")
                parts.append("```python\n" + ex.code.strip("\n") + "\n```\n")
                for name, code in ex.files.items():  # other modules of the example, a baseline file
                    lang = "json" if name.endswith(".json") else "python"
                    parts.append(f"\nBeside it, `{name}`:\n\n```{lang}\n" + code.strip("\n") + "\n```\n")
    from .fixes import example_fix  # (stdlib only: explain imports no libcst)

    fixed = example_fix(rule)
    if fixed:
        parts.append(f"\n## The fix, on the first flagged example that has one\n\n{fixed}")
    return "".join(parts)


def unknown_rule_message(token: str) -> str:
    from .config import did_you_mean
    from .registry import all_rules

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
