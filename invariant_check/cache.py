"""Result cache: per-file results keyed by content hash, in one file per configuration.

The configuration key covers the tool version, the enabled rules and their options, so a
changed rule set never reads stale results. A stat memo (size, mtime) maps paths to content
hashes so that a warm run does not read unchanged files, as git's index does; files modified
within the last two seconds are re-hashed to stay safe against coarse mtimes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from . import __version__

FORMAT = 2  # 2: per-file results are keyed by path inside each content entry


def config_key(rule_codes: list[str], options: dict[str, Any], extra: Any = None) -> str:
    blob = json.dumps(
        [FORMAT, __version__, sorted(rule_codes), options, extra], sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class Cache:
    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.file = directory / f"{key}.json"
        self.stat_memo: dict[str, list] = {}
        self.entries: dict[str, dict[str, Any]] = {}
        self.dirty = False
        self._now = time.time()

    def load(self) -> None:
        try:
            with self.file.open("rb") as fh:
                data = json.load(fh)
            if isinstance(data, dict) and data.get("format") == FORMAT:
                stat, entries = data["stat"], data["entries"]
                if isinstance(stat, dict) and isinstance(entries, dict):
                    # Entries of the wrong shape are dropped one by one, not trusted.
                    self.entries = {d: e for d, e in entries.items() if isinstance(e, dict)}
                    self.stat_memo = {
                        p: m
                        for p, m in stat.items()
                        if isinstance(m, list) and len(m) == 3 and isinstance(m[2], str)
                    }
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            # A missing or damaged cache is an empty one.
            self.stat_memo, self.entries = {}, {}

    def digest_for(self, path: str, st: os.stat_result) -> str | None:
        memo = self.stat_memo.get(path)
        if memo and memo[0] == st.st_size and memo[1] == st.st_mtime_ns:
            if memo[2] in self.entries:
                return memo[2]
        return None

    def remember(self, path: str, st: os.stat_result, file_digest: str) -> None:
        if st.st_mtime < self._now - 2:
            self.stat_memo[path] = [st.st_size, st.st_mtime_ns, file_digest]
        else:
            self.stat_memo.pop(path, None)  # too recent to trust; and the old memo is stale
        self.dirty = True

    def entry(self, file_digest: str) -> dict[str, Any]:
        e = self.entries.get(file_digest)
        if e is None:
            e = self.entries[file_digest] = {}
            self.dirty = True
        return e

    def save(self, live_digests: set[str] | None = None) -> str | None:
        """Write atomically; returns an error message instead of raising."""
        if not self.dirty:
            return None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with _locked(self.directory / ".lock"):
                # Runs in parallel (pre-commit batches) share the file: keep what the others
                # wrote since we loaded it, ours winning where both know a file.
                disk = Cache(self.directory, self.file.stem)
                disk.load()
                for file_digest, entry in disk.entries.items():
                    mine = self.entries.setdefault(file_digest, entry)
                    if mine is not entry:
                        # the same content under other paths (results are kept per path)
                        for key in ("r", "x"):
                            theirs = entry.get(key)
                            if isinstance(theirs, dict) and isinstance(mine.get(key), dict):
                                mine[key] = {**theirs, **mine[key]}
                            elif isinstance(theirs, dict) and key not in mine:
                                mine[key] = theirs
                for path, memo in disk.stat_memo.items():
                    self.stat_memo.setdefault(path, memo)
                return self._write(live_digests)
        except OSError as exc:
            return f"{self.directory}: cannot write cache: {exc.strerror or exc}"

    def _write(self, live_digests: set[str] | None) -> str | None:
        if live_digests is not None:
            # Keep the cache the size of the tree, not of its history: what this run used, and
            # what the memos of files outside this run point to, so that a run over a few files
            # (pre-commit passes only the changed ones) does not empty the whole tree's cache.
            # Memos of deleted files go; only those outside this run cost a stat.
            memo = {
                p: m for p, m in self.stat_memo.items() if m[2] in live_digests or os.path.exists(p)
            }
            keep = set(live_digests) | {m[2] for m in memo.values()}
            self.entries = {d: e for d, e in self.entries.items() if d in keep}
            self.stat_memo = {p: m for p, m in memo.items() if m[2] in self.entries}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            gitignore = self.directory / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("# created by invariant-check\n*\n")
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            # json.dumps, not json.dump: only the former uses the C encoder.
            text = json.dumps(
                {"format": FORMAT, "stat": self.stat_memo, "entries": self.entries},
                separators=(",", ":"),
            )
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, self.file)
        except OSError as exc:
            return f"{self.directory}: cannot write cache: {exc.strerror or exc}"
        return None


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
