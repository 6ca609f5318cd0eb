"""tau2-bench-compatible domains (mock, retail, airline) as rein environments and toolkits.

    from scenarios.domains import load_domain
    env = load_domain("airline")          # fresh episode state over the bundled DB
    env.agent_toolkit()                   # the agent's tools, tau2's exact schemas
    env.call("get_user_details", user_id="sara_doe_496")
    env.db_hash()                         # canonical hash of the current DB

See scenarios/domains/environment.py for the full DomainEnvironment API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scenarios.domains.airline import AirlineEnvironment
from scenarios.domains.data import bundled_snapshot, domain_policy, tasks_path
from scenarios.domains.environment import DomainEnvironment, DomainStateError, validate_record
from scenarios.domains.mock import MockEnvironment
from scenarios.domains.retail import RetailEnvironment
from scenarios.domains.store import Snapshot
from tools.registry import Toolkit, toolkit_factory

DOMAINS: dict[str, type[DomainEnvironment]] = {
    "mock": MockEnvironment,
    "retail": RetailEnvironment,
    "airline": AirlineEnvironment,
}
"""Domain name → environment class."""


def domain_class(name: str) -> type[DomainEnvironment]:
    """The environment class of a domain; KeyError names the known domains."""
    try:
        return DOMAINS[name]
    except KeyError:
        raise KeyError(f"unknown domain {name!r}; known: {', '.join(DOMAINS)}") from None


def canonical_snapshot(name: str, data: Any, which: str = "db") -> Snapshot:
    """Validate a DB (or user DB) for a domain and return it in canonical form as a Snapshot.

    Raises DomainStateError naming the offending field.
    """
    cls = domain_class(name)
    model = cls.db_model if which == "db" else cls.user_db_model
    if model is None:
        raise DomainStateError(f"the {name} domain has no user DB")
    return Snapshot(validate_record(model, data, which))


def load_domain(
    name: str,
    *,
    db: Snapshot | Mapping[str, Any] | None = None,
    user_db: Snapshot | Mapping[str, Any] | None = None,
) -> DomainEnvironment:
    """A fresh environment of a domain over the bundled DBs, or over the given ones (validated)."""
    cls = domain_class(name)
    if db is None:
        base = bundled_snapshot(name, "db")
        assert base is not None
    else:
        base = db if isinstance(db, Snapshot) else canonical_snapshot(name, db, "db")
    if user_db is None:
        user_base = bundled_snapshot(name, "user_db")
    else:
        user_base = (
            user_db
            if isinstance(user_db, Snapshot)
            else canonical_snapshot(name, user_db, "user_db")
        )
    return cls(base, user_base, policy=domain_policy(name))


@toolkit_factory
def mock_toolkit() -> Toolkit:
    """The mock domain's agent tools over a fresh environment."""
    return load_domain("mock").agent_toolkit()


@toolkit_factory
def retail_toolkit() -> Toolkit:
    """The retail domain's agent tools over a fresh environment."""
    return load_domain("retail").agent_toolkit()


@toolkit_factory
def airline_toolkit() -> Toolkit:
    """The airline domain's agent tools over a fresh environment."""
    return load_domain("airline").agent_toolkit()


__all__ = [
    "DOMAINS",
    "AirlineEnvironment",
    "DomainEnvironment",
    "DomainStateError",
    "MockEnvironment",
    "RetailEnvironment",
    "Snapshot",
    "airline_toolkit",
    "canonical_snapshot",
    "domain_class",
    "domain_policy",
    "load_domain",
    "mock_toolkit",
    "retail_toolkit",
    "tasks_path",
]
