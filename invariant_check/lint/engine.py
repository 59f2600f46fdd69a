"""Runs the enabled rules over a list of files, in stages with typed records:

1. scan (`_scan`): read the bytes (or trust the stat memo), hash them, note suppression
   markers, and keep the rules whose needs the bytes may meet -> `ScanRecord`;
2.-4. parse, facts, rules (`analyze.analyze`): parse only the definitions the rules need,
   query the project model, make candidates -> `Outcome` (cached with its dependencies);
5. finalize (`finalize.finalize`): per-file-ignores, suppression comments, IC900/IC901;
6. report: the output formats (not here).

The project model spans the whole project (`root`), whatever files were passed: a rule sees
the same facts when one file is linted as when the whole tree is. Large runs scan and analyse
in forked worker processes, each with its own lazily loaded model; results do not depend on
which process analysed which file.
"""

from __future__ import annotations

import multiprocessing
import os
import stat
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..adoption import suppressions
from ..analysis.environment import Environment
from ..analysis.project import FactStore, Project
from ..analysis.views import Context
from .analyze import Plan, analyze
from .cache import Cache, ScanInfo, digest
from .discovery import display_path
from .finalize import PerFileIgnores, SourceFile, finalize
from .records import Outcome, ScanRecord
from ..api.rule import Rule
from ..api.types import FileError, Finding

_UNSEEN = object()


def read_bytes(path: Path, size: int | None = None) -> bytes:
    """The file's bytes, read without a buffered file object: a word search of the project
    reads every file once per word, and `open()`'s layers cost as much as the read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        if size is None:
            size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) <= size:
            return data
        parts = [data]  # it grew since its size was taken: read on to its end
        while more := os.read(fd, 1 << 16):
            parts.append(more)
        return b"".join(parts)
    finally:
        os.close(fd)

# Below this many files, starting worker processes costs more than it saves.
PARALLEL_MIN_FILES = 200
BATCH = 24  # small enough that the two busiest workers finish close together


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    files_seen: int = 0
    files_parsed: int = 0  # files with at least one definition parsed for a rule
    cache_hits: int = 0
    warnings: list[str] = field(default_factory=list)
    # modules imported from outside the project: dotted name -> (origin, path or None)
    outside: dict[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass
class _Done:
    """What one file's stages produced, and what the cache should learn from them."""

    record: ScanRecord
    outcome: Outcome | None = None
    analysed: bool = False
    cache_hit: bool = False
    stat_memo: list | None = None


class _CacheFacts(FactStore):
    def __init__(self, cache: Cache | None, sources: dict[Path, bytes]) -> None:
        self.cache = cache
        self.sources = sources
        self.new: dict[str, dict] = {}
        self.new_words: dict[str, dict[str, bool]] = {}
        self.keeps_words = cache is not None
        # digests whose facts this run read or wrote (modules outside the linted paths too:
        # the environment's, which no stat memo points to), kept when the cache is pruned
        self.used: set[str] = set()

    def get(self, d: str) -> dict | None:
        self.used.add(d)
        if d in self.new:
            return self.new[d]
        return self.cache.facts().get(d) if self.cache is not None else None

    def put(self, d: str, chunk_facts: dict) -> None:
        if self.cache is not None:  # kept only to be saved
            self.new[d] = chunk_facts

    def known_digest(self, path: Path) -> str | None:
        if self.cache is None or path in self.sources:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return self.cache.digest_for(str(path), st)

    def remember_digest(self, path: Path, d: str) -> None:
        # a file read from disk for a word search: its digest is kept by its stat, so the next
        # search (the next edit's, in a language server) answers it without reading it
        if self.cache is None or path in self.sources:
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        self.cache.remember(str(path), st, d)

    def holds_word(self, d: str, word: str) -> bool | None:
        got = self.new_words.get(d, {}).get(word)
        if got is None and self.cache is not None:
            got = self.cache.holds_word(d, word)
        return got

    def put_word(self, d: str, word: str, present: bool) -> None:
        if self.cache is not None:
            self.new_words.setdefault(d, {})[word] = present


