"""Missing extras: a feature whose extra is not installed names the extra to install."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from agent.errors import UserFacingError
from agent.extras import MissingExtra, check_extra, needs_extra

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "tools", "graphs", "interventions", "scenarios")
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]


def guarded_imports() -> list[tuple[str, str, Path]]:
    """(extra, top-level module, file) for every import inside `with needs_extra("extra", …)`."""
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.With):
                    continue
                call = node.items[0].context_expr
                if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "needs_extra"):
                    continue
                name = call.args[0]
                where = f"{path}:{node.lineno}: needs_extra takes the extra's name as a literal"
                assert isinstance(name, ast.Constant) and isinstance(name.value, str), where
                extra = name.value
                for stmt in node.body:
                    if isinstance(stmt, ast.Import):
                        out += [(extra, a.name.split(".")[0], path) for a in stmt.names]
                    elif isinstance(stmt, ast.ImportFrom) and stmt.module:
                        out.append((extra, stmt.module.split(".")[0], path))
    return out


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0]).lower()


def extra_closure(extra: str) -> set[str]:
    """Distributions an extra installs, with their own dependencies (as installed here)."""
    todo = [_name(r) for r in EXTRAS[extra]]
    seen: set[str] = set()
    while todo:
        dist = todo.pop()
        if dist in seen:
            continue
        seen.add(dist)
        if dist == "rein-runtime":
            continue
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


@pytest.mark.core
def test_a_missing_third_party_module_names_the_extra() -> None:
    with pytest.raises(MissingExtra) as info, needs_extra("graphs", "QuadGraph retrieval"):
        import rein_test_no_such_module  # noqa: F401
    err = info.value
    assert (err.extra, err.module, err.name) == ("graphs", "rein_test_no_such_module", "rein_test_no_such_module")
    assert str(err) == (
        "QuadGraph retrieval needs the graphs extra (no module 'rein_test_no_such_module'): "
        "pip install 'rein-runtime[graphs]'"
    )
    # The CLI prints UserFacingErrors; `except ImportError` fallbacks still catch it.
    assert isinstance(err, UserFacingError) and isinstance(err, ImportError)


@pytest.mark.core
def test_a_missing_module_of_ours_is_not_an_extra() -> None:
    with pytest.raises(ModuleNotFoundError) as info, needs_extra("graphs", "QuadGraph retrieval"):
        import agent.no_such_module  # noqa: F401
    assert not isinstance(info.value, MissingExtra)


@pytest.mark.core
def test_check_extra_finds_without_importing_and_sees_blocked_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    check_extra("local", "x", "json")
    with pytest.raises(MissingExtra, match=r"needs the local extra \(no module 'rein_test_absent'\)"):
        check_extra("local", "the embedded model", "json", "rein_test_absent")
    monkeypatch.setitem(sys.modules, "csv", None)
    with pytest.raises(MissingExtra, match="'csv'"):
        check_extra("local", "x", "csv")


@pytest.mark.core
def test_every_extra_named_in_the_code_is_declared_and_all_holds_them() -> None:
    named = {extra for extra, _, _ in guarded_imports()}
    assert named >= {"local", "graphs", "jigsaw", "server"}
    assert named <= set(EXTRAS), f"undeclared extras: {named - set(EXTRAS)}"
    (all_,) = EXTRAS["all"]
    listed = re.fullmatch(r"rein-runtime\[(.*)\]", all_)
    assert listed, all_
    in_all = set(listed.group(1).split(","))
    assert in_all == set(EXTRAS) - {"all", "dev", "qwen-1.5b"}


def test_each_guarded_import_comes_with_the_extra_it_names() -> None:
    # Needs the extras installed (the full suite's venv) to map modules to distributions.
    owners = metadata.packages_distributions()
    checked = 0
    for extra, module, path in guarded_imports():
        if module in PACKAGES:  # ours, imported under the guard for what it imports
            continue
        dists = {_name(d) for d in owners.get(module, [])}
        if not dists:
            pytest.skip(f"{module} is not installed here")
        assert dists & extra_closure(extra), f"{path.relative_to(ROOT)}: {module} ({dists}) is not in the {extra} extra"
        checked += 1
    assert checked > 20


def _rein(argv: list[str], blocked: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from agent.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    env = {**os.environ, "REIN_HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.core
def test_rein_serve_without_the_server_extra_says_which_to_install(tmp_path: Path) -> None:
    done = _rein(["serve", "--port", "0"], ["uvicorn", "fastapi", "starlette"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "rein serve: error: `rein serve` needs the server extra (no module 'uvicorn'): pip install 'rein-runtime[server]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.core
def test_rein_demo_without_the_local_extra_says_which_to_install(tmp_path: Path) -> None:
    done = _rein(["demo"], ["llama_cpp"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "the embedded model needs the local extra (no module 'llama_cpp'): pip install 'rein-runtime[local]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "rein-results").exists()  # stopped before any run started
