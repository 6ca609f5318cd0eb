"""The AGILE jigsaw environment: a shuffled photo, code or JSON actions, visual feedback, AGILE's reward.

Episode: `reset()` cuts the photo into an n×n grid and shuffles it (level L: exactly L pieces
start in place); each `step(action)` runs one action and returns the next observation; the
episode ends on `answer()` or at the turn limit. Code actions run in a sandbox session owned by
the environment; the helpers there only record events, which the environment validates and
replays on the true state, so code can never change the puzzle except through `swap`.

Reward (AGILE): 0.8·solved + 0.2·format − 0.05·steps when solved, where format is 1 when every
reply of the episode was a well-formed action and steps counts the turns used.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agent.extras import needs_extra

with needs_extra("jigsaw", "the jigsaw environment"):
    import numpy as np
from pydantic import BaseModel, Field, model_validator

from scenarios.jigsaw import sandbox_helpers
from scenarios.jigsaw.actions import (
    Action,
    ActionFormatError,
    CodeAction,
    MoveAction,
    coerce_action,
)
from scenarios.jigsaw.observe import Observation, edge_hints
from scenarios.jigsaw.puzzle import assemble, check_grid, check_level, cut, seeded_window, shuffle
from scenarios.jigsaw.render import SpecError, decorate, render_spec
from tools.sandbox import SandboxLimits, SandboxSession

SOLVED_WEIGHT = 0.8
FORMAT_WEIGHT = 0.2
STEP_PENALTY = 0.05
_FORMAT_ERRORS = ("SyntaxError", "ForbiddenCode")


class JigsawConfig(BaseModel):
    """One puzzle: which photo, grid, difficulty, seed and turn limit."""

    image: str = "astronaut"
    """A bundled photo name (astronaut, chelsea, coffee, rocket, hubble_deep_field, ...) or an image file path."""
    grid: int = Field(default=3, ge=2, le=8)
    """n for an n×n grid."""
    level: int | None = None
    """How many pieces start in place (0 to n²−2); None shuffles uniformly among unsolved orders."""
    seed: int = 0
    """Seed of the shuffle, the piece labels and the window."""
    max_turns: int = Field(default=10, ge=1, le=10_000)
    """Turn limit; the episode ends when it is reached."""
    window: float = Field(default=1.0, ge=0.1, le=1.0)
    """Side fraction of a seeded random window of the photo to cut (1.0: the whole photo)."""
    max_side: int = Field(default=512, ge=32, le=4096)
    """The photo is downscaled so that its longer side is at most this many pixels."""
    hints: bool = True
    """Add edge-compatibility hints to the text observation."""

    @model_validator(mode="after")
    def _level_fits_grid(self) -> JigsawConfig:
        check_grid(self.grid)
        check_level(self.grid, self.level)
        return self


@dataclass
class StepResult:
    """What one step returned."""

    observation: Observation
    """The next observation."""
    reward: float
    """0 until the episode ends, then the episode reward."""
    done: bool
    """Whether the episode has ended."""
    info: dict[str, Any] = field(default_factory=dict)
    """Details: kind of action, whether it was well-formed, swaps applied, sandbox error."""


@dataclass
class EpisodeResult:
    """The outcome of an episode."""

    solved: bool
    """Every piece is in place (the Acc metric)."""
    score: float
    """Fraction of pieces in place (the Score metric)."""
    steps: int
    """Turns used."""
    reward: float
    """AGILE reward."""
    format_ok: bool
    """Every reply was a well-formed action."""
    format_errors: int
    """Turns whose reply held no well-formed action."""
    swaps: int
    """Swaps applied."""
    termination: Literal["answered", "turn_limit", "not_finished"]
    """Why the episode ended."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return dict(self.__dict__)


class EpisodeOver(RuntimeError):
    """step() was called after the episode ended."""


