"""SGLang's batch and spec-info classes in the bundled models (invariant_check/models/sglang/):
made from its released wheel by the same generator as vLLM's, answered where neither the project
nor the environment has SGLang, and read by the rules like vLLM's classes.

The wheel: `scripts/gen_models.py` takes `--sglang-wheel`, else the corpus, else its wheel cache,
else `pip download` into that cache; without one it keeps the SGLang part as checked in and says
so in one line. The pip path runs the real pip against a local folder of wheels (no network).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest
from ic_support import assert_no_traceback, clean_env, run_cli

from invariant_check.analysis.environment import MODELS, Environment
from invariant_check.analysis.project import Project

ROOT = Path(__file__).resolve().parents[1]


def _gen_models():
    spec = importlib.util.spec_from_file_location("gen_models_sglang", ROOT / "scripts" / "gen_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


# -- the checked-in models ---------------------------------------------------------------------------


def _class(project: Project, module: str, name: str):
    mod = project.find_module(module)
    assert mod is not None and mod.origin == "bundled", module
    info = project.class_of(project.resolve(mod, name))
    assert info is not None, name
    return info


def test_the_batch_classes_are_answered_whole_from_the_bundled_models(tmp_path):
    project = Project(tmp_path, environment=Environment.models_only())
    fb = _class(project, "sglang.srt.model_executor.forward_batch_info", "ForwardBatch")
    assert {"seq_lens", "seq_lens_cpu", "seq_lens_sum", "positions", "out_cache_loc", "spec_info"} <= fb.fields()
    # whole: its methods are code the analysis follows, not stubs
    assert fb.method("prepare_mlp_sync_batch") is not None  # None for a stub
    sb = _class(project, "sglang.srt.managers.schedule_batch", "ScheduleBatch")
    assert {"seq_lens", "seq_lens_cpu", "seq_lens_sum", "out_cache_loc", "spec_info"} <= sb.fields()


def test_the_spec_info_classes_are_whole_with_their_properties(tmp_path):
    project = Project(tmp_path, environment=Environment.models_only())
    verify = _class(project, "sglang.srt.speculative.eagle_info", "EagleVerifyInput")
    assert {"positions", "seq_lens_sum", "seq_lens_cpu", "draft_token", "custom_mask"} <= verify.fields()
    # a property is kept with its body (what derivations read)
    assert verify.method("max_tree_depth") is not None
    draft = _class(project, "sglang.srt.speculative.eagle_info", "EagleDraftInput")
    assert {"topk_p", "topk_index", "hidden_states", "kv_indptr", "kv_indices"} <= draft.fields()
    assert draft.method("filter_batch") is not None
    # both are `SpecInput`s, resolved through the model of the spec-info base
    for info in (verify, draft):
        assert [c.qual for c in info.classes()][1:] == ["SpecInput"]


def test_the_manifest_and_readme_name_the_wheel_release():
    manifest = json.loads((MODELS / "MANIFEST.json").read_text())
    assert manifest["engines"]["sglang"] == {"label": "SGLang", "releases": ["0.5.23"]}
    assert manifest["modules"]["sglang/srt/model_executor/forward_batch_info.py"] == {"from": "0.5.23", "releases": ["0.5.23"]}
    assert "and SGLang 0.5.23" in (MODELS / "README.md").read_text()
    listed = (MODELS / "MODULES.txt").read_text().splitlines()
    # every module of the wheel, those without a model too (a model class no rule needs)
    assert "sglang.srt.models.llama" in listed and not (MODELS / "sglang/srt/models/llama.py").exists()


# -- the linter on an SGLang-style project, in an environment without SGLang -------------------------


STEP = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def step(fb: ForwardBatch):
    fb.seq_lens += 1
"""

FIXED = """
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def step(fb: ForwardBatch):
    fb.seq_lens += 1
    if fb.seq_lens_cpu is not None:
        fb.seq_lens_cpu += 1
"""


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> str:
    where = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(where, with_pip=False, symlinks=True)
    return str(where / "bin" / "python")


