"""`.gitignore` rules for the folder walk, as git reads them (no dependency, no `git` process).

Read: the `.gitignore` of every folder from the work tree's top (the nearest folder holding
`.git`) down to the walked folder, and `.git/info/exclude`. Outside a git work tree nothing is
ignored. Not read: the global `core.excludesFile`.

Git's rules: blank lines and `#` lines are skipped (`\\#` is a literal `#`); trailing spaces are
dropped unless escaped; `!` re-includes (`\\!` is a literal `!`); a trailing `/` matches
folders only; a `/` at the start or in the middle anchors the pattern at the `.gitignore`'s
folder, otherwise it matches a name at any depth below it; `**` crosses folders. The last
matching line of a file decides, and a deeper `.gitignore` overrides a shallower one. A file
inside an ignored folder cannot be re-included: the walk never enters that folder.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..globs import PathGlob, compile_path_glob

_TRAILING_SPACES = re.compile(r"(?<!\\)( +)$")


@dataclass(frozen=True)
class _Rule:
    glob: PathGlob
    negated: bool


@dataclass(frozen=True)
class IgnoreFile:
    """The rules of one file, relative to `base` (the folder they apply to)."""

    base: str
    rules: tuple[_Rule, ...]

    def __post_init__(self) -> None:
        # Most paths match no line: one combined test per kind first, the ordered walk
        # through the lines (last match wins) only when something matched.
        names = [r.glob.regex.pattern for r in self.rules if not r.glob.anchored]
        rels = [r.glob.regex.pattern for r in self.rules if r.glob.anchored]
        object.__setattr__(self, "_names", re.compile("|".join(f"(?:{p})" for p in names) or "(?!)", re.DOTALL))
        object.__setattr__(self, "_rels", re.compile("|".join(f"(?:{p})" for p in rels) or "(?!)", re.DOTALL))

    def decide(self, abspath: str, name: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included, None: no line matches."""
        if not abspath.startswith(self.base.rstrip("/") + "/"):
            return None
        rel = abspath[len(self.base.rstrip("/")) + 1 :]
        if self._names.fullmatch(name) is None and self._rels.fullmatch(rel) is None:
            return None
        for rule in reversed(self.rules):
            if rule.glob.test(name, rel, abspath, is_dir):
                return not rule.negated
        return None


def parse(text: str, base: str) -> IgnoreFile:
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line or line.startswith("#"):
            continue
        line = _TRAILING_SPACES.sub("", line)
        if line.endswith("\\ "):
            line = line[:-2] + " "
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        elif line.startswith(("\\!", "\\#")):
            line = line[1:]
        if not line or line == "/":
            continue
        rules.append(_Rule(compile_path_glob(line, gitignore=True), negated))
    return IgnoreFile(base, tuple(rules))


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", errors="replace")
    except OSError:  # absent or unreadable: git reads it as empty too
        return None


def _load(folder: str, filename: str = ".gitignore") -> IgnoreFile | None:
    text = _read(os.path.join(folder, filename))
    if text is None:
        return None
    parsed = parse(text, folder)
    return parsed if parsed.rules else None


def _is_work_tree_top(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, ".git"))


@dataclass(frozen=True)
class IgnoreChain:
    """The ignore files that apply in one folder, deepest first; `info/exclude` last."""

    files: tuple[IgnoreFile, ...] = ()
    active: bool = False  # inside a git work tree

    def ignored(self, path: Path | str, is_dir: bool) -> bool:
        if not self.files:
            return False
        abspath = str(path)
        name = os.path.basename(abspath)
        for f in self.files:
            verdict = f.decide(abspath, name, is_dir)
            if verdict is not None:
                return verdict
        return False

    def enter(self, folder: Path | str, names: set[str] | None = None) -> IgnoreChain:
        """The chain for a sub-folder of this one (`names`: its entries, when already listed)."""
        folder = str(folder)
        has = (lambda n: n in names) if names is not None else (lambda n: os.path.exists(os.path.join(folder, n)))
        if has(".git"):
            return _top_chain(folder, has(".gitignore"))
        if not self.active or not has(".gitignore"):
            return self
        own = _load(folder)
        return IgnoreChain((own, *self.files), True) if own else self


def _top_chain(top: str, has_gitignore: bool = True) -> IgnoreChain:
    files = []
    own = _load(top) if has_gitignore else None
    if own:
        files.append(own)
    # info/exclude holds paths relative to the work tree's top
    info = _read(os.path.join(top, ".git", "info", "exclude"))
    if info is not None:
        parsed = parse(info, top)
        if parsed.rules:
            files.append(parsed)
    return IgnoreChain(tuple(files), True)


def chain_for(folder: Path | str) -> IgnoreChain:
    """The chain in effect inside `folder` (an absolute path): from its work tree's top down."""
    folder = os.path.abspath(str(folder))
    below: list[str] = []
    cur = folder
    while not _is_work_tree_top(cur):
        parent = os.path.dirname(cur)
        if parent == cur:
            return IgnoreChain()  # not in a git work tree
        below.append(cur)
        cur = parent
    chain = _top_chain(cur)
    for sub in reversed(below):
        chain = chain.enter(sub)
    return chain
