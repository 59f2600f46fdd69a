"""Packaging: import names, the built wheel, fresh installs, and what `lint` imports.

`rules/` and `runtime_guards/` sit at the top of the repository but must install as
`invariant_check.rules` and `invariant_check.runtime_guards` (a `rules` package exists on
PyPI already). pyproject lists packages explicitly, so a new subpackage that is not listed
would silently be missing from the wheel while every editable-install test still passes.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
PACKAGE_DIRS: dict[str, str] = SETUPTOOLS["package-dir"]
# Top-level source folders and the package each installs as.
SOURCE_ROOTS = {"invariant_check": "invariant_check", "rules": "invariant_check.rules",
                "runtime_guards": "invariant_check.runtime_guards"}
HEAVY = ("torch", "triton", "vllm")
# Source read by the analysis, never imported: shipped as package data (the wheel test below
# still requires every one of its files).
DATA_FOLDERS = (ROOT / "invariant_check" / "models",)

FINDING = """\
import torch.nn as nn


class Predictor(nn.Module):
    def set_skip_topk(self, skip):
        self.skip = skip
"""


def _package_folders(src: str) -> dict[str, Path]:
    """Package name -> folder, for every folder under `src` that holds Python code."""
    found = {}
    base = ROOT / src
    for folder in [base, *sorted(p for p in base.rglob("*") if p.is_dir())]:
        rel = folder.relative_to(base).parts
        if "__pycache__" in rel or any(part.startswith(".") for part in rel):
            continue
        if any(folder == d or d in folder.parents for d in DATA_FOLDERS):
            continue
        if not any(folder.glob("*.py")):
            continue
        found[".".join((SOURCE_ROOTS[src], *rel))] = folder
    return found


def _source_files(src: str) -> set[str]:
    """Wheel paths the `.py` files under `src` must have."""
    dest = SOURCE_ROOTS[src].replace(".", "/")
    return {
        f"{dest}/{p.relative_to(ROOT / src).as_posix()}"
        for p in (ROOT / src).rglob("*.py")
        if "__pycache__" not in p.parts
    }


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["NO_COLOR"] = "1"
    return env


def _run(args, cwd, env=None, check=True, timeout=600):
    res = subprocess.run(
        [str(a) for a in args], check=False, cwd=cwd, env=env or _clean_env(),
        capture_output=True, text=True, timeout=timeout,
    )
    if check and res.returncode != 0:
        pytest.fail(f"{args} exited {res.returncode}\n{res.stdout}\n{res.stderr}")
    return res


def _make_tree(root: Path, n_findings: int = 1, n_clean: int = 1) -> Path:
    tree = root / "tree"
    tree.mkdir()
    for i in range(n_findings):
        (tree / f"predictor_{i}.py").write_text(FINDING)
    for i in range(n_clean):
        (tree / f"clean_{i}.py").write_text(f"x = {i}\n")
    return tree


def _parallel_scan_min_files() -> int:
    # Big trees are linted in forked workers: a path of its own.
    from invariant_check.lint import engine

    return engine.PARALLEL_MIN_FILES


def _find_python(version: str) -> str | None:
    """An interpreter of that version that really runs (pyenv shims may exist but refuse)."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"))
    for exe in filter(None, candidates):
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 check=False, capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == version:
            return exe
    return None


# -- (a) every package folder is listed ----------------------------------------------------------

def test_every_package_folder_is_listed_in_pyproject():
    listed = set(SETUPTOOLS["packages"])
    for src in SOURCE_ROOTS:
        for name, folder in _package_folders(src).items():
            assert (folder / "__init__.py").is_file(), (
                f"{folder.relative_to(ROOT)} holds Python files but no __init__.py: "
                "it would be missing from the wheel"
            )
            assert name in listed, f"{name} ({folder.relative_to(ROOT)}) is not in pyproject packages"


def test_pyproject_maps_the_folders_into_the_namespace():
    assert PACKAGE_DIRS.get("invariant_check.rules") == "rules"
    assert PACKAGE_DIRS.get("invariant_check.runtime_guards") == "runtime_guards"
    for name in SETUPTOOLS["packages"]:
        assert name == "invariant_check" or name.startswith("invariant_check."), name
        # setuptools resolves a package through the longest package-dir prefix that names it.
        top = max((k for k in PACKAGE_DIRS if name == k or name.startswith(k + ".")), key=len, default="")
        rest = name[len(top):].lstrip(".").split(".") if top else name.split(".")
        folder = ROOT / PACKAGE_DIRS.get(top, "") / Path(*filter(None, rest))
        assert (folder / "__init__.py").is_file(), f"{name} is listed but {folder} is no package"


