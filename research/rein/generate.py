"""The card-aware detector's rows: user turns of many agents, labelled against each agent's card.

Sources:
- the agent files (research/rein/agents/*.yaml): synthesized agents across many domains, agents
  on tool lists captured from real MCP servers, and rein's own toolkits. Each item becomes rows
  at several dialogue positions (the opening turn, after an earlier exchange, after the agent
  turn it answers) and in several phrasing styles (as written, lower-cased and unpunctuated, with
  a greeting, with the user's identity, with typos);
- unsupported_domain rows: a narrow agent receives other agents' ordinary requests (agents of the
  same split only, so no test domain's text is seen in training); a general assistant never does;
- the tau2 retail and airline dialogues (interventions/data/dialogues.jsonl), with each domain's
  tools and policy as the card.

Splits are by agent domain (SPLITS): test agents are unseen in training and validation. tau2
keeps its own task split (its test rows form the "tau2" evaluation).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from interventions.card import CapabilityCard, build_card
from interventions.error_map import NO_ERROR
from research.rein.agents import ERROR_LISTS, AgentFile, Item, load_agents

TEST = frozenset({
    "pharmacy", "car_rental", "university_registrar", "utility_billing", "payroll", "meeting_rooms", "crm_sales",
    "weather_service", "vet_clinic", "cinema_tickets", "language_tutor", "writing_assistant", "mcp_git",
    "mcp_filesystem", "rein_builtin",
})
"""Agents held out for the test: their domains are never seen in training or validation."""
VALIDATION = frozenset({
    "insurance_claims", "gym_membership", "recruiting", "document_storage", "smart_home", "event_tickets",
    "coding_assistant", "mcp_time",
})
"""Agents that choose the threshold and the training recipe."""
CROSS_DOMAIN = 10
"""Other agents' ordinary requests given to each narrow agent as unsupported_domain turns."""
OVERLAPS = frozenset({("rein_retrieval", "general_assistant"), ("rein_retrieval", "writing_assistant")})
"""(agent, other) pairs whose requests overlap: an encyclopedia agent answers a general assistant's
trivia, so those are not unsupported_domain turns for it."""
TAU2_POLICIES = Path(__file__).resolve().parents[3] / "shared" / "data" / "tau2"

_REPLIES = (
    "Done! Anything else I can help with?",
    "All set. Is there anything else you need?",
    "Sure, that's taken care of. What else can I do for you?",
    "I've completed that for you.",
    "Here's what I found. Let me know if you need anything else.",
    "Thanks for waiting. That's done now.",
)
_NAMES = ("Dana Whitfield", "Omar Haddad", "Mei Kovacs", "Lucas Ferreira", "Priya Raman", "Jonas Berg")
_GREETINGS = ("Hi! ", "Hello, ", "Hey there. ", "Good morning. ")
_THANKS = (" Thanks!", " Thank you.", " Thanks a lot.", "")


@dataclass
class Row:
    """One labelled user turn of one agent, with the turns before it."""

    id: str
    """Stable row id."""
    agent: str
    """The agent's domain (tau2: retail or airline)."""
    split: str
    """train, validation, test, or tau2 (the tau2 test split)."""
    text: str
    """The user turn."""
    history: list[tuple[str, str]]
    """(role, text) of the turns before it."""
    label: str
    """"none" or an error type."""
    kind: str
    """ordinary, hard_negative, error, cross_domain, or the tau2 turn's kind."""
    style: str = "as_written"
    """How the turn was phrased: as_written, lower, greeting, identity, typos (tau2: tau2)."""
    card: CapabilityCard = field(default=None, repr=False)  # type: ignore[assignment]  # set by every builder
    """The agent's card."""


def split_of(domain: str) -> str:
    """The split an agent domain belongs to."""
    return "test" if domain in TEST else "validation" if domain in VALIDATION else "train"


