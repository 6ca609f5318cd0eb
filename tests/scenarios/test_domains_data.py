"""Bundled domain data: identical to the tau2 copies, canonical, licensed; tool schemas equal tools.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scenarios.canonical import canonical_hash
from scenarios.domains import DOMAINS, load_domain, mock_toolkit
from scenarios.domains.data import DATA_DIR, bundled_snapshot, domain_policy, read_json
from scenarios.domains.environment import Side
from tools.registry import load_toolkit
from tools.tool import ToolKind

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

TAU2 = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "tau2").resolve()


def _shared(domain: str) -> Path:
    folder = TAU2 / domain
    if not folder.is_dir():
        pytest.skip(f"shared tau2 data not found at {folder}")
    return folder


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_bundled_files_equal_the_tau2_copies(domain: str) -> None:
    shared = _shared(domain)
    for name in ("tasks.json", "policy.md", "split_tasks.json", "tools.json"):
        assert (DATA_DIR / domain / name).read_bytes() == (shared / name).read_bytes(), name
    for which in ("db", "user_db"):
        if (shared / f"{which}.json").exists():
            assert read_json(DATA_DIR / domain / f"{which}.json") == json.loads(
                (shared / f"{which}.json").read_text()
            )
    assert domain_policy(domain) == (shared / "policy.md").read_text()


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_bundled_db_is_canonical_under_the_record_models(domain: str) -> None:
    cls = DOMAINS[domain]
    snapshot = bundled_snapshot(domain)
    assert snapshot is not None
    assert cls.db_model.model_validate(snapshot.data).model_dump(mode="json") == snapshot.data
    assert snapshot.canonical_hash() == canonical_hash(snapshot.data)
    if cls.user_db_model is not None:
        user = bundled_snapshot(domain, "user_db")
        assert user is not None
        assert cls.user_db_model.model_validate(user.data).model_dump(mode="json") == user.data


def test_licence_and_notice_are_shipped() -> None:
    licence = (DATA_DIR / "LICENSE").read_text()
    assert licence.count("\nMIT License\n") == 2
    assert (
        "Copyright (c) 2025 Sierra Research" in licence and "Copyright (c) 2024 Sierra" in licence
    )
    assert "a2c024725189473d2d7cea3a5cfdbcc67478e41f" in (DATA_DIR / "NOTICE.md").read_text()


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_toolkit_schemas_and_kinds_equal_tools_json(domain: str) -> None:
    spec = json.loads((DATA_DIR / domain / "tools.json").read_text())
    env = load_domain(domain)
    for side, toolkit in (("agent_tools", env.agent_toolkit()), ("user_tools", env.user_toolkit())):
        assert toolkit.schemas() == [t["openai_schema"] for t in spec[side]]
        assert [t.kind for t in toolkit] == [ToolKind(t["tool_type"]) for t in spec[side]]
        assert [t.kind is ToolKind.WRITE for t in toolkit] == [
            t["mutates_state"] for t in spec[side]
        ]
    # Every method marked as a tool is listed in tools.json, and nothing more.
    sides: tuple[tuple[Side, str], ...] = (("assistant", "agent_tools"), ("user", "user_tools"))
    for side, key in sides:
        marked = set(type(env)._members.get(("tool", side), {}))
        assert marked == {t["name"] for t in spec[key]}
    functions = {(f["env_type"], f["func_name"]) for f in spec["env_functions_not_tools"]}
    marked_functions = {
        (side, name)
        for (role, side), names in type(env)._members.items()
        if role == "function"
        for name in names
    }
    assert marked_functions == functions


def test_registry_factories_give_fresh_environments() -> None:
    first, second = load_toolkit("mock"), mock_toolkit()
    first["create_task"].fn(user_id="user_1", title="A")
    env_a = first["create_task"].metadata["environment"]
    env_b = second["create_task"].metadata["environment"]
    assert env_a is not env_b
    assert len(env_a.db["tasks"]) == 2 and len(env_b.db["tasks"]) == 1
    assert {name for name in ("retail", "airline") if len(load_toolkit(name)) > 10} == {
        "retail",
        "airline",
    }


def test_importing_the_domains_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, scenarios.domains, scenarios.replay; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
