"""The result cache. This module alone knows its format.

One file per configuration (`<key>.json`), where the key covers the format, the tool
version, the enabled rules and their options, and a hash of the source of the rules and the
analysis layer (an edited rule never serves stale results). It holds:

- `stat`: path -> [size, mtime_ns, digest], so a warm run reads no unchanged file (as git's
  index does; files modified within the last two seconds are re-hashed, for coarse mtimes);
- `files`: digest -> what the scan found in those bytes (`ScanInfo`);
- `results`: digest -> shown path -> the analysis `Outcome`, with its dependencies;
- `words`: digest -> word -> whether those bytes hold it (project-wide text questions).

Facts of parsed definitions live in a folder keyed by the code only (`facts-<key>/`, shared by
the caches of every project root and configuration), one file per file digest: a run that
analyses one file again reads the facts of the modules it asks about and writes those it
computed, not the whole tree's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import __version__
from .records import Outcome

FORMAT = 4
# Subpackages whose code decides no finding (the Triton kernel, the bundled models, the runtime
# guards); the rules are added from their own folder, wherever they are installed.
_NOT_LINT_CODE = {"compaction", "models", "runtime_guards", "rules"}


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of the source of everything that decides findings: the analysis layer, the
    rules and their fixes, the engine's stages. Part of every cache key."""
    import invariant_check

    pkg = Path(invariant_check.__file__).resolve().parent  # the package root, wherever this module sits
    h = hashlib.blake2b(digest_size=12)
    # every folder of the linter's code below the package root (its subpackages by stage), but
    # not the bundled models (data, read as source) or the runtime parts
    folders = [pkg] + sorted(p.parent for p in pkg.glob("*/__init__.py") if p.parent.name not in _NOT_LINT_CODE)
    try:
        from .. import rules as rules_pkg

        folders += [Path(p) for p in rules_pkg.__path__]
        folders += [Path(p) / "_fixes" for p in rules_pkg.__path__]  # fixes are cached with findings
    except ImportError:  # pragma: no cover - broken install
        pass
    for folder in folders:
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
        except OSError:
            continue
        for name in names:
            try:
                h.update(name.encode())
                h.update((folder / name).read_bytes())
            except OSError:
                continue
    return h.hexdigest()


