"""What a configuration says that the files of a run contradict: `per-file-ignores` globs that
match no file. Only a run that linted a project's whole tree can tell (a pre-commit batch sees a
few files); such a run gets one warning per glob, naming the file and the folder the glob is
relative to.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..globs import PathGlobs


def _covers(folder: str, root: str) -> bool:
    return root == folder or root.startswith(folder.rstrip(os.sep) + os.sep)


def unmatched_per_file_ignores(projects: Iterable, paths: Iterable[str], cwd: Path) -> list[str]:
    """One warning per `per-file-ignores` glob of a project whose whole tree was linted (a
    path of the run is its configuration's folder or a folder above it) that matches none of
    the files linted."""
    folders = [os.path.abspath(cwd / p) for p in paths if p != "-" and os.path.isdir(cwd / p)]
    warnings: list[str] = []
    for project in projects:
        cfg = project.config
        if cfg.source is None or not cfg.per_file_ignores:
            continue
        root = str(cfg.root)
        if not any(_covers(f, root) for f in folders):
            continue
        files = [str(f) for f in project.files]
        for glob in cfg.per_file_ignores:
            matcher = PathGlobs([glob], cfg.root)
            if not any(matcher.match_tree(f, False) for f in files):
                warnings.append(
                    f"{cfg.source}: [tool.invariant-check] per-file-ignores.{glob!r} matches no linted file "
                    f"(globs are relative to {cfg.root}; a glob with a `/` is anchored there)"
                )
    return warnings
