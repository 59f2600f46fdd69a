"""The one glob dialect of invariant-check (documented in docs/configuration.md).

Used for `exclude`, `extend-exclude`, `per-file-ignores`, `--exclude`, `.gitignore` files
(through `gitignore.py`) and the rules' name options.

Syntax, shared by path and name globs:
  `*` any run of characters (in a path: within one folder name), `?` one character,
  `[abc]`, `[a-z]`, `[!abc]` (or `[^abc]`) one character of (not of) a set, `\\x` a literal x.
Paths only:
  `**` as a whole path segment crosses folders (`**/tests`, `a/**/b`, `a/**`);
  a trailing `/` matches folders only;
  a pattern with no `/` (but a trailing one) matches a file or folder name at any depth;
  a pattern with a `/` is anchored at its base folder (the configuration's folder, the current
  folder for `--exclude`, the `.gitignore`'s folder), and so is one starting with `./`;
  an absolute path (`/abs/dir/x.py`) matches that path only (in `.gitignore` files a leading `/`
  anchors instead, as git reads it);
  a pattern that matches a folder covers everything below it (`match_tree`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator

# -- tokens ------------------------------------------------------------------------------------


def _tokens(pattern: str) -> Iterator[tuple[str, str]]:
    """(kind, value): ("lit", one char), ("star", the run of *), ("any", "?"), ("class", regex)."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            yield "lit", pattern[i + 1]
            i += 2
        elif c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            yield "star", pattern[i:j]
            i = j
        elif c == "?":
            yield "any", c
            i += 1
        elif c == "[":
            parsed = _char_class(pattern, i)
            if parsed is None:  # no closing bracket: a literal `[`, as fnmatch reads it
                yield "lit", c
                i += 1
            else:
                regex, i = parsed
                yield "class", regex
        else:
            yield "lit", c
            i += 1


def _char_class(pattern: str, start: int) -> tuple[str, int] | None:
    """`[...]` at `start`: (regex, index after it), or None when it is not closed."""
    i = start + 1
    negate = i < len(pattern) and pattern[i] in "!^"
    if negate:
        i += 1
    body_start = i
    if i < len(pattern) and pattern[i] == "]":  # `[]a]`: a leading `]` is a member
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    if i >= len(pattern):
        return None
    body = pattern[body_start:i]
    out, k = [], 0
    while k < len(body):
        ch = body[k]
        if ch == "\\" and k + 1 < len(body):
            out.append(re.escape(body[k + 1]))
            k += 2
            continue
        if ch == "-" and 0 < k < len(body) - 1:
            out.append("-")  # a range
        else:
            out.append(re.escape(ch))
        k += 1
    return ("[^" if negate else "[") + "".join(out) + "]", i + 1


def required_literals(pattern: str) -> list[str]:
    """The plain runs of a glob, in order: any string the glob matches contains each of them.

    For a prefilter: text without one of these cannot hold a match. `plan[0-9]` -> ["plan"],
    `*_md` -> ["_md"], `*` -> []. For a case-insensitive glob, lower the runs and the text.
    """
    runs, cur = [], []
    for kind, value in _tokens(pattern):
        if kind == "lit":
            cur.append(value)
        elif cur:
            runs.append("".join(cur))
            cur = []
    if cur:
        runs.append("".join(cur))
    return runs


# -- names ---------------------------------------------------------------------------------------


def name_regex(pattern: str) -> str:
    """Regex source (no anchors) for an identifier glob: `*` is `\\w*?`, `?` is `\\w`.

    The same language as `name_matcher` over identifiers, for embedding in a larger regex
    (a prefilter over source bytes: `.encode()` it; `\\w` is ASCII-only in bytes patterns).
    """
    out = []
    for kind, value in _tokens(pattern):
        if kind == "lit":
            out.append(re.escape(value))
        elif kind == "star":
            out.append(r"\w*?")  # lazy: finditer over source text must not backtrack badly
        elif kind == "any":
            out.append(r"\w")
        else:
            out.append(value)
    return "".join(out)


def name_matcher(patterns: Iterable[str], *, case_sensitive: bool) -> Callable[[str], bool]:
    """A test of whole identifiers against any of `patterns` (`*metadata*`, `plan[0-9]`)."""
    return _name_matcher(tuple(patterns), case_sensitive)


@lru_cache(maxsize=64)
def _name_matcher(patterns: tuple[str, ...], case_sensitive: bool) -> Callable[[str], bool]:
    if not patterns:
        return lambda name: False
    flags = 0 if case_sensitive else re.IGNORECASE
    rx = re.compile("|".join(f"(?:{name_regex(p)})" for p in patterns), flags)
    return lambda name: rx.fullmatch(name) is not None