def styled(text: str, style: str, rng: random.Random) -> str:
    """The turn phrased in a style."""
    if style == "lower":
        return re.sub(r"[.!]+$", "", text.lower()).strip()
    if style == "greeting":
        return rng.choice(_GREETINGS) + text[0].lower() + text[1:] + rng.choice(_THANKS) if text else text
    if style == "identity":
        name = rng.choice(_NAMES)
        return f"Hi, this is {name} ({name.split()[0].lower()}@example.com). {text}"
    if style == "typos":
        words = text.split()
        for _ in range(max(1, len(words) // 8)):
            k = rng.randrange(len(words))
            w = words[k]
            if len(w) > 3 and w.isalpha():
                i = rng.randrange(1, len(w) - 1)
                words[k] = w[:i] + w[i + 1] + w[i] + w[i + 2:]
        return " ".join(words)
    return text


STYLES = ("lower", "greeting", "identity", "typos")


def agent_rows(agent: AgentFile, others: list[AgentFile], seed: int = 0) -> list[Row]:
    """Every row of one agent file, its unsupported_domain rows included."""
    rng = random.Random(f"{seed}:{agent.domain}")
    split = split_of(agent.domain)
    card = agent.card
    ordinary = [i.text for i in agent.ordinary]
    rows: list[Row] = []

    def add(item: Item, label: str, kind: str) -> None:
        variants = [("as_written", item.text), (style := rng.choice(STYLES), styled(item.text, style, rng))]
        for k, (style, text) in enumerate(variants):
            if item.context:
                lead = [("user", rng.choice(ordinary)), ("assistant", item.context)] if rng.random() < 0.5 else []
                histories = [("after_agent", lead or [("assistant", item.context)])]
            elif k == 0:
                histories = [("first", []), ("mid", [("user", rng.choice(ordinary)), ("assistant", rng.choice(_REPLIES))])]
            else:
                histories = [rng.choice([("first", []), ("mid", [("user", rng.choice(ordinary)), ("assistant", rng.choice(_REPLIES))])])]
            for position, history in histories:
                digest = hashlib.sha1(f"{agent.domain}|{text}|{history}".encode()).hexdigest()[:12]
                rows.append(Row(f"{agent.domain}-{digest}", agent.domain, split, text, list(history), label, kind,
                                f"{style}:{position}", card))

    for item in agent.ordinary:
        add(item, NO_ERROR, "ordinary")
    for item in agent.hard_negatives:
        add(item, NO_ERROR, "hard_negative")
    for name in ERROR_LISTS:
        for item in getattr(agent, name):
            add(item, name, "error")
    if card.scope == "narrow" and not agent.general_purpose:
        pool = [(o.domain, i.text) for o in others
                if o.domain != agent.domain and split_of(o.domain) == split and (agent.domain, o.domain) not in OVERLAPS
                for i in o.ordinary]
        for _, text in rng.sample(pool, min(CROSS_DOMAIN, len(pool))):
            add(Item(text=text), "unsupported_domain", "cross_domain")
    return dedupe(rows)


def dedupe(rows: list[Row]) -> list[Row]:
    """Rows with distinct ids, first kept."""
    seen: set[str] = set()
    out = []
    for r in rows:
        if r.id not in seen:
            seen.add(r.id)
            out.append(r)
    return out


def tau2_rows(policies: Path = TAU2_POLICIES) -> list[Row]:
    """The tau2 dialogues' user turns, each domain's tools and policy as its card; tau2's test split is "tau2"."""
    from interventions.dialogue_dataset import context_turns, read_dialogues, read_domain_tools

    tools = read_domain_tools()
    cards = {}
    for domain in tools:
        policy = policies / domain / "policy.md"
        if not policy.exists():
            raise FileNotFoundError(f"{policy} is missing: the tau2 rows need ../shared/data/tau2")
        cards[domain] = build_card(tools[domain], policy.read_text(encoding="utf-8"))
    dialogues = list(read_dialogues())
    domain = {d.id: d.domain for d in dialogues}
    split = {d.id: d.split for d in dialogues}
    out = []
    for t in context_turns(dialogues):
        s = "tau2" if split[t.dialogue] == "test" else split[t.dialogue]
        out.append(Row(f"{t.dialogue}-{t.index}", domain[t.dialogue], s, t.text, list(t.history), t.label, t.kind,
                       "tau2", cards[domain[t.dialogue]]))
    return out


def build_rows(seed: int = 0, tau2: bool = True) -> list[Row]:
    """Every row: the agent files' (with cross-domain turns) and, with tau2, the tau2 dialogues'."""
    agents = load_agents()
    rows = [r for a in agents for r in agent_rows(a, agents, seed)]
    if tau2:
        rows += tau2_rows()
    return rows