class Engine:
    def __init__(
        self,
        rules: list[type[Rule]],
        options: dict[str, dict[str, Any]],
        *,
        prefilter: bool = True,
        jobs: int | None = None,
        cache: Cache | None = None,
        warn_unused_ignores: bool = False,
        per_file_ignores: dict[str, list[str]] | None = None,
        root: Path | None = None,
        cwd: Path | None = None,
        listing: Callable[[], list[Path]] | None = None,
        environment: Environment | None = None,
    ) -> None:
        self.environment = environment if environment is not None else Environment.models_only()
        self.emitted = [r.CODE for r in rules if r.EMITTED_BY_ENGINE]
        self.plan = Plan.build(rules, options, prefilter)
        self.codes = [r.CODE for r in self.plan.rules]
        self.options = options
        self.prefilter = prefilter
        self.jobs = jobs or os.cpu_count() or 1
        self.cache = cache
        self.warn_unused_ignores = warn_unused_ignores
        self.per_file_ignores = per_file_ignores or {}
        self.cwd = Path(os.path.abspath(cwd or Path.cwd()))
        self._cwd_prefix = str(self.cwd).rstrip(os.sep) + os.sep
        self.root = Path(os.path.abspath(root or self.cwd))
        self._listing = listing or (lambda: list_python_files(self.root))
        self._sources: dict[Path, bytes] = {}
        self._facts = _CacheFacts(cache, self._sources)
        self._digests_now: dict[str, str | None] = {}
        self._exists_now: dict[str, bool] = {}
        self.project = self._new_project()
        self.pool_warning: str | None = None

    def _new_project(self) -> Project:
        return Project(
            self.root,
            read=self._read_for_project,
            facts=self._facts,
            display=lambda p: display_path(p, self.cwd),
            listing=self._listing,
            digest=digest,
            environment=self.environment,
        )

    def _shown(self, path: Path) -> str:
        """As `discovery.display_path`, without building paths: relative to the current folder
        when under it."""
        raw = str(path)
        prefix = self._cwd_prefix
        if raw.startswith(prefix):
            return raw[len(prefix) :].replace(os.sep, "/")
        return display_path(path, self.cwd)

    def _read_for_project(self, path: Path) -> bytes:
        given = self._sources.get(path)
        if given is not None:
            return given
        return read_bytes(path)

    # -- public ----------------------------------------------------------------------------
    def lint(self, files: Iterable[Path], sources: dict[Path, bytes] | None = None) -> LintResult:
        """`sources`: bytes to lint instead of reading those paths (an editor's unsaved
        buffer); the project's other files still come from disk."""
        self._sources.clear()
        self._sources.update((Path(os.path.abspath(p)), data) for p, data in (sources or {}).items())
        self.project.forget_file_states()
        self._digests_now = {}  # what the files' bytes are now, looked at once per run
        self._exists_now = {}
        paths = list(dict.fromkeys(_absolute(p) for p in files))
        for path, data in self._sources.items():
            self.project.module_at(path, data)
        result = LintResult()
        done = self._run(paths, result)
        result.files_seen = len(done)
        pfi = PerFileIgnores(self.per_file_ignores, self.root)
        errors: list[FileError] = []
        candidates = []
        for d in done:
            if d.record.error is not None:
                errors.append(d.record.error)
                continue
            if d.outcome is None:
                continue
            # a rule's internal error in a file where that rule is ignored is not reported:
            # per-file-ignores is how a project lints on while a rule fails on one file
            errors.extend(
                e for e in d.outcome.errors
                if e.rule is None or not pfi or e.rule not in pfi.codes_for(d.record.path)
            )
            if d.analysed and d.outcome.parsed:
                result.files_parsed += 1
            if d.cache_hit:
                result.cache_hits += 1
            for dep in d.outcome.deps:
                if dep[0] == "module":
                    result.outside.setdefault(dep[1], (dep[2], dep[3]))
            if d.record.skip:
                continue
            candidates.extend((d.record.shown, c) for c in d.outcome.candidates)
        for code, why in self.plan.broken.items():
            errors.append(FileError(f"<rule {code}>", why))
        self._save_cache(done, result)
        sources_list = [
            SourceFile(
                d.record.path,
                d.record.shown,
                d.record.has_marker,
                parsed=d.outcome is None or d.outcome.parsed,
                source=self._sources.get(d.record.path),
            )
            for d in done
            if d.record.error is None
        ]
        enabled = self.codes + self.emitted + (["IC900"] if self.warn_unused_ignores else [])
        final = finalize(candidates, sources_list, enabled=enabled, per_file_ignores=pfi, root=self.root)
        result.findings = sorted(final.findings + final.suppression_findings, key=Finding.sort_key)
        result.errors = sorted(errors, key=lambda e: (e.path, e.line or 0, e.message))
        if self.pool_warning:
            result.warnings.append(self.pool_warning)
        return result

    # -- stages 1-4 for every file -----------------------------------------------------------
    def _run(self, paths: list[Path], result: LintResult) -> list[_Done]:
        # What the cache vouches for is answered here (no read, no worker); the rest is
        # scanned and analysed, in workers when there is much of it.
        done: dict[Path, _Done] = {}
        misses = paths
        if self.cache is not None:
            misses = []
            for p in paths:
                d = self._from_cache(p)
                if d is None:
                    misses.append(p)
                else:
                    done[p] = d
        if self.jobs > 1 and len(misses) >= PARALLEL_MIN_FILES and sys.platform == "linux" and not self._sources:
            fresh = self._run_parallel(misses)
            if fresh is not None:
                done.update((d.record.path, d) for d in fresh)
                return [done[p] for p in paths]
        for p in misses:
            done[p] = self._one(p)
        return [done[p] for p in paths]

    def _from_cache(self, path: Path) -> _Done | None:
        """A file whose bytes the stat memo knows, answered from the cache alone; None when
        it must be read or analysed."""
        if path in self._sources:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        known = self.cache.digest_for(str(path), st)
        info = self.cache.scan_info(known) if known is not None else None
        if info is None:
            return None
        rec = ScanRecord(path, self._shown(path), known, info.has_marker, info.skip, info.rules)
        d = _Done(rec)
        if not rec.rules or rec.skip:
            return d
        cached = self.cache.outcome(known, rec.shown)
        if cached is None or not self._still_valid(cached):
            return None
        d.outcome, d.cache_hit = cached, True
        return d

    def _run_parallel(self, paths: list[Path]) -> list[_Done] | None:
        batches = [paths[i : i + BATCH] for i in range(0, len(paths), BATCH)]
        _WORKER["engine"] = self
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=min(self.jobs, len(batches)), mp_context=ctx) as pool:
                outputs = list(pool.map(_work_batch, batches, chunksize=1))
        except (OSError, BrokenProcessPool) as exc:
            # no worker processes here (a sandbox, no /dev/shm) or one died: the serial
            # path still lints every file
            self.pool_warning = f"parallel linting failed ({type(exc).__name__}: {exc}); ran serially"
            return None
        finally:
            _WORKER.pop("engine", None)
        done: list[_Done] = []
        for batch_done, new_facts, new_words, used in outputs:
            done.extend(batch_done)
            self._facts.new.update(new_facts)
            self._facts.used |= used
            for d, words in new_words.items():
                self._facts.new_words.setdefault(d, {}).update(words)
        return done

    def _one(self, path: Path) -> _Done:
        rec, memo, data = self._scan(path)
        d = _Done(rec, stat_memo=memo)
        if rec.error is not None or not rec.rules or rec.skip:
            return d
        cached = None
        if self.cache is not None and not rec.given and rec.digest:
            cached = self.cache.outcome(rec.digest, rec.shown)
            if cached is not None and not self._still_valid(cached):
                cached = None
        if cached is not None:
            d.outcome, d.cache_hit = cached, True
            return d
        # the bytes the scan read: read once, and the same object, so that the text decoded
        # from them is the one the scan's needs already indexed
        module = self.project.module_at(path, data)
        if module.digest is None:
            module.digest = rec.digest
        d.outcome = analyze(Context(self.project), module, rec, self.plan)
        d.analysed = True
        # its trees were most of a run's memory; other files' questions parse them again
        module.release_trees()
        return d

    def _scan(self, path: Path) -> tuple[ScanRecord, list | None, bytes | None]:
        rec = ScanRecord(path, self._shown(path))
        given = self._sources.get(path)
        memo = None
        try:
            if given is not None:
                data = given
                rec.given = True
            else:
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):
                    # a FIFO would block the read below forever; a device is not source code
                    rec.error = FileError(rec.shown, "cannot read: not a regular file")
                    return rec, None, None
                known = self.cache.digest_for(str(path), st) if self.cache is not None else None
                if known is not None:
                    info = self.cache.scan_info(known)
                    if info is not None:
                        rec.digest = known
                        rec.has_marker, rec.skip, rec.rules = info.has_marker, info.skip, info.rules
                        return rec, None, None
                data = read_bytes(path, st.st_size)
        except FileNotFoundError:
            rec.error = FileError(rec.shown, "cannot read: file disappeared while linting")
            return rec, None, None
        except IsADirectoryError:
            rec.error = FileError(rec.shown, "cannot read: is a directory")
            return rec, None, None
        except OSError as exc:
            rec.error = FileError(rec.shown, f"cannot read: {exc.strerror or exc}")
            return rec, None, None
        rec.digest = digest(data)
        lower = data.lower()
        rec.has_marker = suppressions.has_marker(data, lower)
        rec.skip = rec.has_marker and suppressions.parse(data).skip_file
        if not rec.skip:
            rec.rules = self.plan.codes_for(_lines(data), lower)
        if self.cache is not None and not rec.given:
            self.cache.put_scan_info(rec.digest, ScanInfo(rec.has_marker, rec.skip, rec.rules))
            self.cache.remember(str(path), st, rec.digest)
            memo = self.cache.stat.get(str(path))
        return rec, memo, data

    def _still_valid(self, outcome: Outcome) -> bool:
        """Whether everything a cached outcome depended on is as it was. Each file is looked
        at once per run, however many outcomes name it (N files that all depend on the same
        N files cost N^2 lookups, not N^2 stats)."""
        for dep in outcome.deps:
            kind = dep[0]
            if kind == "file":
                now = self._digests_now.get(dep[1], _UNSEEN)
                if now is _UNSEEN:
                    now = self._digests_now[dep[1]] = self._digest_now(Path(dep[1]))
                if now != dep[2]:
                    return False
            elif kind == "exists":
                now = self._exists_now.get(dep[1])
                if now is None:
                    now = self._exists_now[dep[1]] = os.path.isfile(dep[1])
                if now != dep[2]:
                    return False
            elif kind == "word":
                if self.project.files_containing_noted(dep[1]) != tuple(dep[2]):
                    return False
        return True

    def _digest_now(self, path: Path) -> str | None:
        if path in self._sources:
            return digest(self._sources[path])
        try:
            st = os.stat(path)
        except OSError:
            return None
        if self.cache is not None:
            known = self.cache.digest_for(str(path), st)
            if known is not None:
                return known
        try:
            with open(path, "rb") as fh:
                return digest(fh.read())
        except OSError:
            return None

    def _save_cache(self, done: list[_Done], result: LintResult) -> None:
        if self.cache is None:
            return
        for d in done:
            rec = d.record
            if rec.error is not None or rec.given or not rec.digest:
                continue
            if d.stat_memo is not None:
                self.cache.stat[str(rec.path)] = d.stat_memo
                self.cache.dirty = True
            if rec.digest not in self.cache.files:  # scanned in a worker
                self.cache.put_scan_info(rec.digest, ScanInfo(rec.has_marker, rec.skip, rec.rules))
            if d.analysed and d.outcome is not None and not any(e.rule for e in d.outcome.errors):
                # a rule's internal error is not cached: the next run tries again (and shows
                # its traceback under INVARIANT_CHECK_DEBUG)
                self.cache.put_outcome(rec.digest, rec.shown, d.outcome)
        from ..analysis.project import ChunkFacts

        for file_digest, words in self._facts.new_words.items():
            for word, present in words.items():
                self.cache.put_word(file_digest, word, present)
        for file_digest, chunks in self._facts.new.items():
            self.cache.put_facts(
                file_digest, {k: (v.to_json() if isinstance(v, ChunkFacts) else v) for k, v in chunks.items()}
            )
        live = {d.record.digest for d in done if d.record.digest}
        err = self.cache.save(live, self._facts.used | set(self._facts.new))
        if err:
            result.warnings.append(err)