# -- (b) the wheel --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wheel(tmp_path_factory, copy_project) -> Path:
    pytest.importorskip("build")  # in the `test` extra, not in `lint-test`
    src = copy_project(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, src], cwd=src)
    wheels = list(out.glob("invariant_check-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.mark.slow
def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        metadata = zf.read(f"{dist_info}/METADATA").decode()

    tops = {n.split("/")[0] for n in names}
    assert tops == {"invariant_check", dist_info}, f"unexpected top-level entries: {tops}"
    for src in SOURCE_ROOTS:
        missing = _source_files(src) - names
        assert not missing, f"missing from the wheel: {sorted(missing)}"
    for sub in ("rules", "runtime_guards", "compaction"):
        assert any(n.startswith(f"invariant_check/{sub}/") and n.endswith(".py") for n in names), sub
    assert "invariant_check/py.typed" in names
    assert not any("/tests/" in n or n.startswith("tests/") for n in names)

    assert "invariant-check = invariant_check.cli.commands:main" in entry_points
    assert "[vllm.general_plugins]" in entry_points
    assert "invariant_check.runtime_guards.plugin:register" in entry_points
    assert "[pytest11]" in entry_points
    assert "invariant_check.runtime_guards.pytest_plugin" in entry_points

    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    core = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("click") for r in core), core
    # The linter parses with the stdlib; libcst verifies fixes (`lint --fix`), imported only then.
    assert any(r.startswith("libcst") for r in core), core
    assert not any(r.split()[0].split(";")[0].startswith(HEAVY) for r in core), (
        f"the linter must install without torch/triton/vllm: {core}"
    )


# -- (c) the wheel in a fresh virtualenv -----------------------------------------------------------

def _fresh_venv(path: Path, python: str) -> Path:
    # A plain venv: nothing from the developer's environment can stand in for the wheel.
    _run([python, "-m", "venv", path], cwd=path.parent)
    return path / "bin"


# The oldest supported Python and the newest one here, besides the one running the tests.
PYTHONS = [pytest.param(sys.executable, id="current")] + [
    pytest.param(v, id=f"py{v}") for v in ("3.10", "3.12") if sys.version_info[:2] != tuple(map(int, v.split(".")))
]


@pytest.mark.slow
@pytest.mark.parametrize("python", PYTHONS)
def test_wheel_installs_and_lints_in_a_fresh_venv(python, wheel, tmp_path):
    if python in ("3.10", "3.12"):
        version, python = python, _find_python(python)
        if python is None:
            pytest.skip(f"no Python {version} interpreter here")
    bindir = _fresh_venv(tmp_path / "venv", python)
    _run([bindir / "python", "-m", "pip", "install", "-q", wheel], cwd=tmp_path)
    work = tmp_path / "outside"  # a cwd outside the repository: nothing importable by accident
    work.mkdir()
    exe = bindir / "invariant-check"

    listed = _run([exe, "rules"], cwd=work)
    assert "IC003" in listed.stdout

    tree = _make_tree(work)
    res = _run([exe, "lint", "--no-cache", tree], cwd=work, check=False)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "IC003" in res.stdout and "predictor_0.py" in res.stdout

    code = textwrap.dedent("""
        import importlib.util, json, sys
        import invariant_check.rules, invariant_check.runtime_guards
        print(json.dumps({
            "rules": invariant_check.rules.__file__,
            "guards": invariant_check.runtime_guards.__file__,
            "top_rules": importlib.util.find_spec("rules") is not None,
            "top_guards": importlib.util.find_spec("runtime_guards") is not None,
            "heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton", "vllm")),
        }))
    """)
    info = json.loads(_run([bindir / "python", "-c", code], cwd=work).stdout)
    site = str(tmp_path / "venv")
    assert info["rules"].startswith(site) and info["rules"].endswith("invariant_check/rules/__init__.py"), info
    assert info["guards"].startswith(site), info
    assert not info["top_rules"] and not info["top_guards"], f"top-level packages installed: {info}"
    assert info["heavy"] == [], info

    failed = _run([bindir / "python", "-c", "import rules"], cwd=work, check=False)
    assert failed.returncode != 0 and "ModuleNotFoundError" in failed.stderr, failed.stderr


# -- (d) editable installs -------------------------------------------------------------------------

def test_current_install_imports_the_namespaced_packages(tmp_path):
    code = textwrap.dedent("""
        import importlib.metadata as md, importlib.util, json
        import invariant_check, invariant_check.rules, invariant_check.runtime_guards
        direct = md.distribution("invariant-check").read_text("direct_url.json") or "{}"
        print(json.dumps({
            "pkg": invariant_check.__file__,
            "rules": invariant_check.rules.__file__,
            "guards": invariant_check.runtime_guards.__file__,
            "editable": json.loads(direct).get("dir_info", {}).get("editable", False),
            "top_rules": importlib.util.find_spec("rules") is not None,
        }))
    """)
    info = json.loads(_run([sys.executable, "-c", code], cwd=tmp_path).stdout)
    if info["editable"] and Path(info["pkg"]).resolve().is_relative_to(ROOT):
        # Editable from this checkout: the mapped folders themselves are imported.
        assert Path(info["rules"]).resolve() == ROOT / "rules" / "__init__.py", info
        assert Path(info["guards"]).resolve() == ROOT / "runtime_guards" / "__init__.py", info
    else:
        pkg = Path(info["pkg"]).parent
        assert Path(info["rules"]).parent == pkg / "rules", info
        assert Path(info["guards"]).parent == pkg / "runtime_guards", info
    assert not info["top_rules"], info


@pytest.mark.slow
def test_fresh_editable_install_maps_the_folders(tmp_path, copy_project):
    src = copy_project(tmp_path / "src")
    bindir = _fresh_venv(tmp_path / "venv", sys.executable)
    _run([bindir / "python", "-m", "pip", "install", "-q", "-e", src], cwd=tmp_path)
    # A module added after installing must be importable at once: that is what editable means
    # for someone writing a new rule.
    (src / "rules" / "zz_added_after_install.py").write_text("ADDED = True\n")
    work = tmp_path / "outside"
    work.mkdir()
    code = textwrap.dedent("""
        import importlib.util, json
        import invariant_check.rules, invariant_check.runtime_guards
        from invariant_check.rules import zz_added_after_install
        print(json.dumps({
            "rules": invariant_check.rules.__file__,
            "guards": invariant_check.runtime_guards.__file__,
            "added": zz_added_after_install.ADDED,
            "top_rules": importlib.util.find_spec("rules") is not None,
            "top_guards": importlib.util.find_spec("runtime_guards") is not None,
        }))
    """)
    info = json.loads(_run([bindir / "python", "-c", code], cwd=work).stdout)
    assert Path(info["rules"]).resolve() == (src / "rules" / "__init__.py").resolve(), info
    assert Path(info["guards"]).resolve() == (src / "runtime_guards" / "__init__.py").resolve(), info
    assert info["added"] is True
    assert not info["top_rules"] and not info["top_guards"], info

    res = _run([bindir / "invariant-check", "lint", "--no-cache", _make_tree(work)], cwd=work, check=False)
    assert res.returncode == 1 and "IC003" in res.stdout, res.stdout + res.stderr


# -- (e) the linter never imports torch, triton or vllm; libcst only with --fix or --diff -----------

# Records every import of a heavy package, in this process and in forked parse workers, then
# runs the real CLI. Blocking instead of recording would turn a stray import into a lint error
# that a rule's broad `except` might swallow.
WRAPPER = textwrap.dedent("""
    import os, sys
    # libcst too: the linter parses with the stdlib; lint without --fix never imports libcst.
    HEAVY = ("torch", "triton", "vllm", "libcst")
    LOG = os.environ["IC_IMPORT_LOG"]

    class Recorder:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                with open(LOG, "a") as fh:
                    fh.write(f"{os.getpid()} {name}\\n")
            return None

    sys.meta_path.insert(0, Recorder())
    from invariant_check.cli.commands import main
    try:
        main(sys.argv[1:], prog_name="invariant-check")
    finally:
        loaded = [m for m in sys.modules if m.split(".")[0] in HEAVY]
        if loaded:
            with open(LOG, "a") as fh:
                fh.write(f"{os.getpid()} in sys.modules: {loaded}\\n")
""")


@pytest.mark.parametrize(
    "args, expected_rc",
    [
        (["lint", "--no-cache", "-j", "2", "{tree}"], 1),
        (["lint", "--no-cache", "-j", "2", "{big_tree}"], 1),
        (["lint", "--no-cache", "-j", "1", "--format", "json", "{tree}"], 1),
        (["lint", "--no-cache", "--format", "sarif", "{tree}"], 1),
        (["lint", "--no-cache", "--format", "github", "{tree}"], 1),
        (["lint", "--cache-dir", "{cache}", "{tree}"], 1),
        (["rules"], 0),
        (["explain", "IC003"], 0),
        (["--version"], 0),
    ],
    ids=["lint-parallel", "lint-parallel-scan", "lint-json", "lint-sarif", "lint-github", "lint-cached", "rules", "explain", "version"],
)
def test_lint_without_fix_never_imports_libcst_torch_triton_or_vllm(args, expected_rc, tmp_path):
    # Eight files to parse: above the engine's threshold for starting worker processes.
    big = "{big_tree}" in args
    tree = _make_tree(tmp_path, n_findings=8, n_clean=_parallel_scan_min_files() if big else 1)
    log = tmp_path / "imports.log"
    env = _clean_env()
    env["IC_IMPORT_LOG"] = str(log)
    argv = [a.format(tree=tree, big_tree=tree, cache=tmp_path / "cache") for a in args]
    if "--cache-dir" in args:
        # Fill the cache first, so that the checked run takes the warm path (no parsing).
        _run([sys.executable, "-m", "invariant_check.cli.commands", *argv], cwd=tmp_path, check=False)
        assert any((tmp_path / "cache").glob("*.json"))
    res = _run([sys.executable, "-c", WRAPPER, *argv], cwd=tmp_path, env=env, check=False)
    assert res.returncode == expected_rc, res.stdout + res.stderr
    if args[0] == "lint":
        assert "IC003" in res.stdout, res.stdout
    imported = log.read_text() if log.exists() else ""
    assert imported == "", f"`invariant-check {' '.join(args)}` imported heavy packages:\n{imported}"


def test_fix_imports_libcst_and_still_not_torch_triton_or_vllm(tmp_path):
    """`--fix` verifies its edits with libcst (a dependency now); the runtime stack stays out."""
    tree = _make_tree(tmp_path, n_findings=2, n_clean=1)
    log = tmp_path / "imports.log"
    env = _clean_env()
    env["IC_IMPORT_LOG"] = str(log)
    res = _run([sys.executable, "-c", WRAPPER, "lint", "--no-cache", "--fix", "--unsafe-fixes", str(tree)],
               cwd=tmp_path, env=env, check=False)
    assert res.returncode == 0, res.stdout + res.stderr  # both findings fixed
    imported = {line.split(" ", 1)[1].split(".")[0] for line in log.read_text().splitlines() if " in sys.modules" not in line}
    assert imported == {"libcst"}, log.read_text()
    assert "def compact_topk_indices" in (tree / "predictor_0.py").read_text()


COLLECT_OUTCOMES = """
import json, os

OUTCOMES = {}


def pytest_collectreport(report):
    if report.nodeid.endswith(".py"):
        OUTCOMES[report.nodeid] = report.outcome


def pytest_sessionfinish(session):
    with open(os.environ["IC_COLLECT_LOG"], "w") as fh:
        json.dump(OUTCOMES, fh)
"""


# -- (f) the linter's own tests need only the lint-test extra ---------------------------------------

@pytest.mark.slow
def test_lint_test_extra_alone_collects_every_test_module(tmp_path, copy_project):
    """`pip install .[lint-test]` (no torch, triton, vLLM, pre-commit or build) and `pytest`:
    collection must finish without errors, modules that need the runtime stack are skipped with
    the reason, and the linter's own tests are collected and pass."""
    src = copy_project(tmp_path / "src")
    bindir = _fresh_venv(tmp_path / "venv", sys.executable)
    _run([bindir / "python", "-m", "pip", "install", "-q", f"{src}[lint-test]"], cwd=tmp_path)
    absent = _run([bindir / "python", "-c", "import importlib.util as u, json; print(json.dumps("
                   "[m for m in ('torch', 'triton', 'vllm', 'pre_commit', 'build') if u.find_spec(m)]))"],
                  cwd=tmp_path)
    assert json.loads(absent.stdout) == [], "the lint-test extra must not bring the runtime stack"

    # Each test module's collection outcome, as pytest itself reports it (a module skipped by an
    # importorskip in another module it imports is reported under that module's line).
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "collect_outcomes.py").write_text(COLLECT_OUTCOMES)
    env = _clean_env()
    env.update(PYTHONPATH=str(plugin_dir), IC_COLLECT_LOG=str(tmp_path / "outcomes.json"))
    # The `pytest` script, not `python -m pytest`: the latter puts the checkout's source folder
    # first on sys.path, where it shadows the installed package.
    res = _run([bindir / "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "collect_outcomes"],
               cwd=src, env=env, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "ERROR" not in out and "Traceback" not in out, out[-4000:]
    outcomes = json.loads((tmp_path / "outcomes.json").read_text())
    modules = {m.relative_to(src).as_posix() for m in src.glob("tests/**/test_*.py")}
    assert set(outcomes) == modules, f"not collected at all: {sorted(modules - set(outcomes))}"
    assert [m for m, o in outcomes.items() if o == "failed"] == [], out[-4000:]
    for needs_torch in ("tests/compaction/test_compaction_interpreter.py", "tests/guards/test_guard_v2_speculator.py"):
        assert outcomes[needs_torch] == "skipped", outcomes
    for lint_module in ("test_rule_examples.py", "test_mutations.py", "test_config.py", "test_rule_docs.py"):
        assert outcomes[f"tests/{lint_module}"] == "passed", outcomes
    assert re.search(r"could not import 'torch'", out), out[-3000:]

    ran = _run([bindir / "pytest", "-q", "-p", "no:cacheprovider", "tests/test_rule_examples.py"], cwd=src, check=False)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    assert re.search(r"\d+ passed", ran.stdout), ran.stdout[-2000:]