# -- paths ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathGlob:
    pattern: str  # as written
    regex: re.Pattern[str]  # full match: the name, the path relative to the base, or absolute
    anchored: bool  # matched against the path relative to the base folder
    absolute: bool  # matched against the absolute path
    dir_only: bool  # written with a trailing `/`

    def test(self, name: str, rel: str | None, abspath: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.absolute:
            return self.regex.fullmatch(abspath) is not None
        if self.anchored:
            return rel is not None and self.regex.fullmatch(rel) is not None
        return self.regex.fullmatch(name) is not None


def compile_path_glob(pattern: str, *, gitignore: bool = False) -> PathGlob:
    """One path pattern. `gitignore`: a leading `/` anchors at the base (git's reading) instead
    of naming an absolute path."""
    body = pattern
    dir_only = body.endswith("/") and not body.endswith("\\/") and body.strip("/") != ""
    if dir_only:
        body = body.rstrip("/")
    absolute = anchored = False
    if body.startswith("/") and not gitignore:
        absolute = True
        body = _normalise(body)
    elif body.startswith("/"):
        body = body.lstrip("/")
        anchored = True
    toks = list(_tokens(body))
    anchored = anchored or absolute or any(k == "lit" and v == "/" for k, v in toks)
    return PathGlob(pattern, re.compile(_path_regex(toks), re.DOTALL), anchored and not absolute, absolute, dir_only)


def _normalise(body: str) -> str:
    # `./vllm/x` and `a/../b` name plain paths; normpath keeps glob characters as they are
    out = posixpath.normpath(body)
    return "" if out == "." else out


def _path_regex(toks: list[tuple[str, str]]) -> str:
    out: list[str] = []
    i, n = 0, len(toks)
    while i < n:
        kind, value = toks[i]
        if kind == "star":
            before_ok = i == 0 or toks[i - 1] == ("lit", "/")
            after_slash = i + 1 < n and toks[i + 1] == ("lit", "/")
            at_end = i + 1 == n
            if len(value) >= 2 and before_ok and (after_slash or at_end):
                if after_slash:
                    out.append("(?:.*/)?")  # `**/`: zero or more folders
                    i += 2
                    continue
                out.append(".*")  # `/**` at the end: everything below
            else:
                out.append("[^/]*")
        elif kind == "any":
            out.append("[^/]")
        elif kind == "class":
            out.append("(?!/)" + value)  # a set never matches the separator, as in git
        else:
            out.append(re.escape(value))
        i += 1
    return "".join(out)


class PathGlobs:
    """Patterns relative to one base folder. Paths are absolute (`os.path.abspath` form)."""

    def __init__(self, patterns: Iterable[str], base: Path | str, *, gitignore: bool = False) -> None:
        self.base = str(base).rstrip("/") or "/"
        self.globs: list[PathGlob] = []
        for p in patterns:
            if not gitignore and (p.startswith(("./", "../")) or p in (".", "..")):
                # `./vllm/x`, `../other`: a place relative to the base, made absolute
                trailing = "/" if p.endswith("/") and p.strip("/.") else ""
                p = posixpath.normpath(posixpath.join(self.base, p)) + trailing
            self.globs.append(compile_path_glob(p, gitignore=gitignore))
        self._absolute = [g for g in self.globs if g.absolute]

    def __bool__(self) -> bool:
        return bool(self.globs)

    def _rel(self, abspath: str) -> str | None:
        if self.base == "/":
            return abspath.lstrip("/") or None
        if abspath.startswith(self.base + "/"):
            return abspath[len(self.base) + 1 :]
        return None

    def match(self, path: Path | str, is_dir: bool) -> bool:
        """This path itself (not a folder above it) matches a pattern."""
        if not self.globs:
            return False
        abspath = str(path)
        rel = self._rel(abspath)
        name = posixpath.basename(abspath)
        return any(g.test(name, rel, abspath, is_dir) for g in self.globs)

    def match_tree(self, path: Path | str, is_dir: bool) -> bool:
        """This path or a folder above it matches. Above the base folder only absolute patterns
        are tried: `tests` must not exclude everything because some parent is called tests."""
        if not self.globs:
            return False
        cur = str(path)
        if self.match(cur, is_dir):
            return True
        while True:
            parent = posixpath.dirname(cur)
            if parent == cur:
                return False
            if self._rel(parent) is not None:
                if self.match(parent, True):
                    return True
            elif not self._absolute:
                return False
            elif any(g.regex.fullmatch(parent) for g in self._absolute):
                return True
            cur = parent
