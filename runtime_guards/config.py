"""Parsing of the INVARIANT_CHECK_* environment variables, once, into a GuardConfig.

Kept free of torch/vLLM imports: the vLLM plugin calls it in every process, including ones that
never run a model, and the CLI uses it too. Guards read the parsed GuardConfig (through
`runtime.config()`), never the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from invariant_check.settings import envvars

ENV_GUARDS = "INVARIANT_CHECK_GUARDS"
ENV_MODE = "INVARIANT_CHECK_GUARDS_MODE"
ENV_REPORT_DIR = "INVARIANT_CHECK_REPORT_DIR"
ENV_SYNC = "INVARIANT_CHECK_GUARDS_SYNC"
ENV_FAULT = "INVARIANT_CHECK_TEST_FAULT"
ENV_COMPACTION = "INVARIANT_CHECK_COMPACTION"

TOPK_LAYOUT = "topk-layout"
GROUP_METADATA = "group-metadata"
METADATA_COHERENCE = "metadata-coherence"
# The accepted values of every variable live in one table (invariant_check/settings/envvars.py), which the
# error messages and docs/guards.md are written from.
GUARD_NAMES: tuple[str, ...] = envvars.GUARD_NAMES
MODES: tuple[str, ...] = ("raise", "warn", "record")
# "deferred": device-side results are read where vLLM has synchronised anyway (the next
# proposal); "eager": at once, one host sync per check, for debugging sessions.
SYNCS: tuple[str, ...] = ("deferred", "eager")
# Fault-injection switches for this project's own tests; see faults.py.
FAULTS: tuple[str, ...] = envvars.FAULTS
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


NOT_INSTALLED = "No guard was installed."


def _parse(var: str, raw: str | None):
    try:
        return envvars.BY_NAME[var].parse(raw)
    except envvars.EnvError as exc:
        raise ConfigError(f"{exc}. {NOT_INSTALLED}") from None


def parse_guards(raw: str | None) -> frozenset[str]:
    return _parse(ENV_GUARDS, raw)


def parse_faults(raw: str | None) -> frozenset[str]:
    return _parse(ENV_FAULT, raw)


def parse_env(environ: Mapping[str, str] | None = None) -> GuardConfig:
    """Read the configuration; raises ConfigError with a one-line message on a bad value."""
    env = os.environ if environ is None else environ
    return GuardConfig(
        guards=parse_guards(env.get(ENV_GUARDS)),
        mode=_parse(ENV_MODE, env.get(ENV_MODE)),
        report_dir=_parse(ENV_REPORT_DIR, env.get(ENV_REPORT_DIR)),
        faults=parse_faults(env.get(ENV_FAULT)),
        compaction=_parse(ENV_COMPACTION, env.get(ENV_COMPACTION)),
        sync=_parse(ENV_SYNC, env.get(ENV_SYNC)),
    )
