"""Parsing of the INVARIANT_CHECK_* environment variables, once, into a GuardConfig.

Kept free of torch/vLLM imports: the vLLM plugin calls it in every process, including ones that
never run a model, and the CLI uses it too. Guards read the parsed GuardConfig (through
`runtime.config()`), never the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ENV_GUARDS = "INVARIANT_CHECK_GUARDS"
ENV_MODE = "INVARIANT_CHECK_GUARDS_MODE"
ENV_REPORT_DIR = "INVARIANT_CHECK_REPORT_DIR"
ENV_SYNC = "INVARIANT_CHECK_GUARDS_SYNC"
ENV_FAULT = "INVARIANT_CHECK_TEST_FAULT"
ENV_COMPACTION = "INVARIANT_CHECK_COMPACTION"

TOPK_LAYOUT = "topk-layout"
GROUP_METADATA = "group-metadata"
METADATA_COHERENCE = "metadata-coherence"
GUARD_NAMES: tuple[str, ...] = (TOPK_LAYOUT, GROUP_METADATA, METADATA_COHERENCE)
MODES: tuple[str, ...] = ("raise", "warn", "record")
# "deferred": device-side results are read where vLLM has synchronised anyway (the next
# proposal); "eager": at once, one host sync per check, for debugging sessions.
SYNCS: tuple[str, ...] = ("deferred", "eager")
# Fault-injection switches for this project's own tests; see faults.py.
FAULTS: tuple[str, ...] = (
    "drop-compaction",
    "wrong-rows",
    "wrong-slot-ids",
    "double-compaction",
    "bad-group-metadata",
    "stale-max-seq-len",
)
COMPACTIONS: tuple[str, ...] = ("vllm", "triton")


class ConfigError(ValueError):
    """An INVARIANT_CHECK_* variable has a value we refuse to guess about."""


@dataclass(frozen=True)
class GuardConfig:
    guards: frozenset[str]
    mode: str = "raise"
    report_dir: str | None = None
    faults: frozenset[str] = frozenset()
    compaction: str = "vllm"
    sync: str = "deferred"

    @property
    def enabled(self) -> bool:
        return bool(self.guards)

    @property
    def installs(self) -> bool:
        """Whether the plugin patches anything: a guard is on, or the compaction is swapped.
        Faults alone install nothing: they exist to show a guard catching them."""
        return self.enabled or self.compaction != "vllm"

    def on(self, guard: str) -> bool:
        return guard in self.guards


def _accepted_guards() -> str:
    return "1, all, 0 (or empty/unset: off), or a comma list of: " + ", ".join(GUARD_NAMES)


def parse_guards(raw: str | None) -> frozenset[str]:
    value = (raw or "").strip().lower()
    if value in ("", "0", "off", "none", "false"):
        return frozenset()
    if value in ("1", "all", "on", "true"):
        return frozenset(GUARD_NAMES)
    names = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [n for n in names if n not in GUARD_NAMES]
    if unknown or not names:
        raise ConfigError(
            f"{ENV_GUARDS}={raw!r} is not valid (unknown: {', '.join(unknown) or raw!r}); "
            f"accepted values: {_accepted_guards()}. No guard was installed."
        )
    return frozenset(names)


def _parse_choice(var: str, raw: str | None, choices: tuple[str, ...], default: str) -> str:
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value not in choices:
        raise ConfigError(
            f"{var}={raw!r} is not valid; accepted values: {', '.join(choices)}. "
            "No guard was installed."
        )
    return value


def parse_faults(raw: str | None) -> frozenset[str]:
    names = [p.strip().lower() for p in (raw or "").split(",") if p.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ConfigError(
            f"{ENV_FAULT}={raw!r} is not valid (unknown: {', '.join(unknown)}); accepted values: "
            f"a comma list of: {', '.join(FAULTS)}. No guard was installed."
        )
    return frozenset(names)


def parse_env(environ: Mapping[str, str] | None = None) -> GuardConfig:
    """Read the configuration; raises ConfigError with a one-line message on a bad value."""
    env = os.environ if environ is None else environ
    return GuardConfig(
        guards=parse_guards(env.get(ENV_GUARDS)),
        mode=_parse_choice(ENV_MODE, env.get(ENV_MODE), MODES, "raise"),
        report_dir=(env.get(ENV_REPORT_DIR) or "").strip() or None,
        faults=parse_faults(env.get(ENV_FAULT)),
        compaction=_parse_choice(ENV_COMPACTION, env.get(ENV_COMPACTION), COMPACTIONS, "vllm"),
        sync=_parse_choice(ENV_SYNC, env.get(ENV_SYNC), SYNCS, "deferred"),
    )
