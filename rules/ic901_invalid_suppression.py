"""IC901: a suppression comment that names no rule, or is no directive at all."""

from __future__ import annotations

from invariant_check.rule import Rule
from invariant_check.types import Invalid, Valid


class InvalidSuppression(Rule):
    """
    ## What it does
    Flags a suppression comment that cannot mean what its author wanted: a code or name that
    names no rule (`# invariant-check: ignore[IC02]`, `# noqa: IC33`), an empty list
    (`ignore[]`), or text after `invariant-check:` that is not a directive
    (`# invariant-check: ignroe[IC003]`). The comment is quoted as written, and a close code or
    name is suggested.

    On in every run, whatever `select` says: a mistyped suppression would otherwise be a
    silent no-op. Only `ignore` or `per-file-ignores` naming IC901 turn it off.

    Suppressions take exact rule codes (any case) or rule names, not prefixes; in `# noqa`
    comments only codes that start with `IC` are read, the rest belong to other tools.

    ## Why is this bad?
    The finding the comment was written for is still reported (or, worse, the author believes
    it is suppressed and stops looking); a typo in a suppression hides nothing and says nothing.

    ## Example
    ```python
    md = builder.build(common)  # invariant-check: ignore[IC02]
    ```

    ## Use instead
    ```python
    md = builder.build(common)  # invariant-check: ignore[IC002]
    ```

    ## Fix
    None: which rule a misspelled code meant is a guess. The message names the closest one.

    ## Options
    None.
    """

    CODE = "IC901"
    NAME = "invalid-suppression"
    SUMMARY = "A suppression comment that names no rule or is not a directive (always on)."
    HINT = (
        "Name rules by code (IC002) or name (skip-topk-without-compaction); "
        "`invariant-check rules` lists them."
    )
    # Reported by the engine while reading suppressions; it never visits syntax trees.
    EMITTED_BY_ENGINE = True
    ALWAYS_ENABLED = True
    TRIGGERS = ("invariant-check:", "noqa")

    VALID = [
        Valid("x = compute()  # invariant-check: ignore[IC002]\n"),
        Valid("x = compute()  # invariant-check: ignore[skip-topk-without-compaction]\n"),
        Valid("x = compute()  # noqa: E501, ICN001\n"),
    ]
    INVALID = [
        Invalid("x = compute()  # invariant-check: ignore[IC02]\n", line=1, column=16, message_contains="`IC02`"),
        Invalid("x = compute()  # invariant-check: ignroe[IC002]\n", line=1, message_contains="ignroe"),
        Invalid("x = compute()  # noqa: E501, IC33\n", line=1, message_contains="`# noqa: E501, IC33`"),
        Invalid("x = compute()  # invariant-check: ignore[]\n", line=1),
    ]
