"""Shared markers for the guard tests (a module of its own: `from conftest import` would pick up
whichever conftest pytest imported first)."""

from __future__ import annotations

import importlib.util

import pytest


def _vllm_available() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None and importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


requires_vllm = pytest.mark.skipif(not _vllm_available(), reason="needs torch and the vLLM CPU build")
