"""Where modules outside the project come from, as mypy and pyright find them.

An absolute import is looked up in this order, and the first place that has it answers:

1. the project: the source root of the importing module, the project root, its `src` folder;
2. `extra-paths` from the configuration;
3. the Python environment: the import path of the interpreter (the one running invariant-check,
   or `--python` / `python = "..."`), without its standard library: site-packages, folders
   added by `.pth` files, and packages installed in editable mode through an import hook
   (setuptools' `__editable___*_finder.py` mappings);
4. the bundled models: upstream classes the rules rely on, generated from real releases by
   `scripts/gen_models.py` (see `invariant_check/models/README.md`).

Nothing is imported: outside modules are read as source, lazily, as far as a question needs,
and their facts are cached by content like the project's own. The standard library is left
out on purpose: rules recognise `copy.copy` or `dataclasses.replace` by their names.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

MODELS = Path(__file__).resolve().parent.parent / "models"
MANIFEST = "MANIFEST.json"

# what the interpreter named by --python is asked (it may be another Python version)
_QUERY = (
    "import json, sys, sysconfig\n"
    "p = sysconfig.get_paths()\n"
    "print(json.dumps({'path': sys.path, 'stdlib': [p.get('stdlib'), p.get('platstdlib')],"
    " 'version': '%d.%d.%d' % sys.version_info[:3], 'executable': sys.executable}))\n"
)


class UnusableEnvironment(Exception):
    """The environment cannot be used; the message is one line naming the interpreter."""


@dataclass(frozen=True)
class Environment:
    """The places outside the project that imports are looked up in (points 2-4 above)."""

    extra: tuple[Path, ...] = ()
    paths: tuple[Path, ...] = ()
    # editable installs: dotted package name -> its folder (longest name first)
    editable: tuple[tuple[str, Path], ...] = ()
    models: Path | None = MODELS
    python: str | None = None  # the interpreter described; None: none (models only)
    version: str | None = None  # its Python version
    _models_info: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def models_only(cls) -> Environment:
        """No interpreter: the project and the bundled models (tests, library callers)."""
        return cls()

    @classmethod
    def of(cls, python: str | None = None, extra_paths: tuple[Path, ...] | list[Path] = (), models: bool = True) -> Environment:
        """The environment of `python` (None: the interpreter running this), with `extra_paths`
        first. Raises `UnusableEnvironment` when `python` cannot be asked."""
        if python is None:
            raw, stdlib = list(sys.path), [sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")]
            executable, version = sys.executable, "%d.%d.%d" % sys.version_info[:3]
        else:
            info = _ask(python)
            raw, stdlib, executable, version = info["path"], info["stdlib"], info["executable"], info["version"]
        paths = _import_path(raw, [s for s in stdlib if s])
        editable = _editable_mappings(paths)
        return cls(
            tuple(Path(os.path.abspath(p)) for p in extra_paths),
            paths,
            editable,
            MODELS if models else None,
            executable or python,
            version,
        )

    # -- questions ----------------------------------------------------------------------------
    def candidates(self, name: str) -> list[tuple[str, Path]]:
        """(origin, file) where the module `name` may be, in lookup order after the project."""
        rel = Path(*name.split("."))
        out: list[tuple[str, Path]] = []
        for root in self.extra:
            out += [("extra", root / rel.with_suffix(".py")), ("extra", root / rel / "__init__.py")]
        for pkg, folder in self.editable:
            if name == pkg or name.startswith(pkg + "."):
                sub = name[len(pkg) + 1 :]
                base = folder / Path(*sub.split(".")) if sub else folder
                if sub:
                    out.append(("environment", base.with_suffix(".py")))
                out.append(("environment", base / "__init__.py"))
        for root in self.paths:
            out += [("environment", root / rel.with_suffix(".py")), ("environment", root / rel / "__init__.py")]
        if self.models is not None:
            out += [("bundled", self.models / rel.with_suffix(".py")), ("bundled", self.models / rel / "__init__.py")]
        return out

    def origin(self, path: Path) -> str | None:
        """Which outside place a file belongs to; None when it is in none of them."""
        raw = str(path)

        def under(folder: Path) -> bool:
            return raw.startswith(str(folder) + os.sep)

        if self.models is not None and under(self.models):
            return "bundled"
        if any(under(r) for r in self.extra):
            return "extra"
        if any(under(r) for r in self.paths) or any(under(f) for _, f in self.editable):
            return "environment"
        return None

    def describe(self, origin: str, path: Path | None, name: str | None = None) -> str:
        """How `-v` names the source that answered for a module."""
        if origin == "bundled" and path is not None:
            rel = path.relative_to(self.models).as_posix() if self.models else str(path)
            tag = self.models_info().get("modules", {}).get(rel, {}).get("from")
            package = rel.split("/", 1)[0]
            return f"bundled model ({package} {tag})" if tag else "bundled model"
        if origin == "environment":
            return f"environment ({path})"
        if origin == "extra":
            return f"extra-paths ({path})"
        if name is not None and name.split(".")[0] in getattr(sys, "stdlib_module_names", ()):
            return "standard library (known by name, not read)"
        return "not found (project, extra-paths, environment and bundled models)"

    def models_info(self) -> dict:
        if not self._models_info and self.models is not None:
            try:
                self._models_info.update(json.loads((self.models / MANIFEST).read_text("utf-8")))
            except (OSError, ValueError):
                pass
        return self._models_info

    def fingerprint(self) -> dict:
        """What a cached result depends on besides the files it read (part of the cache key)."""
        return {
            "extra": [str(p) for p in self.extra],
            "paths": [str(p) for p in self.paths],
            "editable": [[n, str(p)] for n, p in self.editable],
            "models": self.models_info().get("generated") if self.models is not None else None,
        }


def _ask(python: str) -> dict:
    exe = os.path.expanduser(python)
    try:
        done = subprocess.run(
            [exe, "-c", _QUERY], capture_output=True, text=True, timeout=60, cwd=os.path.expanduser("~") if os.path.isdir(os.path.expanduser("~")) else None,
        )
    except FileNotFoundError:
        raise UnusableEnvironment("no such interpreter") from None
    except PermissionError:
        raise UnusableEnvironment("not executable") from None
    except OSError as exc:
        raise UnusableEnvironment(f"cannot run it: {exc.strerror or exc}") from None
    except subprocess.TimeoutExpired:
        raise UnusableEnvironment("it did not answer within 60 s") from None
    if done.returncode != 0:
        raise UnusableEnvironment(f"not a working Python interpreter ({_why(done.stderr, done.returncode)})")
    try:
        info = json.loads(done.stdout.strip().splitlines()[-1])
        assert isinstance(info.get("path"), list)
    except (ValueError, IndexError, AssertionError, AttributeError):
        raise UnusableEnvironment("unexpected answer to the import-path query") from None
    version = str(info.get("version") or "")
    if not version[:1].isdigit() or int(version.split(".")[0]) < 3:
        raise UnusableEnvironment(f"Python {version or '(unknown version)'}: imports are read from a Python 3 environment only")
    return info


def _why(stderr: str, status: int) -> str:
    """What a failed run said, in one line: a traceback's last line (the exception), else the
    first line (`pyenv: python2: command not found`, a shell's `No such file`), whitespace
    collapsed; with the exit status."""
    lines = [" ".join(l.split()) for l in stderr.splitlines() if l.strip()]
    said = (lines[-1] if any(l.startswith("Traceback") for l in lines) else lines[0]) if lines else ""
    said = said if len(said) <= 200 else said[:197] + "..."
    return f"exit status {status}: {said}" if said else f"exit status {status}"


def _import_path(raw: list[str], stdlib: list[str]) -> tuple[Path, ...]:
    """The folders of an import path that hold installed code: no standard library, no zip
    files, no current folder (`''`), each once."""
    std = [os.path.abspath(s) for s in stdlib]
    out: list[Path] = []
    seen: set[str] = set()
    for entry in raw:
        if not entry:
            continue
        full = os.path.abspath(entry)
        parts = Path(full).parts
        installed = "site-packages" in parts or "dist-packages" in parts
        if not installed and any(full == s or full.startswith(s + os.sep) for s in std):
            continue
        if full in seen or not os.path.isdir(full):
            continue
        seen.add(full)
        out.append(Path(full))
    return tuple(out)


def _editable_mappings(paths: tuple[Path, ...]) -> tuple[tuple[str, Path], ...]:
    """Packages installed in editable mode through an import hook: setuptools writes
    `__editable___<dist>_finder.py` with `MAPPING = {"pkg": "/checkout/pkg", ...}` into
    site-packages; the folders it names are nowhere on the import path."""
    found: dict[str, Path] = {}
    for folder in paths:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if not (name.startswith("__editable__") and name.endswith("_finder.py")):
                continue
            try:
                tree = ast.parse((folder / name).read_text("utf-8"))
            except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
                continue
            for node in tree.body:
                target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
                if isinstance(target, ast.Name) and target.id == "MAPPING" and node.value is not None:
                    try:
                        mapping = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    if isinstance(mapping, dict):
                        for pkg, where in mapping.items():
                            if isinstance(pkg, str) and isinstance(where, str) and os.path.isdir(where):
                                found.setdefault(pkg, Path(os.path.abspath(where)))
    return tuple(sorted(found.items(), key=lambda kv: (-kv[0].count("."), kv[0])))
