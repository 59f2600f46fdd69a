"""Runs the enabled rules over a list of files: prefilter, parse once, one batched traversal,
cross-file finalize, suppressions. No output formatting here."""

from __future__ import annotations

import ast
import multiprocessing
import os
import re
import stat
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from . import suppressions
from .cache import Cache, digest
from .discovery import display_path
from .finalize import SourceFile, finalize
from .rule import Rule, RuleContext
from .traversal import walk_batched
from .types import Candidate, FileError, FileResult, Finding

# Below this many files to parse, starting worker processes costs more than it saves.
PARALLEL_MIN_FILES = 6
PARALLEL_SCAN_MIN_FILES = 400
SCAN_CHUNK = 96


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    files_seen: int = 0
    files_parsed: int = 0
    cache_hits: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class _FileState:
    path: Path
    shown: str
    digest: str | None = None
    report_rules: set[str] = field(default_factory=set)  # rules whose prefilter matched
    wanted: bool = False  # must be parsed
    has_marker: bool = False
    source: bytes | None = None
    result: FileResult | None = None
    given: bool = False  # its bytes came with the call (stdin): no stat memo, nothing cached


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
    ) -> None:
        # IC900/IC901 are reported while suppressions are applied, not run on syntax trees
        self.emitted = [r.CODE for r in rules if getattr(r, "EMITTED_BY_ENGINE", False)]
        rules = [r for r in rules if not getattr(r, "EMITTED_BY_ENGINE", False)]
        self.rules = rules
        self.codes = [r.CODE for r in rules]
        self.options = options
        self.prefilter = prefilter
        self.jobs = jobs or os.cpu_count() or 1
        self.cache = cache
        self.warn_unused_ignores = warn_unused_ignores
        self.per_file_ignores = per_file_ignores or {}
        self.root = root or Path.cwd()
        self.cwd = cwd or Path.cwd()
        self._triggers = {
            r.CODE: tuple(t.encode() for t in r.triggers(options[r.CODE])) for r in rules
        }
        self.pool_warning: str | None = None
        self._fact_triggers = {
            r.CODE: tuple(t.encode() for t in r.fact_triggers(options[r.CODE])) for r in rules
        }

    # -- public ----------------------------------------------------------------------------
    def lint(self, files: Iterable[Path], sources: dict[Path, bytes] | None = None) -> LintResult:
        """`sources`: bytes to lint instead of reading those paths (an editor's unsaved buffer)."""
        result = LintResult()
        files = list(files)
        self._sources = {Path(p): data for p, data in (sources or {}).items()}
        states: list[_FileState] = []
        # Files the stat memo vouches for are scanned here (no read); the rest go to the
        # workers when there are many of them.
        misses = files
        if self.cache is not None and self._parallel_scan(files):
            misses = []
            for path in files:
                if path not in self._sources and self._memo_hit(path):
                    self._scan_into(path, states, result)
                else:
                    misses.append(path)
        scanned = self._scan_parallel(misses, result) if self._parallel_scan(misses) else None
        if scanned is None:
            for path in misses:
                self._scan_into(path, states, result)
        else:
            states.extend(scanned)
        result.files_seen = len(states) + len(result.errors)

        # rule code -> why its cross-file pass failed; its candidates are dropped, not guessed
        self._broken: dict[str, str] = {}
        # Cross-file rules may need files that hold none of their triggers: iterate on names.
        names_seen: set[bytes] = set()
        while True:
            self._parse_wanted(states, result)
            facts = self._facts(states)
            names = set()
            for rule in self.rules:
                if rule.CODE in self._broken:
                    continue
                try:
                    names |= {
                        n.encode()
                        for n in rule.expand_triggers(facts.get(rule.CODE, {}), self.options[rule.CODE])
                    }
                except Exception as exc:  # one rule's bug must not stop the others
                    self._broken[rule.CODE] = f"internal error in expand_triggers: {_one_line(exc)}"
            new = names - names_seen
            if not new:
                break
            names_seen |= new
            grew = False
            pattern = re.compile(b"|".join(re.escape(n) for n in sorted(new, key=len, reverse=True)))
            for s in states:
                if not s.wanted and self._contains_any(s, new, pattern):
                    s.wanted = True
                    grew = True
            if not grew:
                break

        self._finish(states, facts, result)
        if self.pool_warning:
            result.warnings.append(self.pool_warning)
        if self.cache is not None:
            live = {s.digest for s in states if s.digest}
            err = self.cache.save(live)
            if err:
                result.warnings.append(err)
        result.findings.sort(key=Finding.sort_key)
        result.errors.sort(key=lambda e: (e.path, e.line or 0))
        return result

    # -- scanning and prefiltering -----------------------------------------------------------
    def _scan(self, s: _FileState) -> FileError | None:
        s.given = s.path in self._sources
        try:
            st = os.stat(s.path) if not s.given else None
            if st is not None and not stat.S_ISREG(st.st_mode):
                # a FIFO would block the read below forever; a device is not source code
                return FileError(s.shown, "cannot read: not a regular file")
            cached = self.cache.digest_for(str(s.path), st) if self.cache and st is not None else None
            if cached is not None:
                entry = self.cache.entries[cached]
                if isinstance(entry.get("m"), list) and isinstance(entry.get("w"), bool):
                    s.digest = cached
                    s.report_rules = set(entry["m"])
                    s.has_marker = bool(entry.get("s", False))
                    s.wanted = entry["w"] or not self.prefilter
                    if entry.get("skip"):
                        s.wanted = False
                    return None
            if s.given:
                data = self._sources[s.path]
            else:
                with open(s.path, "rb") as fh:
                    data = fh.read()
        except FileNotFoundError:
            return FileError(s.shown, "cannot read: file disappeared while linting")
        except IsADirectoryError:
            return FileError(s.shown, "cannot read: is a directory")
        except OSError as exc:
            return FileError(s.shown, f"cannot read: {exc.strerror or exc}")
        s.digest = digest(data)
        s.source = data
        s.has_marker = suppressions.has_marker(data)
        skip = s.has_marker and suppressions.parse(data).skip_file
        matched = set()
        fact_hit = False
        if not skip:
            # Prefilters read lines; Python also ends lines at a lone CR.
            text = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if b"\r" in data else data
            for rule in self.rules:
                opts = self.options[rule.CODE]
                trig = self._triggers[rule.CODE]
                if any(t in text for t in trig) and rule.may_apply(text, opts):
                    matched.add(rule.CODE)
                if (
                    not fact_hit
                    and any(t in text for t in self._fact_triggers[rule.CODE])
                    and rule.may_collect(text, opts)
                ):
                    fact_hit = True
        s.report_rules = matched
        wanted = bool(matched) or fact_hit
        s.wanted = (wanted or not self.prefilter) and not skip
        if self.cache is not None and not s.given:
            entry = self.cache.entry(s.digest)
            entry.update({"m": sorted(matched), "w": wanted, "s": s.has_marker, "skip": skip})
            self.cache.remember(str(s.path), st, s.digest)
        return None

    def _scan_into(self, path: Path, states: list[_FileState], result: LintResult) -> None:
        state = _FileState(path, display_path(path, self.cwd))
        err = self._scan(state)
        if err:
            result.errors.append(err)
        else:
            states.append(state)

    def _memo_hit(self, path: Path) -> bool:
        try:
            return self.cache.digest_for(str(path), os.stat(path)) is not None
        except OSError:
            return False

    def _parallel_scan(self, files: list[Path]) -> bool:
        # Reading and prefiltering a large tree costs as much as parsing its few trigger
        # files, so both run in the workers; small runs (pre-commit) stay in this process.
        return self.jobs > 1 and len(files) >= PARALLEL_SCAN_MIN_FILES and sys.platform == "linux"

    def _scan_parallel(self, files: list[Path], result: LintResult) -> list[_FileState] | None:
        """Scan, prefilter and parse in forked workers, chunk by chunk. None: pool unavailable."""
        chunks = [files[i : i + SCAN_CHUNK] for i in range(0, len(files), SCAN_CHUNK)]
        _WORKER["engine"] = self
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=min(self.jobs, len(chunks)), mp_context=ctx) as pool:
                outputs = list(pool.map(_scan_chunk, chunks, chunksize=1))
        except (OSError, BrokenProcessPool) as exc:
            self.pool_warning = f"parallel linting failed ({type(exc).__name__}: {exc}); ran serially"
            return None
        finally:
            _WORKER.pop("engine", None)
        states = []
        for records in outputs:
            for rec in records:
                state, err, entry, memo, parsed = rec
                if err is not None:
                    result.errors.append(err)
                    continue
                states.append(state)
                if parsed:
                    result.files_parsed += 1
                elif state.result is not None:
                    result.cache_hits += 1
                if self.cache is not None and state.digest:
                    if entry is not None:
                        self.cache.entries[state.digest] = entry
                        self.cache.dirty = True
                    if memo is not None:
                        self.cache.stat_memo[str(state.path)] = memo
        return states

    def _contains_any(self, s: _FileState, names: set[bytes], pattern: re.Pattern[bytes]) -> bool:
        """Whether the file holds any of `names`; one regex pass per round, memoised by hash."""
        entry = self.cache.entry(s.digest) if (self.cache and s.digest) else None
        if entry is not None and not isinstance(entry.get("x"), dict):
            entry["x"] = {}
        known = entry["x"] if entry is not None else {}
        if any(n.decode() not in known for n in names):
            data = s.source if s.source is not None else self._sources[s.path] if s.given else _read(s.path)
            if data is None:
                return False
            present = {m.group(0) for m in pattern.finditer(data)}
            for n in names:
                known[n.decode()] = n in present
            if entry is not None:
                self.cache.dirty = True
        return any(known[n.decode()] for n in names)

    # -- parsing -------------------------------------------------------------------------------
    def _parse_wanted(self, states: list[_FileState], result: LintResult) -> None:
        todo = []
        for s in states:
            if not s.wanted or s.result is not None:
                continue
            cached = self._cached_result(s)
            if cached is not None:
                s.result = cached
                result.cache_hits += 1
            else:
                todo.append(s)
        if not todo:
            return
        result.files_parsed += len(todo)
        tasks = [(str(s.path), s.shown, s.source) for s in todo]
        for s in todo:
            s.source = None  # the worker owns the bytes now; keeps peak memory down
        outputs = self._run_tasks(tasks)
        for s, (file_digest, res) in zip(todo, outputs):
            self._keep_result(s, file_digest, res)

    def _keep_result(self, s: _FileState, file_digest: str | None, res: FileResult) -> None:
        """Record a fresh parse on the state and in the cache."""
        s.result = res
        if file_digest is not None:
            s.digest = file_digest
        if self.cache is not None and s.digest and res.error is None and not s.given:
            # Keyed by path as well as content: findings carry their path, and two files
            # with the same bytes (copies, empty __init__.py) must not share them.
            entry = self.cache.entry(s.digest)
            if not isinstance(entry.get("r"), dict):
                entry["r"] = {}
            entry["r"][s.shown] = res.to_json()
            self.cache.dirty = True

    def _cached_result(self, s: _FileState) -> FileResult | None:
        if self.cache is None or not s.digest or s.given:
            return None
        entry = self.cache.entries.get(s.digest)
        if not isinstance(entry, dict) or not isinstance(entry.get("r"), dict):
            return None
        raw = entry["r"].get(s.shown)
        if raw is None:
            return None
        try:
            return FileResult.from_json(raw)
        except (KeyError, TypeError, ValueError, IndexError):
            return None  # a damaged entry is a miss

    def _run_tasks(self, tasks):
        jobs = min(self.jobs, len(tasks))
        if jobs <= 1 or len(tasks) < PARALLEL_MIN_FILES:
            return self._run_serial(tasks)
        try:
            return self._run_pool(tasks, jobs)
        except (OSError, BrokenProcessPool) as exc:
            # No worker processes here (sandbox, no /dev/shm) or one died (a parser crash in
            # native code): the serial path still lints every file.
            self.pool_warning = f"parallel linting failed ({type(exc).__name__}: {exc}); ran serially"
            return self._run_serial(tasks)

    def _run_serial(self, tasks):
        _init_worker(self.rules, self.options)
        return [_work(t) for t in tasks]

    def _run_pool(self, tasks, jobs):
        # Biggest files first so that no worker is left with a long tail.
        order = sorted(range(len(tasks)), key=lambda i: -(len(tasks[i][2] or b"") or 1))
        ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        out: list = [None] * len(tasks)
        with ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(self.rules, self.options),
        ) as pool:
            for i, res in zip(order, pool.map(_work, [tasks[i] for i in order], chunksize=1)):
                out[i] = res
        return out

    # -- cross-file pass and filtering ----------------------------------------------------------
    def _facts(self, states: list[_FileState]) -> dict[str, dict[str, Any]]:
        facts: dict[str, dict[str, Any]] = {code: {} for code in self.codes}
        for s in states:
            if s.result is None:
                continue
            for code, value in s.result.facts.items():
                if code in facts:
                    facts[code][s.shown] = value
        return facts

    def _finish(self, states, facts, result: LintResult) -> None:
        by_rule: dict[str, list[tuple[str, Candidate]]] = {code: [] for code in self.codes}
        by_shown = {s.shown: s for s in states}
        for s in states:
            if s.result is None:
                continue
            if s.result.error is not None:
                result.errors.append(s.result.error)
                # a parse error has no candidates; a rule error keeps the other rules' ones
            for cand in s.result.candidates:
                code = cand.finding.rule
                if code not in by_rule:
                    continue
                if self.prefilter and code not in s.report_rules:
                    continue
                by_rule[code].append((s.shown, cand))
        kept: list[tuple[str, Candidate]] = []
        for rule in self.rules:
            if rule.CODE in self._broken:
                continue
            try:
                kept.extend(rule.finalize(by_rule[rule.CODE], facts[rule.CODE], self.options[rule.CODE]))
            except Exception as exc:  # one rule's bug must not stop the others
                self._broken[rule.CODE] = f"internal error in finalize: {_one_line(exc)}"
        for code, why in self._broken.items():
            result.errors.append(FileError(f"<rule {code}>", why))

        files = [
            SourceFile(
                s.path,
                s.shown,
                s.has_marker,
                parsed=s.result is None or s.result.error is None,
                source=self._sources.get(s.path),
            )
            for s in states
        ]
        enabled = self.codes + self.emitted + (["IC900"] if self.warn_unused_ignores else [])
        done = finalize(kept, files, enabled=enabled, per_file_ignores=self.per_file_ignores, root=self.root)
        result.findings.extend(done.findings + done.suppression_findings)


