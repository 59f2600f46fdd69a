"""Finds the rule classes in `invariant_check.rules` (one rule per module)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from .rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> dict[str, type[Rule]]:
    from . import rules as rules_pkg

    found: dict[str, type[Rule]] = {}
    for info in sorted(pkgutil.iter_modules(rules_pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{rules_pkg.__name__}.{info.name}")
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, Rule)
                and obj is not Rule
                and obj.__module__ == module.__name__
                and obj.CODE
            ):
                if obj.CODE in found:
                    raise RuntimeError(f"duplicate rule code {obj.CODE}")
                found[obj.CODE] = obj
    return dict(sorted(found.items()))


def resolve_code(token: str) -> list[str]:
    """Rule codes named by a code (IC001), a prefix (IC, IC00) or a rule name."""
    rules = all_rules()
    token = token.strip()
    if token in rules:
        return [token]
    by_name = [code for code, r in rules.items() if r.NAME == token]
    if by_name:
        return by_name
    prefix = [code for code in rules if code.startswith(token.upper())] if token else []
    if token.upper() == "ALL":
        return list(rules)
    return prefix


def emitted_by_engine(rule: type[Rule]) -> bool:
    """Rules such as IC900 that the engine reports itself (it never runs them on a tree)."""
    return bool(getattr(rule, "EMITTED_BY_ENGINE", False))


def default_codes() -> list[str]:
    """The rules a run enables when nothing is selected (IC900 is opt-in)."""
    return [c for c, r in all_rules().items() if getattr(r, "DEFAULT_ENABLED", True)]


def always_codes() -> list[str]:
    """Rules on whatever `select` says (only `ignore` turns them off): IC901."""
    return [c for c, r in all_rules().items() if getattr(r, "ALWAYS_ENABLED", False)]


def padded_code(token: str) -> str | None:
    """`IC2`, `IC02`, `ic02` -> `IC002` when that rule exists: a dropped zero is the usual typo,
    and string similarity alone cannot tell IC002 from IC902 for `IC02`."""
    import re

    m = re.fullmatch(r"(?i)ic(\d{1,2})", token.strip())
    if m is None:
        return None
    code = f"IC{int(m.group(1)):03d}"
    return code if code in all_rules() else None
