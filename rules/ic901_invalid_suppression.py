"""IC901: a suppression comment that names no rule, or is no directive at all."""

from __future__ import annotations

from invariant_check.api.rule import Rule
from invariant_check.api.types import Invalid, Valid


class InvalidSuppression(Rule):
    """
    ## What it does
    Flags a comment that is shaped like a suppression but does not follow the one grammar
    invariant-check reads ([suppression comments](../configuration.md#suppression-comments)),
    or that names no rule. The comment is quoted as written, and the hint gives the spelling to
    write instead. Flagged:

    - a near spelling of the head: `# invariant-check ignore[IC002]` (no colon),
      `# invariant_check: ignore[IC002]`, `# Invariant-Check: ...`, `# invariant-check : ...`,
      or of the directive: `IGNORE[...]`, `disable[...]`, `ignroe[...]`, `skip_file`;
    - codes that are not in square brackets right after `ignore`:
      `# invariant-check: ignore IC002` (which must not read as the blanket form),
      `ignore [IC002]`, `ignore(IC002)`, `ignore: IC002`; codes separated otherwise than by
      commas (`ignore[IC001; IC002]`, `ignore[IC001 IC002]`); text after a bare `ignore` that
      is not a `-- reason`;
    - a code in lower case or a name in upper case (`ignore[ic002]`): codes are written in
      upper case, names in lower case, exactly as `invariant-check rules` lists them;
    - a code or name that names no rule (`ignore[IC02]`, `# noqa: IC33`; a close one is
      suggested), an empty `ignore[]`, `ignore[*]` or `ignore[all]` (the blanket form is a bare
      `ignore`), an unclosed `[`, `skip-file[...]`;
    - `# noqa IC002`, `# noqa : IC002`, `# noqa(IC002)` and `# noqa: ic002` when they name
      one of our codes (flake8 reads `noqa` without the colon as a bare `# noqa`);
    - another tool's syntax naming one of our codes: `# type: ignore[IC002]`,
      `# pylint: disable=IC002`, `# ruff: noqa: IC002`.

    Such a comment suppresses nothing; in a list, a code that names no rule (or is spelt in the
    wrong case) is dropped and the others still count. A bare `# noqa` and `# noqa: E501` are
    other tools' comments and are left alone, as is prose that merely mentions the tool.

    On in every run, whatever `select` says: a mistyped suppression would otherwise be a
    silent no-op. Only `ignore` or `per-file-ignores` naming IC901 turn it off.

    ## Why is this bad?
    The finding the comment was written for is still reported (or, worse, the author believes
    it is suppressed and stops looking); a typo in a suppression hides nothing and says nothing.
    Worse still is a near spelling that silences more than it names: read loosely,
    `# invariant-check: ignore IC002` would be the blanket form and hide every rule's finding
    on the line.

    ## Example
    ```python
    md = builder.build(common)  # invariant-check: ignore IC002
    md = builder.build(common)  # noqa IC002
    md = builder.build(common)  # invariant-check: ignore[IC02]
    ```

    ## Use instead
    ```python
    md = builder.build(common)  # invariant-check: ignore[IC002]
    md = builder.build(common)  # noqa: IC002
    md = builder.build(common)  # invariant-check: ignore[IC002] -- compacted by the caller
    ```

    ## Fix
    None: as written the comment suppresses nothing, and respelling it would make it start
    suppressing, which is the author's decision. The hint gives the spelling to write.

    ## Options
    None.
    """

    CODE = "IC901"
    NAME = "invalid-suppression"
    SUMMARY = "A suppression comment that is misspelt or names no rule, and so suppresses nothing (always on)."
    HINT = (
        "Write `# invariant-check: ignore[CODE, ...]` with codes (IC002) or names "
        "(skip-topk-without-compaction) as `invariant-check rules` lists them."
    )
    # Reported by the engine while reading suppressions; it never visits syntax trees.
    EMITTED_BY_ENGINE = True
    ALWAYS_ENABLED = True
    TRIGGERS = ("invariant-check:", "noqa")

    VALID = [
        Valid("x = compute()  # invariant-check: ignore[IC002]\n"),
        Valid("x = compute()  # invariant-check: ignore[skip-topk-without-compaction]\n"),
        # a reason after the brackets, or after a bare ignore with `--`
        Valid("x = compute()  # invariant-check: ignore[IC002, IC001] compacted by the caller\n"),
        Valid("x = compute()  # invariant-check: ignore -- generated code\n"),
        # other tools' comments, and prose that mentions the tool
        Valid("x = compute()  # noqa: E501, ICN001\n"),
        Valid("x = compute()  # noqa\n"),
        Valid("x = compute()  # type: ignore[attr-defined]\n"),
        Valid("# Invariant check: the rows were compacted above.\nx = compute()\n"),
    ]
    INVALID = [
        Invalid("x = compute()  # invariant-check: ignore[IC02]\n", line=1, column=16, message_contains="`IC02`"),
        Invalid("x = compute()  # invariant-check: ignroe[IC002]\n", line=1, message_contains="ignroe"),
        Invalid("x = compute()  # noqa: E501, IC33\n", line=1, message_contains="`# noqa: E501, IC33`"),
        Invalid("x = compute()  # invariant-check: ignore[]\n", line=1),
        # codes without brackets: not the blanket form
        Invalid("x = compute()  # invariant-check: ignore IC002\n", line=1, message_contains="square brackets"),
        Invalid("x = compute()  # invariant-check: ignore [IC002]\n", line=1, message_contains="No space"),
        Invalid("x = compute()  # invariant-check: ignore[IC001; IC002]\n", line=1, message_contains="commas"),
        Invalid("x = compute()  # invariant-check: ignore[ic002]\n", line=1, message_contains="`IC002`"),
        # near spellings of the head
        Invalid("x = compute()  # invariant-check ignore[IC002]\n", line=1, message_contains="colon"),
        Invalid("x = compute()  # invariant_check: ignore[IC002]\n", line=1, message_contains="`invariant_check`"),
        Invalid("x = compute()  # noqa IC002\n", line=1, message_contains="`# noqa IC002`"),
        # another tool's syntax naming our code
        Invalid("x = compute()  # pylint: disable=IC002\n", line=1, message_contains="pylint"),
    ]
