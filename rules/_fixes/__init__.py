"""The fix builders of the rules, one module per rule, kept apart from their detection.

Each module has `build(rule, report, view) -> Fix | None`, called through the rule's `fix`
method right after it reported: the edits are computed from the same syntax tree and text,
with `invariant_check.api.edits` (stdlib only), and `--fix` verifies them before writing.
"""
