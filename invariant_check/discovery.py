"""Turns the command line's paths into the list of Python files to lint."""

from __future__ import annotations

import errno
import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .types import FileError


def display_path(path: Path | str, cwd: Path | None = None) -> str:
    """Relative to the current directory when under it, as users expect in editors."""
    cwd = cwd or Path.cwd()
    p = Path(path)
    try:
        return p.relative_to(cwd).as_posix()
    except ValueError:
        return p.as_posix()


def compile_globs(globs: list[str] | tuple[str, ...]) -> re.Pattern[str] | None:
    if not globs:
        return None
    parts = []
    for g in globs:
        g = g.rstrip("/")
        parts.append(fnmatch.translate(g))
        if not g.startswith(("*", "/")):
            # a relative glob also matches below any folder of that name ("tests" -> a/tests)
            parts.append(fnmatch.translate("*/" + g))
    return re.compile("|".join(f"(?:{p})" for p in parts))


@dataclass
class Discovery:
    files: list[Path] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)


def matches(pattern: re.Pattern[str] | None, path: Path, root: Path) -> bool:
    if pattern is None:
        return False
    if pattern.match(path.name):
        return True
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        rel = path.as_posix()
    return bool(pattern.match(rel))


def discover(
    paths: list[str],
    *,
    root: Path,
    exclude: list[str],
    default_excludes: tuple[str, ...],
    cwd: Path | None = None,
) -> Discovery:
    cwd = cwd or Path.cwd()
    user = compile_globs(exclude)
    default = compile_globs(list(default_excludes))
    out = Discovery()
    seen: set[Path] = set()

    def add(p: Path) -> None:
        if p not in seen:
            seen.add(p)
            out.files.append(p)

    for raw in paths:
        path = Path(raw)
        abspath = Path(os.path.abspath(cwd / path))
        shown = display_path(abspath, cwd)
        try:
            st = os.stat(abspath)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                reason = "symbolic link loop"
            elif exc.errno == errno.ENOENT:
                reason = "no such file or directory"
            else:
                reason = exc.strerror or str(exc)
            out.errors.append(FileError(shown, f"cannot open: {reason}"))
            continue
        if matches(user, abspath, root):
            continue
        import stat as stat_mod

        if stat_mod.S_ISDIR(st.st_mode):
            _walk(abspath, root, user, default, add, out, cwd)
        elif stat_mod.S_ISREG(st.st_mode):
            add(abspath)
        else:
            # a FIFO would block the read forever; a device is not source code
            out.errors.append(FileError(shown, "cannot read: not a regular file"))
    return out


def _walk(top, root, user, default, add, out, cwd) -> None:
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            out.errors.append(
                FileError(display_path(folder, cwd), f"cannot list: {exc.strerror or exc}")
            )
            continue
        subdirs = []
        for entry in entries:
            p = Path(entry.path)
            try:
                # Symlinked folders are not followed: that is how loops are avoided.
                is_dir = entry.is_dir(follow_symlinks=False)
                if is_dir:
                    if matches(default, p, root) or matches(user, p, root):
                        continue
                    if _is_venv(p):  # a virtual environment of any name
                        continue
                    subdirs.append(p)
                elif entry.name.endswith(".py") and entry.is_file():
                    if not matches(user, p, root):
                        add(p)
                elif entry.name.endswith(".py") and entry.is_symlink() and not os.path.exists(p):
                    out.errors.append(
                        FileError(display_path(p, cwd), "cannot open: broken or looping symbolic link")
                    )
            except OSError as exc:
                reason = "symbolic link loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
                out.errors.append(FileError(display_path(p, cwd), f"cannot open: {reason}"))
        stack.extend(reversed(subdirs))


def _is_venv(folder: Path) -> bool:
    try:
        return os.path.isfile(folder / "pyvenv.cfg")
    except OSError:  # an unreadable folder is reported when it is listed
        return False
