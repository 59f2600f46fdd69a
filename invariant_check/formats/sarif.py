"""SARIF 2.1.0 for GitHub code scanning."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from urllib.parse import quote

from .. import __version__


def _uri(path: str) -> dict:
    """A relative path stays relative to %SRCROOT% (what code scanning maps onto the checkout);
    an absolute one becomes a file:// URI. Either is percent-encoded."""
    if path.startswith("/"):
        return {"uri": PurePosixPath(path).as_uri()}
    # bytes as the file system has them: a name that is not UTF-8 still gets a valid URI
    raw = path.encode("utf-8", "surrogateescape")
    return {"uri": quote(raw, safe="/"), "uriBaseId": "%SRCROOT%"}


def _full_description(doc: str, fallback: str) -> str:
    # The first prose paragraph: markdown headings ("## What it does") are not a description.
    for para in doc.split("\n\n"):
        text = "\n".join(l for l in para.splitlines() if not re.match(r"\s*#", l)).strip()
        if text and not text.startswith("```"):
            return " ".join(text.split())
    return fallback

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _level(rule) -> str:
    # findings about suppression comments (IC900, IC901) are not invariant bugs
    return "warning" if getattr(rule, "EMITTED_BY_ENGINE", False) else "error"


def _rule_descriptor(rule) -> dict:
    doc = rule.documentation()
    return {
        "id": rule.CODE,
        "name": rule.NAME,
        "shortDescription": {"text": rule.SUMMARY},
        "fullDescription": {"text": _full_description(doc, rule.SUMMARY)},
        "help": {"text": doc, "markdown": doc},
        "defaultConfiguration": {"level": _level(rule)},
        "properties": {"tags": ["suppression"] if _level(rule) == "warning" else ["correctness", "speculative-decoding"]},
    }


def _fix(f) -> dict:
    """The finding's fix as SARIF has it: replacements of regions of the one file it edits
    (an empty region inserts)."""
    return {
        "description": {"text": f.fix.message},
        "artifactChanges": [
            {
                "artifactLocation": _uri(f.path),
                "replacements": [
                    {
                        "deletedRegion": {
                            "startLine": e.line,
                            "startColumn": e.column,
                            "endLine": e.end_line,
                            "endColumn": e.end_column,
                        },
                        "insertedContent": {"text": e.content},
                    }
                    for e in f.fix.edits
                ],
            }
        ],
        "properties": {"applicability": f.fix.applicability},
    }


def _notification(e) -> dict:
    """A file that could not be linted, as a tool execution notification (the place SARIF has
    for what kept the tool from doing its job)."""
    where: dict = {"artifactLocation": _uri(e.path)}
    if e.line:
        where["region"] = {"startLine": e.line, **({"startColumn": e.column} if e.column else {})}
    return {
        "level": "error",
        "message": {"text": f"{e.path}: {e.message}"},
        "descriptor": {"id": "file-not-linted"},
        "locations": [{"physicalLocation": where}],
    }


def render(result, rules, **_) -> str:
    from ..api.registry import all_rules

    rules = list(rules)
    known = {r.CODE for r in rules}
    # a finding of a rule the caller did not list still gets its descriptor (library callers)
    for code in sorted({f.rule for f in result.findings} - known):
        if code in all_rules():
            rules.append(all_rules()[code])
    descriptors = [_rule_descriptor(r) for r in rules]
    levels = {r.CODE: _level(r) for r in rules}
    index = {d["id"]: i for i, d in enumerate(descriptors)}
    results = []
    for f in result.findings:
        res = {
            "ruleId": f.rule,
            "level": levels.get(f.rule, "error"),
            "message": {"text": f.message + (f"\nHint: {f.hint}" if f.hint else "")},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _uri(f.path),
                        "region": {
                            "startLine": f.line,
                            "startColumn": f.column,
                            "endLine": f.end_line,
                            "endColumn": f.end_column,
                        },
                    }
                }
            ],
        }
        if f.rule in index:
            res["ruleIndex"] = index[f.rule]
        if f.fix is not None:
            res["fixes"] = [_fix(f)]
        if isinstance(f.data, dict) and f.data:
            # what the rule knew (the stale fields, the loop line, how a name was resolved):
            # the same object as the JSON format's `data`
            res["properties"] = f.data
        results.append(res)
    notifications = [_notification(e) for e in result.errors]
    doc = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "invariant-check",
                        "version": __version__,
                        "rules": descriptors,
                    }
                },
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not result.errors,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "columnKind": "unicodeCodePoints",
            }
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def _notification(e) -> dict:
    """A file that could not be linted; a rule's internal error also names the rule and the
    line of the definition it was checking."""
    location: dict = {"artifactLocation": _uri(e.path)}
    if e.line:
        location["region"] = {"startLine": e.line, **({"startColumn": e.column} if e.column else {})}
    out = {"level": "error", "message": {"text": e.message}, "locations": [{"physicalLocation": location}]}
    if getattr(e, "rule", None):
        out["associatedRule"] = {"id": e.rule}
    return out
