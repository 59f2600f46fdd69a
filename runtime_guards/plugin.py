"""The vLLM general plugin: `register()` runs in every vLLM process (API server, engine core,
each worker, registry helper subprocesses) before any model is built.

It must be cheap, idempotent and never raise: a plugin exception would take the vLLM process
down, which is worse than running unguarded. It imports nothing from vLLM; the patches are
applied by an import hook as vLLM imports its own modules.
"""

from __future__ import annotations

import os

_state = {"done": False, "installed": False, "error": None}


def register() -> None:
    try:
        if _state["done"]:
            return
        _state["done"] = True
        from . import log
        from .config import ConfigError, parse_env

        try:
            cfg = parse_env(os.environ)
        except ConfigError as exc:
            _state["error"] = str(exc)
            log.error(str(exc))
            return
        if not cfg.installs:
            return
        _carry_env_to_ray_workers()
        from .patcher import install

        install(cfg)
        _state["installed"] = True
    except Exception as exc:  # noqa: BLE001 - never break vLLM from a plugin
        try:
            from . import log

            log.error(f"guards not installed: {type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001
            pass


RAY_PREFIXES_VAR = "VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY"
OUR_PREFIX = "INVARIANT_CHECK_"


def _carry_env_to_ray_workers() -> None:
    # The Ray executor copies only VLLM_*/HF_*/... variables to its actors; without this the
    # workers of a Ray run would come up unguarded. vLLM reads the variable when it creates
    # the actors, which is after plugins are loaded.
    current = os.environ.get(RAY_PREFIXES_VAR, "")
    names = [p.strip() for p in current.split(",") if p.strip()]
    if OUR_PREFIX not in names:
        os.environ[RAY_PREFIXES_VAR] = ",".join([*names, OUR_PREFIX])


def _reset_for_tests() -> None:
    from .patcher import uninstall

    uninstall()
    _state.update(done=False, installed=False, error=None)
