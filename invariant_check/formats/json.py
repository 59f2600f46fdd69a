"""`{"version": 1, "findings": [...], "errors": [...], "summary": {...}}`."""

from __future__ import annotations

import json
from collections import Counter


def render(result, rules, **_) -> str:
    counts = Counter(f.rule for f in result.findings)
    doc = {
        "version": 1,
        "findings": [f.to_dict() for f in result.findings],
        "errors": [
            {k: v for k, v in e.to_dict().items() if v is not None} for e in result.errors
        ],
        "summary": {
            "findings": len(result.findings),
            "errors": len(result.errors),
            "files_checked": result.files_seen,
            "files_parsed": result.files_parsed,
            "by_rule": dict(sorted(counts.items())),
        },
    }
    if getattr(result, "baselined", None) is not None:
        doc["summary"]["baselined"] = result.baselined  # findings a baseline held back
    return json.dumps(doc, indent=2) + "\n"
