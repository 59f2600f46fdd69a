"""Turns the command line's paths into the Python files to lint, each with the project (nearest
configuration) it belongs to.

Folders are walked for `*.py`; symlinked folders are not followed (that is how loops are
avoided). While walking, an entry is skipped when it matches its project's excludes (the
defaults or `exclude`, and `extend-exclude`), `--exclude`, a `.gitignore` (unless turned off),
or is a virtual environment (a folder holding `pyvenv.cfg`). A path named on the command line
is only skipped by `exclude`/`extend-exclude`/`--exclude` (so that pre-commit, which names
files, honours them), never by the defaults or `.gitignore`.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ..settings import gitignore
from ..globs import PathGlobs
from ..api.types import FileError


class Scope(Protocol):
    """What discovery needs from a project (see projects.Project)."""

    user_excludes: PathGlobs  # skipped while walking and when named
    walk_excludes: PathGlobs  # skipped while walking only
    respect_gitignore: bool


def display_path(path: Path | str, cwd: Path | None = None) -> str:
    """Relative to the current directory when under it, as users expect in editors."""
    cwd = cwd or Path.cwd()
    p = Path(path)
    try:
        return p.relative_to(cwd).as_posix()
    except ValueError:
        return p.as_posix()


@dataclass
class Discovery:
    files: list[tuple[Path, Scope]] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    not_found: int = 0  # paths that do not exist (among `errors`)
    walked: list[str] = field(default_factory=list)  # folders walked whole (absolute)


def discover(
    paths: list[str],
    *,
    scope_for: Callable[[str], Scope],
    exclude: PathGlobs | None = None,
    respect_gitignore: bool | None = None,
    cwd: Path | None = None,
    known: Discovery | None = None,
) -> Discovery:
    """`scope_for(folder)`: the project of an absolute folder. `exclude`: `--exclude`.
    `respect_gitignore`: the command line's choice, None to let each project decide.
    `known`: an earlier discovery with the same settings: the folders it walked are not
    walked again, their files are taken from it (in walk order)."""
    cwd = cwd or Path.cwd()
    extra = exclude or PathGlobs([], cwd)
    out = Discovery()
    seen: set[str] = set()

    def add(p: str, scope: Scope, as_path: Path | None = None) -> None:
        if p not in seen:
            seen.add(p)
            out.files.append((as_path or Path(p), scope))

    for raw in paths:
        abspath = os.path.abspath(os.path.join(cwd, raw))
        shown = display_path(abspath, cwd)
        try:
            st = os.stat(abspath)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                reason = "symbolic link loop"
            elif exc.errno == errno.ENOENT:
                reason = "no such file or directory"
                out.not_found += 1
            else:
                reason = exc.strerror or str(exc)
            out.errors.append(FileError(shown, f"cannot open: {reason}"))
            continue
        is_dir = stat_mod.S_ISDIR(st.st_mode)
        scope = scope_for(abspath if is_dir else os.path.dirname(abspath))
        if scope.user_excludes.match_tree(abspath, is_dir) or extra.match_tree(abspath, is_dir):
            continue
        if is_dir:
            use_git = scope.respect_gitignore if respect_gitignore is None else respect_gitignore
            chain = gitignore.chain_for(abspath) if use_git or respect_gitignore is None else gitignore.IgnoreChain()
            reuse = _reuse(known, abspath)
            _walk(abspath, scope, chain, scope_for, extra, respect_gitignore, add, out, cwd, reuse)
            out.walked.append(abspath)
        elif stat_mod.S_ISREG(st.st_mode):
            add(abspath, scope)
        else:
            # a FIFO would block the read forever; a device is not source code
            out.errors.append(FileError(shown, "cannot read: not a regular file"))
    return out


def _reuse(known: Discovery | None, top: str) -> dict[str, list[tuple[Path, Scope]]]:
    """Folders under `top` that `known` walked whole -> their files, in walk order."""
    if known is None:
        return {}
    prefix = top.rstrip(os.sep) + os.sep
    # outermost first: a file belongs to the outermost walked folder holding it (folders
    # named inside one another were walked separately, each file found once)
    folders = sorted({w for w in known.walked if w.startswith(prefix)}, key=len)
    if not folders:
        return {}
    got: dict[str, list[tuple[Path, Scope]]] = {w: [] for w in folders}
    for path, scope in known.files:
        raw = str(path)
        for w in folders:
            if raw.startswith(w.rstrip(os.sep) + os.sep):
                got[w].append((path, scope))
                break
    if len(folders) > 1:
        for files in got.values():
            # walk order (a folder's files, then its subfolders', each by name); one walk
            # already found them in it
            files.sort(key=lambda item: (item[0].parts[:-1], item[0].name))
    return got


def _walk(top, top_scope, top_chain, scope_for, extra, respect_gitignore, add, out, cwd, reuse=None) -> None:
    # (folder, its parent's project and ignore chain; `top` comes with its own already)
    stack: list[tuple[str, Scope, gitignore.IgnoreChain, bool]] = [(top, top_scope, top_chain, True)]
    while stack:
        folder, scope, chain, is_top = stack.pop()
        if reuse and folder in reuse:
            for path, known_scope in reuse[folder]:
                add(str(path), known_scope, path)
            continue
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            out.errors.append(FileError(display_path(folder, cwd), f"cannot list: {exc.strerror or exc}"))
            continue
        names = {e.name for e in entries}
        if not is_top:
            if "pyproject.toml" in names:
                scope = scope_for(folder)  # a nearer configuration governs from here down
            chain = chain.enter(folder, names)
        use_git = scope.respect_gitignore if respect_gitignore is None else respect_gitignore
        subdirs = []
        for entry in entries:
            p = entry.path
            try:
                if entry.is_dir(follow_symlinks=False):
                    if (
                        scope.walk_excludes.match(p, True)
                        or scope.user_excludes.match(p, True)
                        or extra.match(p, True)
                        or (use_git and chain.ignored(p, True))
                        or _is_venv(p)
                    ):
                        continue
                    subdirs.append((p, scope, chain, False))
                elif entry.name.endswith(".py") and entry.is_file():
                    if (
                        scope.user_excludes.match(p, False)
                        or extra.match(p, False)
                        or (use_git and chain.ignored(p, False))
                    ):
                        continue
                    add(p, scope)
                elif entry.name.endswith(".py") and entry.is_symlink() and not os.path.exists(p):
                    out.errors.append(
                        FileError(display_path(p, cwd), "cannot open: broken or looping symbolic link")
                    )
            except OSError as exc:
                reason = "symbolic link loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
                out.errors.append(FileError(display_path(p, cwd), f"cannot open: {reason}"))
        stack.extend(reversed(subdirs))


def _is_venv(folder: str) -> bool:
    try:
        return os.path.isfile(os.path.join(folder, "pyvenv.cfg"))
    except OSError:  # an unreadable folder is reported when it is listed
        return False
