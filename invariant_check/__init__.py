"""invariant-check: static and runtime checks for speculative-decoding invariants.

Importing this package must stay cheap: the linter never imports torch, triton or vllm.
"""

__version__ = "0.1.0"


def _from_a_checkout() -> None:
    """Run from a checkout without installing it (`python -m invariant_check` in its root):
    `invariant_check.rules` and `invariant_check.runtime_guards` install from the checkout's
    top-level `rules/` and `runtime_guards/` folders (pyproject.toml's package-dir), so they
    are looked up there too. An installed copy (wheel or editable) is left as it is."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.isdir(os.path.join(here, "rules")):
        return
    top = os.path.dirname(here)
    marker = os.path.join(top, "pyproject.toml")
    if not (os.path.isfile(os.path.join(top, "rules", "__init__.py")) and os.path.isfile(marker)):
        return
    try:
        with open(marker, encoding="utf-8") as fh:
            ours = 'name = "invariant-check"' in fh.read()
    except OSError:
        return
    if ours and top not in __path__:
        __path__.append(top)  # noqa: F821 - a package's own __path__


_from_a_checkout()
