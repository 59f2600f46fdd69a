"""The command line: `lint`, `explain`, `rules` and the guard commands (commands.py), the terminal
Markdown of `explain`, and the adoption step of `lint` (adopt.py).
"""


def __getattr__(name: str):
    # `invariant_check.cli:main`, as the console script of an older install names it; the
    # commands are imported only when asked for (importing this package stays cheap)
    if name == "main":
        from .commands import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