def config_key(rule_codes: list[str], options: dict[str, Any], extra: Any = None) -> str:
    blob = json.dumps(
        [FORMAT, __version__, code_fingerprint(), sorted(rule_codes), options, extra],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def digest(data: bytes) -> str:
    # SHA-256 runs on the CPU's hash instructions where there are some: about twice as
    # fast as BLAKE2 here, and every file of a cold run is hashed
    return hashlib.sha256(data).hexdigest()[:32]


@dataclass
class ScanInfo:
    has_marker: bool
    skip: bool
    rules: tuple[str, ...]

    def to_json(self) -> list:
        return [self.has_marker, self.skip, list(self.rules)]

    @classmethod
    def from_json(cls, raw: Any) -> ScanInfo | None:
        if not (isinstance(raw, list) and len(raw) == 3 and isinstance(raw[2], list)):
            return None
        return cls(bool(raw[0]), bool(raw[1]), tuple(str(r) for r in raw[2]))


class Cache:
    def __init__(self, directory: Path, key: str) -> None:
        self.directory = Path(directory)
        self.file = self.directory / f"{key}.json"
        self.facts_folder = self.directory / f"facts-{code_fingerprint()}"
        self.stat: dict[str, list] = {}
        self.files: dict[str, Any] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.words: dict[str, dict[str, bool]] = {}
        self._facts: FactsStore | None = None
        self.facts_dirty = False
        self.dirty = False
        self._now = time.time()
        # what each file was on disk when read: at saving, one no other run has replaced since
        # needs no merge (reading it again was a third of a one-file run's cache time)
        self._seen: dict[Path, tuple | None] = {}

    # -- loading ------------------------------------------------------------------------------
    def load(self) -> None:
        self._seen[self.file] = _identity(self.file)
        data = _read_json(self.file)
        if not (isinstance(data, dict) and data.get("format") == FORMAT):
            return
        stat, files, results, words = (data.get(k) for k in ("stat", "files", "results", "words"))
        if not all(isinstance(x, dict) for x in (stat, files, results, words)):
            return  # a damaged cache is an empty one
        self.stat = {
            p: m for p, m in stat.items() if isinstance(m, list) and len(m) == 3 and isinstance(m[2], str)
        }
        self.files = files
        self.results = {d: r for d, r in results.items() if isinstance(r, dict)}
        self.words = {d: w for d, w in words.items() if isinstance(w, dict)}

    # -- stat memo -----------------------------------------------------------------------------
    def digest_for(self, path: str, st: os.stat_result) -> str | None:
        memo = self.stat.get(path)
        if memo and memo[0] == st.st_size and memo[1] == st.st_mtime_ns:
            return memo[2]
        return None

    def remember(self, path: str, st: os.stat_result, file_digest: str) -> None:
        if st.st_mtime < self._now - 2:
            self.stat[path] = [st.st_size, st.st_mtime_ns, file_digest]
        else:
            self.stat.pop(path, None)  # too recent to trust; and the old memo is stale
        self.dirty = True

    # -- scan ------------------------------------------------------------------------------------
    def scan_info(self, file_digest: str) -> ScanInfo | None:
        return ScanInfo.from_json(self.files.get(file_digest))

    def put_scan_info(self, file_digest: str, info: ScanInfo) -> None:
        self.files[file_digest] = info.to_json()
        self.dirty = True

    # -- results ---------------------------------------------------------------------------------
    def outcome(self, file_digest: str, shown: str) -> Outcome | None:
        raw = self.results.get(file_digest, {}).get(shown)
        if raw is None:
            return None
        try:
            return Outcome.from_json(raw)
        except (KeyError, TypeError, ValueError, IndexError):
            return None  # a damaged entry is a miss

    def put_outcome(self, file_digest: str, shown: str, outcome: Outcome) -> None:
        # keyed by path as well as content: findings carry their path, and two files with the
        # same bytes (copies, empty __init__.py) must not share them
        self.results.setdefault(file_digest, {})[shown] = outcome.to_json()
        self.dirty = True

    # -- words -----------------------------------------------------------------------------------
    def holds_word(self, file_digest: str, word: str) -> bool | None:
        got = self.words.get(file_digest, {}).get(word)
        return got if isinstance(got, bool) else None

    def put_word(self, file_digest: str, word: str, present: bool) -> None:
        self.words.setdefault(file_digest, {})[word] = present
        self.dirty = True

    # -- facts -------------------------------------------------------------------------------------
    def facts(self) -> FactsStore:
        if self._facts is None:
            self._facts = FactsStore(self.facts_folder)
        return self._facts

    def put_facts(self, file_digest: str, chunks: dict) -> None:
        self.facts()[file_digest] = chunks
        self.facts_dirty = True

    # -- saving ----------------------------------------------------------------------------------
    def save(self, live_digests: set[str] | None = None, facts_used: set[str] | None = None) -> str | None:
        """Write atomically, merged with what parallel runs wrote meanwhile; returns an error
        message instead of raising. `facts_used`: the digests whose facts the run read or
        wrote, kept besides the live files' (modules of the environment)."""
        if not (self.dirty or self.facts_dirty):
            return None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            _ignored(self.directory)
            with _locked(self.directory / ".lock"):
                if self.dirty:
                    disk = Cache(self.directory, self.file.stem)
                    if not self._unchanged(self.file):
                        disk.load()
                    for name in ("files", "words"):
                        mine = getattr(self, name)
                        for d, entry in getattr(disk, name).items():
                            mine.setdefault(d, entry)
                    for d, per_path in disk.results.items():
                        merged = dict(per_path)
                        merged.update(self.results.get(d, {}))
                        self.results[d] = merged
                    for path, memo in disk.stat.items():
                        self.stat.setdefault(path, memo)
                    self._prune(live_digests)
                    _write_json(self.directory, self.file, {
                        "format": FORMAT, "stat": self.stat, "files": self.files,
                        "results": self.results, "words": self.words,
                    })
                    self._seen[self.file] = _identity(self.file)  # what it holds now is ours
                if self.facts_dirty and self._facts is not None:
                    self._facts.save()
                    if live_digests is not None:
                        # facts are shared by every cache of this code (one per project root
                        # and configuration): keep what any of them still points to
                        keep = set(live_digests) | set(facts_used or ()) | {m[2] for m in self.stat.values()} | self._others_digests()
                        self._facts.prune(keep)
                    self.facts_dirty = False
        except OSError as exc:
            return f"{self.directory}: cannot write cache: {exc.strerror or exc}"
        return None

    def _unchanged(self, path: Path) -> bool:
        """Whether `path` is still the file this cache read (no run wrote it since)."""
        seen = self._seen.get(path)
        return seen is not None and seen == _identity(path)

    def _others_digests(self) -> set[str]:
        """The file digests the stat memos of the other caches in this folder point to."""
        out: set[str] = set()
        for other in self.directory.glob("*.json"):
            if other == self.file or other.name.startswith("facts-"):
                continue
            data = _read_json(other)
            stat = data.get("stat") if isinstance(data, dict) else None
            if isinstance(stat, dict):
                out.update(m[2] for m in stat.values() if isinstance(m, list) and len(m) == 3 and isinstance(m[2], str))
        return out

    def _prune(self, live_digests: set[str] | None) -> None:
        """Keep the cache the size of the tree, not of its history: what this run used, and
        what the memos of files outside this run point to (a pre-commit run over a few files
        must not empty the whole tree's cache). Memos of deleted files go."""
        if live_digests is None:
            return
        memo = {p: m for p, m in self.stat.items() if m[2] in live_digests or os.path.exists(p)}
        keep = set(live_digests) | {m[2] for m in memo.values()}
        self.stat = {p: m for p, m in memo.items()}
        self.files = {d: e for d, e in self.files.items() if d in keep}
        self.results = {d: e for d, e in self.results.items() if d in keep}
        self.words = {d: e for d, e in self.words.items() if d in keep}


class FactsStore:
    """The facts of each file digest, read from its own file when first asked (None when it
    has none, or a damaged one) and written back at saving when this run computed them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._got: dict[str, dict | None] = {}
        self._seen: dict[str, tuple | None] = {}
        self._new: set[str] = set()

    def _path(self, d: str) -> Path | None:
        # digests are hex; anything else (a damaged entry's key) has no file
        return self.folder / f"{d}.json" if d and all(c.isalnum() or c in "-_" for c in d) else None

    def get(self, d: str, default: Any = None) -> Any:
        if d not in self._got:
            path = self._path(d)
            data = None
            if path is not None:
                self._seen[d] = _identity(path)
                data = _read_json(path) if self._seen[d] is not None else None
            self._got[d] = data if isinstance(data, dict) else None
        got = self._got[d]
        return default if got is None else got

    def __contains__(self, d: object) -> bool:
        return isinstance(d, str) and self.get(d) is not None

    def __getitem__(self, d: str) -> dict:
        got = self.get(d)
        if got is None:
            raise KeyError(d)
        return got

    def __setitem__(self, d: str, chunks: dict) -> None:
        self._got[d] = chunks
        self._new.add(d)

    def pop(self, d: str, default: Any = None) -> Any:
        """Forget what this run holds of `d` (an old buffer version): it is not written."""
        self._new.discard(d)
        got = self._got.pop(d, None)
        return default if got is None else got

    def __iter__(self):
        on_disk = {p.stem for p in self.folder.glob("*.json")} if self.folder.is_dir() else set()
        return iter(sorted(on_disk | {d for d, v in self._got.items() if v is not None}))

    def save(self) -> None:
        """Write the facts this run computed, each merged with what another run wrote to the
        same digest since it was read."""
        if not self._new:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        for d in sorted(self._new):
            path = self._path(d)
            mine = self._got.get(d)
            if path is None or mine is None:
                continue
            now = _identity(path)
            if now is not None and self._seen.get(d, "unread") != now:
                disk = _read_json(path)
                if isinstance(disk, dict):
                    mine = {**disk, **mine}
                    self._got[d] = mine
            fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write(json.dumps(mine, separators=(",", ":")))
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            self._seen[d] = _identity(path)
        self._new.clear()

    def prune(self, keep: set[str]) -> None:
        """Remove the facts of digests nothing points to any more (the tree's old versions)."""
        for path in self.folder.glob("*.json"):
            if path.stem not in keep:
                with contextlib.suppress(OSError):
                    path.unlink()
                self._got.pop(path.stem, None)


def _identity(path: Path) -> tuple | None:
    # every write replaces the file (a new inode); mtime, ctime and size on top, as git's
    # index does, for file systems that reuse inode numbers at once
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _read_json(path: Path) -> Any:
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read())
    except (OSError, ValueError, RecursionError):
        return None


def _ignored(directory: Path) -> None:
    gitignore = directory / ".gitignore"
    if not gitignore.exists():
        gitignore.write_text("# created by invariant-check\n*\n")


def _write_json(directory: Path, target: Path, payload: Any) -> None:
    _ignored(directory)
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    try:
        # json.dumps, not json.dump: only the former uses the C encoder
        text = json.dumps(payload, separators=(",", ":"))
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive advisory lock (POSIX); elsewhere, last writer wins."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