def _lint(root: Path, python: str, *extra: str):
    run = run_cli("lint", "--no-cache", "-v", "--python", python, "--format", "json", *extra, ".", cwd=root)
    assert_no_traceback(run)
    assert run.code in (0, 1), run.err
    outside = {}
    for line in run.err.splitlines():
        if line.startswith("  "):
            name, _, how = line.strip().partition("  ")
            outside[name] = how.strip()
    return json.loads(run.out)["findings"], outside


def test_ic004_reads_forward_batch_from_the_sglang_model(tmp_path, bare):
    """What derives from `seq_lens` in SGLang is learned from its wheel (the CPU shadow, the
    sum, the slots of the new tokens, ...: `scripts/gen_derivations.py`) and `ForwardBatch`
    holds those fields: the finding names them, with no configuration (a class the linter
    cannot find gets no finding at all: see the next test)."""
    root = _write(tmp_path / "plugin", {"drafter/__init__.py": "", "drafter/step.py": STEP})
    findings, outside = _lint(root, bare)
    assert [(f["rule"], f["line"]) for f in findings] == [("IC004", 5)]
    stale = findings[0]["data"]["stale_fields"]
    # (SGLang's host copy is its own `seq_lens_cpu` field, not vLLM's cached `_seq_lens_cpu`)
    assert {"seq_lens_cpu", "seq_lens_sum", "out_cache_loc"} <= set(stale), stale
    evidence = findings[0]["data"]["derivations"]
    assert evidence["seq_lens_sum"]["where"].startswith("sglang 0.5.23 sglang/")
    assert outside["sglang.srt.model_executor.forward_batch_info"] == "bundled model (sglang 0.5.23)"


def test_without_the_model_the_same_step_is_not_reported(tmp_path, bare):
    root = _write(tmp_path / "plugin", {"drafter/__init__.py": "", "drafter/step.py": STEP.replace("sglang.srt", "not_sglang.srt")})
    findings, outside = _lint(root, bare)
    assert findings == []
    assert outside["not_sglang.srt.model_executor.forward_batch_info"].startswith("not found")


def test_the_fixed_step_is_clean_and_sglang_names_join_through_the_table(tmp_path, bare):
    # every field learned as derived from `seq_lens` brought along: clean
    fixed = FIXED + "".join(
        f"    fb.{name} = None\n" for name in ("seq_lens_sum", "out_cache_loc", "orig_seq_lens", "extend_prefix_lens")
    )
    root = _write(tmp_path / "plugin", {"drafter/__init__.py": "", "drafter/step.py": fixed})
    findings, _ = _lint(root, bare)
    assert findings == []
    # a field nothing shows derived is named through the table, and read from the model
    (root / "pyproject.toml").write_text(
        '[tool.invariant-check.options.IC004]\n'
        'derived-fields = { seq_lens = ["seq_lens_cpu", "max_seq_len", "input_ids"] }\n'
    )
    findings, _ = _lint(root, bare)
    assert [(f["line"], f["data"]["stale_fields"]) for f in findings] == [(5, ["input_ids"])]


# -- the generator on a small SGLang-shaped release of our own ----------------------------------------


