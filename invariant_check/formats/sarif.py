"""SARIF 2.1.0 for GitHub code scanning."""

from __future__ import annotations

import json

from .. import __version__

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rule_descriptor(rule) -> dict:
    doc = rule.documentation()
    return {
        "id": rule.CODE,
        "name": rule.NAME,
        "shortDescription": {"text": rule.SUMMARY},
        "fullDescription": {"text": doc.split("\n\n")[0].strip() or rule.SUMMARY},
        "help": {"text": doc, "markdown": doc},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["correctness", "speculative-decoding"]},
    }


def render(result, rules, **_) -> str:
    descriptors = [_rule_descriptor(r) for r in rules]
    index = {r.CODE: i for i, r in enumerate(rules)}
    results = []
    for f in result.findings:
        res = {
            "ruleId": f.rule,
            "level": "error",
            "message": {"text": f.message + (f"\nHint: {f.hint}" if f.hint else "")},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.path, "uriBaseId": "%SRCROOT%"},
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
        results.append(res)
    notifications = [
        {
            "level": "error",
            "message": {"text": e.message},
            "locations": [
                {"physicalLocation": {"artifactLocation": {"uri": e.path, "uriBaseId": "%SRCROOT%"}}}
            ],
        }
        for e in result.errors
    ]
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
