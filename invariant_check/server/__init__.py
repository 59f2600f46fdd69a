"""`invariant-check server`: a language server (LSP) over standard input/output.

`session` is the linter's side (no protocol: buffers in, findings out); `protocol` speaks LSP
with pygls and lsprotocol, the optional `server` extra (`pip install 'invariant-check[server]'`).
"""

from __future__ import annotations

import sys

# invariant-check is on no package index: the extra is installed from where it came from
INSTALL_HINT = "install invariant-check with its `server` extra (in a checkout: pip install '.[server]')"


def main() -> None:
    """Runs the server until the client says exit; without pygls/lsprotocol, one line on stderr
    and exit status 2."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "pygls"
        print(f"invariant-check: error: the language server needs {missing}, which is not installed: {INSTALL_HINT}", file=sys.stderr)
        sys.exit(2)
    from .protocol import serve

    serve()
