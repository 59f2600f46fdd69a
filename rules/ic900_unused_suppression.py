"""IC900: a suppression comment that suppresses nothing (reported by the engine itself)."""

from __future__ import annotations

from invariant_check.api.rule import Rule
from invariant_check.api.types import Invalid, Valid


class UnusedSuppression(Rule):
    """
    ## What it does
    Flags a suppression comment (`# invariant-check: ignore[...]`, a bare
    `# invariant-check: ignore`, or the IC codes of a `# noqa: ...`) that suppresses nothing in
    this run. (A comment that is misspelt, and so could suppress nothing, is IC901's.) Each rule named in a comment is checked on its own: in `ignore[IC002, IC001]`,
    an unused IC001 is reported even when IC002 is used. The comment is quoted as written.

    Off by default: turn it on with `--warn-unused-ignores`, `--extend-select IC900`, or
    `extend-select = ["IC900"]` in the configuration (selecting `IC` or `ALL` includes it).
    `ignore` and `per-file-ignores` naming IC900 turn it off again.

    A rule that is not enabled in the run is never reported as unused (a full run may need the
    comment), and neither are the comments of a file that could not be parsed or that holds
    `# invariant-check: skip-file`.

    ## Why is this bad?
    A suppression outlives the code it was written for. Once the finding is gone, the comment
    silently hides the next real finding on that line: exactly the invariant bug it was meant
    to let through once.

    ## Example
    ```python
    md = builder.build(common)  # invariant-check: ignore[IC001]
    ```

    ## Use instead
    ```python
    md = builder.build(common)
    ```

    A comment that names IC900 itself on the same line keeps that line quiet
    (`# invariant-check: ignore[IC003, IC900]`).

    ## Fix
    Safe (`--fix`): the comment suppresses nothing in this run. The unused codes leave the
    comment (`ignore[IC002, IC001]` with IC001 unused becomes `ignore[IC002]`;
    `# noqa: E501, IC001` keeps `# noqa: E501` for the tool it was written for); a directive left
    without codes is removed, then the comment if nothing else is in it, then the line if the
    comment was all of it.

    ## Options
    None.
    """

    CODE = "IC900"
    NAME = "unused-suppression"
    SUMMARY = "A suppression comment that suppresses nothing (off by default: --warn-unused-ignores)."
    HINT = "Remove the comment (or the unused codes), or move it to the line of the finding."
    # The engine reports it while applying suppressions; it never visits syntax trees.
    EMITTED_BY_ENGINE = True
    DEFAULT_ENABLED = False
    TRIGGERS = ("invariant-check:", "noqa")

    VALID = [
        Valid("x = compute()\n"),
        # IC003 is not enabled in this run: a full run may still need the comment
        Valid("x = compute()  # invariant-check: ignore[IC003]\n"),
        Valid("x = compute()  # noqa: E501\n"),
    ]
    INVALID = [
        Invalid("x = compute()  # invariant-check: ignore\n", line=1, column=16),
        Invalid(
            "def build(md):\n    return md  # invariant-check: ignore\n",
            line=2,
            message_contains="`# invariant-check: ignore`",
        ),
    ]
