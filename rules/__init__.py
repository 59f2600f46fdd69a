"""The rules, one per module; installed as `invariant_check.rules`.

Modules whose names start with `_` hold shared helpers, not rules.
"""