RELEASE = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/model_executor/forward_batch_info.py": '''
        from dataclasses import dataclass

        @dataclass
        class Batch:
            """A batch: `seq_lens` with the batch fields, none of them in IC004's table."""
            seq_lens: object
            seq_lens_sum: int
            out_cache_loc: object = None

            @property
            def total(self):
                return self.seq_lens_sum

            def grow(self, n):
                self.seq_lens += n
                self.seq_lens_sum += n * len(self.seq_lens)

        class Runner:
            def forward(self, batch: Batch):
                return run(batch)
    ''',
    "sglang/srt/speculative/__init__.py": "",
    "sglang/srt/speculative/spec_info.py": '''
        class SpecInput:
            def __init__(self, kind):
                self.kind = kind

            def filter_batch(self, idx):
                return pick(self, idx)
    ''',
    "sglang/srt/speculative/eagle_info.py": '''
        from sglang.srt.speculative.spec_info import SpecInput

        class DraftInput(SpecInput):
            hidden: object = None

            def merge(self, other):
                self.hidden = cat(self.hidden, other.hidden)
    ''',
    "sglang/srt/models/__init__.py": "",
    "sglang/srt/models/llama.py": '''
        from sglang.srt.model_executor.forward_batch_info import Batch

        class Llama:
            def forward(self, ids, batch: Batch):
                return self.layers(ids, batch)

        class Indexer:
            def __init__(self):
                self.topk_indices_buffer = make()
    ''',
}



def test_the_generator_models_an_sglang_release(tmp_path):
    gen = _gen_models()
    release = _write(tmp_path / "sglang-9.9.9", RELEASE)
    out = tmp_path / "models"
    manifest = gen.generate({"sglang": [release]}, out)
    assert manifest["engines"] == {"sglang": {"label": "SGLang", "releases": ["9.9.9"]}}
    batch = (out / "sglang/srt/model_executor/forward_batch_info.py").read_text()
    assert batch.startswith("# Generated by scripts/gen_models.py from SGLang 9.9.9 (this module is in SGLang 9.9.9).")
    # the batch class whole (its fields are not in the table: the engine's batch fields chose it)
    assert "def total(self):\n        return self.seq_lens_sum" in batch
    assert "self.seq_lens_sum += n * len(self.seq_lens)" in batch and "A batch" not in batch
    # a user of the batch in scope: stubbed; the spec-info family whole
    assert re.search(r"def forward\(self, batch: Batch\):\n        \.\.\.", batch)
    eagle = (out / "sglang/srt/speculative/eagle_info.py").read_text()
    assert "self.hidden = cat(self.hidden, other.hidden)" in eagle
    assert "return pick(self, idx)" in (out / "sglang/srt/speculative/spec_info.py").read_text()
    # out of scope: the model class that takes a batch is not modelled, the top-k holder is
    llama = (out / "sglang/srt/models/llama.py").read_text()
    assert "class Indexer" in llama and "self.topk_indices_buffer = make()" in llama and "class Llama" not in llama
    listed = (out / "MODULES.txt").read_text().splitlines()
    assert "sglang.srt.models.llama" in listed and "sglang.srt.speculative.eagle_info" in listed
    assert (out / "sglang/__init__.py").read_text() == "# Generated by scripts/gen_models.py: a package of the sglang models.\n"


def test_a_wheel_is_read_like_the_unpacked_release(tmp_path):
    gen = _gen_models()
    release = _write(tmp_path / "sglang-9.9.9", RELEASE)
    wheel = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        for path in sorted(release.rglob("*.py")):
            whl.write(path, path.relative_to(release).as_posix())
        whl.writestr("sglang-9.9.9.dist-info/METADATA", "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n")
    assert gen.read_release(wheel, "sglang") == gen.read_release(release, "sglang")


def test_a_part_kept_as_checked_in_regenerates_the_same_folder(tmp_path):
    """Without the wheel the SGLang part is taken from the models folder: the folder written
    from it and a fresh vLLM part is the one a full generation writes."""
    gen = _gen_models()
    sglang = _write(tmp_path / "sglang-9.9.9", RELEASE)
    vllm = _write(tmp_path / "vllm-9.9.9", {
        "vllm/__init__.py": "",
        "vllm/meta.py": "class Meta:\n    seq_lens: object\n    max_seq_len: int\n",
    })
    full = tmp_path / "full"
    gen.generate({"vllm": [vllm], "sglang": [sglang]}, full)
    kept = gen.kept_engine(gen.SGLANG, full, "no wheel")
    again = tmp_path / "again"
    gen.generate({"vllm": [vllm], "sglang": kept}, again)
    assert gen._differences(full, again) == []
    assert "and SGLang 9.9.9" in (again / "README.md").read_text()


# -- where the wheel comes from -------------------------------------------------------------------


def _fake_wheel(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("sglang/__init__.py", "")
        whl.writestr(f"sglang-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
        whl.writestr(f"sglang-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"sglang-{version}.dist-info/RECORD", "")
    return wheel


def test_the_wheel_is_found_in_the_cache_and_else_not_without_downloads(tmp_path, monkeypatch):
    gen = _gen_models()
    monkeypatch.setattr(gen, "CORPUS", tmp_path / "no-corpus")
    cache = tmp_path / "cache"
    wheel, why = gen.find_sglang_wheel("9.9.9", cache, download=False)
    assert wheel is None and "downloads are off" in why and "\n" not in why
    made = _fake_wheel(cache, "9.9.9")
    assert gen.find_sglang_wheel("9.9.9", cache, download=False) == (made, "")


def test_pip_download_fills_the_cache_once(tmp_path, monkeypatch):
    """The real pip, from a local folder of wheels instead of the index."""
    gen = _gen_models()
    monkeypatch.setattr(gen, "CORPUS", tmp_path / "no-corpus")
    index = tmp_path / "index"
    _fake_wheel(index, "9.9.9")
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    cache = tmp_path / "cache"
    wheel, why = gen.find_sglang_wheel("9.9.9", cache)
    assert why == "" and wheel == cache / "sglang-9.9.9-py3-none-any.whl" and wheel.is_file()
    assert [p.name for p in cache.iterdir()] == [wheel.name]  # no leftover download folder
    # a release the index lacks: why, in one line, and nothing in the cache
    missing, why = gen.find_sglang_wheel("9.9.8", cache)
    assert missing is None and why.startswith("pip download sglang==9.9.8 failed") and "\n" not in why
    assert [p.name for p in cache.iterdir()] == [wheel.name]


def test_check_without_the_wheel_checks_the_rest_and_says_so(tmp_path, monkeypatch, capsys):
    """`--check` where no wheel can be had: a one-line note, the SGLang part taken as checked
    in, the vLLM part still compared (a stale vLLM part fails)."""
    gen = _gen_models()
    vllm = _write(tmp_path / "vllm-9.9.9", {
        "vllm/__init__.py": "",
        "vllm/meta.py": "class Meta:\n    seq_lens: object\n    max_seq_len: int\n",
    })
    models = tmp_path / "models"
    gen.generate({"vllm": [vllm], "sglang": [_write(tmp_path / "sglang-9.9.9", RELEASE)]}, models)
    monkeypatch.setattr(gen, "OUT", models)
    monkeypatch.setattr(gen, "CORPUS", tmp_path / "no-corpus")
    args = ["--check", "--source", str(vllm), "--no-download", "--wheel-cache", str(tmp_path / "cache")]
    assert gen.main(args) == 0
    err = capsys.readouterr().err
    [note] = [l for l in err.splitlines() if "NOTE" in l]
    assert "SGLang models" in note and "not checked" in note and "downloads are off" in note
    (vllm / "vllm/meta.py").write_text("class Meta:\n    seq_lens: object\n    max_seq_len: int\n    x: int\n")
    assert gen.main(args) == 1
    assert "vllm/meta.py" in capsys.readouterr().err
    # generating without the wheel keeps the SGLang part as it was
    assert gen.main(["--source", str(vllm), "--no-download", "--wheel-cache", str(tmp_path / "cache")]) == 0
    assert "def total(self):" in (models / "sglang/srt/model_executor/forward_batch_info.py").read_text()
    assert json.loads((models / "MANIFEST.json").read_text())["engines"]["sglang"]["releases"] == ["9.9.9"]


def test_a_missing_wheel_path_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_models.py"), "--source", str(tmp_path), "--sglang-wheel", str(tmp_path / "nope.whl")],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 2 and run.stderr.strip().count("\n") == 0 and "nope.whl: no such file" in run.stderr
