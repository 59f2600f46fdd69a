"""pytest plugin (entry point `pytest11`): `pytest --invariant-guards` turns the runtime guards on
for the session, and a test during which a guard fires fails.

Loaded by every pytest run in an environment where invariant-check is installed, so at import
time it only defines the option; nothing heavy (no torch, no vLLM) is imported.
"""

from __future__ import annotations

import os

import pytest

_KEY_DIR = "invariant_check_report_dir"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("invariant-check")
    group.addoption(
        "--invariant-guards",
        action="store",
        nargs="?",
        const="all",
        default=None,
        metavar="GUARDS",
        help="Enable invariant-check's runtime guards in this process and in the vLLM processes it "
        "starts (value as INVARIANT_CHECK_GUARDS; default all). A test during which a guard fires fails.",
    )


def pytest_configure(config: pytest.Config) -> None:
    value = config.getoption("--invariant-guards", default=None)
    if not value:
        return
    from .config import ENV_GUARDS, ENV_MODE, ENV_REPORT_DIR, ConfigError, parse_guards

    try:
        parse_guards(value)
    except ConfigError as exc:
        raise pytest.UsageError(f"--invariant-guards: {exc}") from None
    # Environment first: vLLM's engine and workers are new processes and read it there.
    os.environ[ENV_GUARDS] = value
    os.environ.setdefault(ENV_MODE, "raise")
    if not os.environ.get(ENV_REPORT_DIR):
        import tempfile

        os.environ[ENV_REPORT_DIR] = tempfile.mkdtemp(prefix="invariant-check-pytest-")
    config.stash[_STASH] = os.environ[ENV_REPORT_DIR]
    from . import plugin

    plugin.register()


_STASH = pytest.StashKey[str]()


def _violation_lines(report_dir: str, seen: dict[str, int]) -> list[dict]:
    """Violations written since the last call, from every process (workers included)."""
    import json
    from pathlib import Path

    new: list[dict] = []
    for f in sorted(Path(report_dir).glob("invariant-check-*.jsonl")):
        try:
            data = f.read_bytes()
        except OSError:
            continue
        start = seen.get(f.name, 0)
        seen[f.name] = len(data)
        for line in data[start:].decode("utf-8", "replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "violation":
                new.append(rec)
    return new


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    report_dir = item.config.stash.get(_STASH, None)
    if report_dir is None:
        yield
        return
    seen = item.config.stash.setdefault(_SEEN, {})
    _violation_lines(report_dir, seen)  # forget whatever happened before this test
    outcome = yield
    new = _violation_lines(report_dir, seen)
    if new and outcome.excinfo is None:
        first = new[0]
        # Raised in a worker process, or recorded in warn/record mode: fail this test anyway.
        pytest.fail(
            f"invariant-check: {len(new)} guard violation(s) during this test; first: "
            f"[{first.get('guard')}/{first.get('invariant')}] {first.get('message')} (pid {first.get('pid')})",
            pytrace=False,
        )


_SEEN = pytest.StashKey[dict]()