def _read(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


# -- worker side (runs in this process or in a pool worker) ------------------------------------
_WORKER: dict[str, Any] = {}


def _init_worker(rules: list[type[Rule]], options: dict[str, dict[str, Any]]) -> None:
    _WORKER["rules"] = rules
    _WORKER["options"] = options


def _scan_chunk(paths: list[Path]) -> list[tuple]:
    """In a forked worker: scan each file, and parse the wanted ones at once (their bytes are
    in hand). Returns what the parent needs: the state, an error, the cache entry and stat
    memo for the file, and whether it was parsed."""
    engine: Engine = _WORKER["engine"]
    _init_worker(engine.rules, engine.options)
    out = []
    for path in paths:
        state = _FileState(path, display_path(path, engine.cwd))
        err = engine._scan(state)
        parsed = False
        if err is None and state.wanted:
            cached = engine._cached_result(state)
            if cached is not None:
                state.result = cached
            else:
                engine._keep_result(state, *_work((str(path), state.shown, state.source)))
                parsed = True
        state.source = None  # the parent re-reads on the rare expansion round
        entry = memo = None
        if engine.cache is not None and state.digest:
            entry = engine.cache.entries.get(state.digest)
            memo = engine.cache.stat_memo.get(str(path))
        out.append((state, err, entry, memo, parsed))
    return out


def _work(task: tuple[str, str, bytes | None]) -> tuple[str | None, FileResult]:
    path, shown, data = task
    if data is None:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            reason = "file disappeared while linting" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
            return None, FileResult(error=FileError(shown, f"cannot read: {reason}"))
    return digest(data), lint_source(shown, data, _WORKER["rules"], _WORKER["options"])


# CPython's own parser refuses these before libcst's native parser would exhaust the C stack
# (a segfault, not an exception: `x = ((((...` 2000 deep kills the process).
_TOO_DEEP = ("too many nested", "too complex", "too many levels of indentation", "nested too deeply")


def _cpython_check(data: bytes) -> SyntaxError | str | None:
    """CPython's verdict: None (parses), its SyntaxError, or a reason the file is too deep.

    Costs a tenth of a libcst parse. Its SyntaxError only names the position for a file libcst
    rejects too: CPython may be older than the linted code's syntax.
    """
    try:
        compile(data, "<lint>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (MemoryError, RecursionError):
        return "nesting too deep"
    except SyntaxError as exc:
        if any(marker in str(exc.msg) for marker in _TOO_DEEP):
            return f"nesting too deep ({exc.msg})"
        return exc
    except Exception:  # NUL bytes (ValueError before 3.12) and the like: libcst decides
        return None
    return None


def lint_source(
    shown: str, data: bytes, rules: list[type[Rule]], options: dict[str, dict[str, Any]]
) -> FileResult:
    """Parse once, run every rule in one batched traversal; never raises."""
    verdict = _cpython_check(data)
    if isinstance(verdict, str):
        return FileResult(error=FileError(shown, f"cannot parse: {verdict}"))
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError as exc:
        return FileResult(error=_syntax_error(shown, exc, verdict))
    except UnicodeDecodeError as exc:
        return FileResult(
            error=FileError(shown, f"cannot decode: not valid {exc.encoding} (byte {exc.start})")
        )
    except (LookupError, SyntaxError) as exc:  # unknown coding cookie
        return FileResult(error=FileError(shown, f"cannot decode: {exc}"))
    except RecursionError:
        return FileResult(error=FileError(shown, "cannot parse: nesting too deep"))
    except BaseException as exc:  # a parser bug must not stop the other files
        # pyo3's PanicException (a panic in libcst's native parser) derives from BaseException.
        if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
        return FileResult(error=FileError(shown, f"cannot parse: {_one_line(exc)}"))
    try:
        return _visit(shown, module, rules, options)
    except RecursionError:
        return FileResult(error=FileError(shown, "cannot lint: nesting too deep"))
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            raise
    # A rule raised, and the batched traversal took every rule's results with it. Only on this
    # rare path: one traversal per rule, so that the error names the culprit and the other
    # rules still report in this file.
    out = FileResult()
    failed = []
    for rule in rules:
        try:
            part = _visit(shown, module, [rule], options)
        except RecursionError:
            failed.append(f"{rule.CODE}: nesting too deep")
            continue
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
                raise
            failed.append(f"{rule.CODE}: {_one_line(exc)}")
            continue
        out.candidates.extend(part.candidates)
        out.facts.update(part.facts)
    # (a failure that does not repeat rule by rule still leaves an error, never silence)
    out.error = FileError(shown, "internal error in a rule: " + ("; ".join(failed) or "batched traversal failed"))
    return out


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _syntax_error(shown: str, exc: cst.ParserSyntaxError, cpython: SyntaxError | None) -> FileError:
    # libcst's native parser often points at the token after the error (or column 0);
    # CPython's position and wording are the ones users know ("Missing parentheses in call
    # to 'print'" for Python 2 files), so they win when CPython rejects the file too.
    if isinstance(cpython, SyntaxError) and cpython.lineno:
        msg = " ".join(str(cpython.msg).split()) or "invalid syntax"
        return FileError(shown, f"syntax error: {msg}", cpython.lineno, max(1, cpython.offset or 1))
    first = " ".join(str(exc.message).split()) if exc.message else "invalid syntax"
    return FileError(shown, f"syntax error: {first}", exc.raw_line, exc.raw_column + 1)


def _visit(shown, module, rules, options) -> FileResult:
    instances = [r(RuleContext(shown, options[r.CODE])) for r in rules]
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    if any(inst.get_inherited_dependencies() for inst in instances):
        wrapper.visit_batched(instances)  # resolves the metadata the rules declared
    else:
        walk_batched(module, instances)  # same calls, without rebuilding every node
    out = FileResult()
    reported = [inst for inst in instances if inst.reports]
    if reported:
        positions = wrapper.resolve(PositionProvider)
        parents = wrapper.resolve(ParentNodeProvider)
        for inst in reported:
            for rep in inst.reports:
                rng = positions[rep.node]
                stmt_line = _statement_line(rep.node, parents, positions)
                finding = Finding(
                    shown,
                    rng.start.line,
                    rng.start.column + 1,
                    rng.end.line,
                    rng.end.column + 1,
                    inst.CODE,
                    inst.NAME,
                    rep.message,
                    rep.hint if rep.hint is not None else inst.HINT,
                )
                out.candidates.append(Candidate(finding, stmt_line, rep.data))
    for inst in instances:
        if inst.facts is not None:
            out.facts[inst.CODE] = inst.facts
    return out


def _statement_line(node, parents, positions) -> int:
    cur = node
    while cur is not None:
        if isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            # A decorated def/class starts at its first decorator, where a comment may sit.
            decorators = getattr(cur, "decorators", ())
            if decorators:
                return positions[decorators[0]].start.line
            return positions[cur].start.line
        cur = parents.get(cur)
    return positions[node].start.line
