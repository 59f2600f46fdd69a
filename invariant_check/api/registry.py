"""Finds the rule classes in `invariant_check.rules` (one rule per module)."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from functools import lru_cache

from .rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> dict[str, type[Rule]]:
    from .. import rules as rules_pkg

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


# -- a code or a name, as a suppression comment or a --select option writes it ------------------


def _rule_index() -> tuple[dict[str, str], dict[str, str]]:
    rules = all_rules()
    return {c.upper(): c for c in rules}, {r.NAME.lower(): c for c, r in rules.items() if r.NAME}


def named_rule(token: str) -> str | None:
    """The rule a token names, whatever its case (the spelling is checked separately: see
    `canonical_token`). Prefixes name nothing here (unlike --select): a suppression should say
    exactly what it silences."""
    by_code, by_name = _rule_index()
    return by_code.get(token.upper()) or by_name.get(token.lower())


def canonical_token(token: str) -> str | None:
    """The one accepted spelling of a token that names a rule: its code in upper case, or its
    name in lower case (whichever the token is)."""
    code = named_rule(token)
    if code is None:
        return None
    by_code, _ = _rule_index()
    return code if token.upper() in by_code else token.lower()


def suggested_code(token: str) -> str | None:
    """The rule a misspelt token most likely means (a code written without its zeros, a close
    code or name), or None."""
    padded = padded_code(token)
    if padded is not None:
        return padded
    by_code, by_name = _rule_index()
    for pool, key in ((by_code, token.upper()), (by_name, token.lower())):
        close = difflib.get_close_matches(key, list(pool), n=1, cutoff=0.6)
        if close:
            return close[0] if pool is by_name else pool[close[0]]
    return None