class JigsawEnv:
    """An interactive jigsaw puzzle; the sandbox session is started on the first code action."""

    def __init__(self, config: JigsawConfig | None = None, *, photo: np.ndarray | None = None,
                 sandbox_limits: SandboxLimits | None = None) -> None:
        from scenarios.jigsaw.images import load_image

        self.config = config or JigsawConfig()
        self.photo = photo if photo is not None else load_image(self.config.image, self.config.max_side)
        self._limits = sandbox_limits or SandboxLimits(cpu_s=5.0, wall_s=10.0, memory_mb=256)
        self._session: SandboxSession | None = None
        self._fresh_episode = True
        self._hint_costs: tuple[np.ndarray, np.ndarray] | None = None
        self.reset()

    @property
    def sandbox_limits(self) -> SandboxLimits:
        """Limits of the sandbox that runs code actions."""
        return self._limits

    # -- episode ------------------------------------------------------------------------

    def reset(self, seed: int | None = None, config: JigsawConfig | None = None) -> Observation:
        """Start an episode (with a new seed and/or config if given) and return the first observation."""
        if config is not None:
            if (config.image, config.max_side) != (self.config.image, self.config.max_side):
                from scenarios.jigsaw.images import load_image

                self.photo = load_image(config.image, config.max_side)
            self.config = config
        if seed is not None:
            self.config = self.config.model_copy(update={"seed": seed})
        rng = random.Random(self.config.seed)
        n = self.config.grid
        self.pieces = cut(seeded_window(self.photo, self.config.window, rng), n)
        self.arrangement = shuffle(n, self.config.level, rng)
        self.piece_labels = rng.sample(range(n * n), n * n)
        """piece_labels[piece] = the label the agent sees for that piece."""
        self._label_to_piece = {label: piece for piece, label in enumerate(self.piece_labels)}
        self._hint_costs = None
        self.turn = 0
        self.format_errors = 0
        self.swaps = 0
        self.answered = False
        self.done = False
        self._fresh_episode = True
        self.log: list[dict[str, Any]] = []
        """One record per step of this episode: kind, format_ok and the feedback text."""
        self.last_observation = self._observe(self.pixels(), "A new puzzle: put every piece in its place.")
        return self.last_observation

    @property
    def state(self) -> list[int]:
        """The label at each position, as the agent sees it."""
        return [self.piece_labels[piece] for piece in self.arrangement]

    @property
    def score(self) -> float:
        """Fraction of pieces in place."""
        return sum(1 for p, piece in enumerate(self.arrangement) if p == piece) / len(self.arrangement)

    @property
    def solved(self) -> bool:
        """Whether every piece is in place."""
        return all(p == piece for p, piece in enumerate(self.arrangement))

    def reward(self) -> float:
        """AGILE reward for the episode so far."""
        format_ok = 1.0 if self.format_errors == 0 else 0.0
        solved = 1.0 if self.solved else 0.0
        return SOLVED_WEIGHT * solved + FORMAT_WEIGHT * format_ok - STEP_PENALTY * self.turn * solved

    def result(self) -> EpisodeResult:
        """Metrics of the episode (final once done)."""
        termination: Literal["answered", "turn_limit", "not_finished"] = (
            "answered" if self.answered else "turn_limit" if self.done else "not_finished"
        )
        return EpisodeResult(
            solved=self.solved, score=self.score, steps=self.turn, reward=round(self.reward(), 6),
            format_ok=self.format_errors == 0, format_errors=self.format_errors, swaps=self.swaps,
            termination=termination,
        )

    # -- pictures -------------------------------------------------------------------------

    def pixels(self, labels: list[int] | None = None) -> np.ndarray:
        """The arrangement (current, or given as labels per position) as a plain RGB array."""
        if labels is None:
            return assemble(self.pieces, self.arrangement, self.config.grid)
        return assemble(self.pieces, [self._label_to_piece[v] for v in labels], self.config.grid)

    def render(self, labels: list[int] | None = None) -> np.ndarray:
        """The arrangement with grid lines and position numbers, as shown to the agent."""
        return decorate(self.pixels(labels), self.config.grid)

    # -- steps ----------------------------------------------------------------------------

    def step(self, action: str | dict[str, Any] | Action) -> StepResult:
        """Run one action: a model reply (```python block or JSON), a JSON dict, or an action object."""
        if self.done:
            raise EpisodeOver("the episode is over; call reset() to start another")
        self.turn += 1
        info: dict[str, Any] = {"turn": self.turn}
        try:
            parsed = coerce_action(action)
        except ActionFormatError as exc:
            self.format_errors += 1
            info.update(kind="invalid", format_ok=False, error=str(exc))
            return self._finish_step(self.render(), f"Format error: {exc}", info)
        if isinstance(parsed, MoveAction):
            image, feedback = self._move(parsed, info)
        else:
            image, feedback = self._code(parsed, info)
        return self._finish_step(image, feedback, info)

    def _finish_step(self, image: np.ndarray, feedback: str, info: dict[str, Any]) -> StepResult:
        if self.answered or self.turn >= self.config.max_turns:
            self.done = True
            if not self.answered:
                feedback += f"\nThe turn limit ({self.config.max_turns}) was reached."
        observation = self._observe(image, feedback)
        self.last_observation = observation
        self.log.append({"kind": info.get("kind", ""), "format_ok": bool(info.get("format_ok")), "feedback": feedback})
        reward = self.reward() if self.done else 0.0
        if self.done:
            info["result"] = self.result().as_dict()
        return StepResult(observation=observation, reward=reward, done=self.done, info=info)

    def _move(self, action: MoveAction, info: dict[str, Any]) -> tuple[np.ndarray, str]:
        info.update(kind="json", format_ok=True)
        if action.action == "answer":
            self.answered = True
            return self.render(), "Answer received."
        k = len(self.arrangement)
        assert action.i is not None and action.j is not None
        if not (0 <= action.i < k and 0 <= action.j < k):
            info["error"] = f"positions must be from 0 to {k - 1}"
            return self.render(), f"Swap rejected: positions must be from 0 to {k - 1}."
        self._swap(action.i, action.j)
        info["swaps"] = [[action.i, action.j]]
        return self.render(), f"Swapped positions {action.i} and {action.j}."

    def _code(self, action: CodeAction, info: dict[str, Any]) -> tuple[np.ndarray, str]:
        session = self._sandbox()
        hooks: list[tuple[str, list[Any]]] = []
        if self._fresh_episode:
            hooks.append(("_begin", [self.config.grid, self.state]))
            self._fresh_episode = False
        hooks.append(("_sync", [self.config.grid, self.state]))
        result = session.run(action.code, hooks=hooks)
        well_formed = result.error_type not in _FORMAT_ERRORS
        if not well_formed:
            self.format_errors += 1
        info.update(kind="code", format_ok=well_formed, sandbox_error=result.error_type,
                    sandbox_s=result.duration_s)
        image, notes = self._replay(result.events, info)
        lines = ["Your code ran." if result.ok else "Your code stopped with an error."]
        report = result.describe()
        if report != "(no output)":
            lines.append(report)
        lines.extend(notes)
        return image, "\n".join(lines)

    def _replay(self, events: list[Any], info: dict[str, Any]) -> tuple[np.ndarray, list[str]]:
        applied: list[list[int]] = []
        image: np.ndarray | None = None
        notes: list[str] = []
        k = len(self.arrangement)
        for event in events:
            op = event.get("op") if isinstance(event, dict) else None
            if op == "swap":
                i, j = event.get("i"), event.get("j")
                if type(i) is int and type(j) is int and 0 <= i < k and 0 <= j < k:
                    self._swap(i, j)
                    applied.append([i, j])
            elif op == "image":
                try:
                    image = render_spec(event.get("spec"), self.render, self.piece_labels)
                except (SpecError, KeyError) as exc:
                    notes.append(f"A picture could not be drawn: {exc}")
            elif op == "answer":
                self.answered = True
                break
        info["swaps"] = applied
        if applied:
            notes.append("Swaps applied: " + ", ".join(f"{i}<->{j}" for i, j in applied) + ".")
        if self.answered:
            notes.append("Answer received.")
        if image is None:
            image = self.render()
        elif not self.answered:
            notes.append("The picture your code produced is shown.")
        return image, notes

    def _swap(self, i: int, j: int) -> None:
        self.arrangement[i], self.arrangement[j] = self.arrangement[j], self.arrangement[i]
        if i != j:
            self.swaps += 1

    def _observe(self, image: np.ndarray, feedback: str) -> Observation:
        hints = ""
        if self.config.hints:
            lr, tb = self._hints_matrices()
            hints = edge_hints(self.state, self.config.grid, lr, tb, self._label_to_piece)
        return Observation(grid=self.config.grid, state=self.state, image=image, turn=self.turn,
                           max_turns=self.config.max_turns, feedback=feedback, hints=hints, done=self.done)

    def _hints_matrices(self) -> tuple[np.ndarray, np.ndarray]:
        if self._hint_costs is None:
            from scenarios.jigsaw.edges import edge_costs, to_unit

            lr, tb = edge_costs(self.pieces)
            self._hint_costs = (to_unit(lr), to_unit(tb))
        return self._hint_costs

    # -- sandbox --------------------------------------------------------------------------

    def _sandbox(self) -> SandboxSession:
        if self._session is None:
            source = Path(sandbox_helpers.__file__).read_text(encoding="utf-8")
            self._session = SandboxSession(preamble=source, exports=sandbox_helpers.EXPORTS, limits=self._limits)
        return self._session

    def close(self) -> None:
        """Stop the sandbox worker."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> JigsawEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
