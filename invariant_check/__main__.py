"""`python -m invariant_check ...`: the `invariant-check` command, also where its script is not
on PATH (a checkout run with `python -m` from its root, an interpreter without the script)."""

from invariant_check.cli.commands import main

if __name__ == "__main__":  # pragma: no cover
    main(prog_name="invariant-check")