def _absolute(p) -> Path:
    # discovery already gives absolute, normalised paths: building a Path again costs more
    # than the whole stat of the file
    raw = os.fspath(p)
    full = os.path.abspath(raw)
    return p if full == raw and isinstance(p, Path) else Path(full)


def _lines(data: bytes) -> bytes:
    # needs read words; Python also ends lines at a lone CR
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if b"\r" in data else data


# -- worker side ------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _work_batch(paths: list[Path]) -> tuple[list[_Done], dict[str, dict], dict[str, dict[str, bool]], set[str]]:
    """In a forked worker: stages 1-4 for a batch of files. The cache object is the parent's
    copy; what it learns goes back in the records."""
    engine: Engine = _WORKER["engine"]
    before = set(engine._facts.new)
    new_words = engine._facts.new_words
    engine._facts.new_words = {}
    done = []
    for path in paths:
        d = engine._one(path)
        if engine.cache is not None and d.record.digest and d.stat_memo is None:
            d.stat_memo = engine.cache.stat.get(str(path))
        done.append(d)
    new_facts = {k: v for k, v in engine._facts.new.items() if k not in before}
    engine._facts.new = {k: engine._facts.new[k] for k in before}
    learned = engine._facts.new_words
    # what this batch learned goes back; the worker keeps all of it for its later batches
    for d, words in learned.items():
        new_words.setdefault(d, {}).update(words)
    engine._facts.new_words = new_words
    used, engine._facts.used = engine._facts.used, set()
    return done, new_facts, learned, used


# -- the project's files ------------------------------------------------------------------------
_SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".eggs", "build",
    "dist", "node_modules", "site-packages", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".invariant-check-cache",
})


def list_python_files(root: Path) -> list[Path]:
    """Every `.py` file under the project root (the default when the caller gives no listing)."""
    out: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info")
            and not os.path.isfile(os.path.join(folder, d, "pyvenv.cfg"))
        )
        out.extend(Path(folder) / f for f in sorted(files) if f.endswith(".py"))
    return out
