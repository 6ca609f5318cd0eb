"""The jigsaw environment: shuffles, steps, code and JSON actions, metrics, reward, observations, images."""

from __future__ import annotations

import base64
import io
import random

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from scenarios.jigsaw import (
    BUNDLED_PHOTOS,
    ActionFormatError,
    CodeAction,
    EpisodeOver,
    ImageLoadError,
    JigsawConfig,
    JigsawEnv,
    MoveAction,
    load_image,
    parse_action,
)
from scenarios.jigsaw.puzzle import in_place, shuffle, swaps_to


@pytest.fixture(scope="module")
def env():
    with JigsawEnv(JigsawConfig(image="chelsea", grid=3, seed=5, max_turns=6)) as e:
        yield e


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


def solving_moves(e: JigsawEnv) -> list[tuple[int, int]]:
    # Test-side knowledge of the answer: piece k belongs at position k.
    return swaps_to(e.arrangement, sorted(e.arrangement))


@pytest.mark.parametrize("grid", [2, 3, 4, 5])
def test_level_puts_exactly_that_many_pieces_in_place(grid):
    for level in range(grid * grid - 1):
        for seed in range(3):
            arrangement = shuffle(grid, level, random.Random(seed))
            assert sorted(arrangement) == list(range(grid * grid))
            assert in_place(arrangement) == level, (grid, level, seed, arrangement)


def test_random_level_is_never_solved_and_seed_is_deterministic():
    for seed in range(30):
        arrangement = shuffle(2, None, random.Random(seed))
        assert arrangement != [0, 1, 2, 3]
        assert arrangement == shuffle(2, None, random.Random(seed))


def test_invalid_grid_or_level_is_rejected():
    with pytest.raises(ValidationError, match="level for a 2x2 grid must be from 0 to 2"):
        JigsawConfig(grid=2, level=3)
    with pytest.raises(ValidationError):
        JigsawConfig(grid=1)
    with pytest.raises(ValueError, match="level"):
        shuffle(3, -1, random.Random(0))


def test_labels_do_not_reveal_the_answer():
    # If labels were true positions, sorting `state` would solve every puzzle.
    leaks = 0
    for seed in range(5):
        with JigsawEnv(JigsawConfig(image="coffee", grid=3, seed=seed)) as e:
            order = sorted(range(9), key=lambda p: e.state[p])
            leaks += [e.arrangement[p] for p in order] == list(range(9))
    assert leaks < 5


def test_json_moves_solve_the_puzzle_and_earn_agile_reward(env):
    env.reset(seed=11)
    moves = solving_moves(env)
    for i, j in moves:
        step = env.step({"action": "swap", "i": i, "j": j})
        assert not step.done and step.reward == 0.0
    assert env.solved and env.score == 1.0
    final = env.step('{"action": "answer"}')
    assert final.done
    steps = len(moves) + 1
    assert final.reward == pytest.approx(0.8 + 0.2 - 0.05 * steps)
    result = env.result()
    assert (result.solved, result.steps, result.termination, result.format_ok) == (True, steps, "answered", True)
    with pytest.raises(EpisodeOver):
        env.step('{"action": "answer"}')


def test_score_counts_pieces_in_place(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=3, level=4, seed=2, max_turns=6))
    assert env.score == pytest.approx(4 / 9)
    step = env.step('{"action": "answer"}')
    assert step.done and step.reward == pytest.approx(0.2)
    assert env.result().solved is False


def test_turn_limit_ends_the_episode(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=2, seed=3, max_turns=2))
    env.step('{"action": "swap", "i": 0, "j": 0}')
    last = env.step('{"action": "swap", "i": 1, "j": 1}')
    assert last.done and env.result().termination == "turn_limit"
    assert "turn limit" in last.observation.feedback


def test_code_action_swaps_updates_state_and_answers(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=3, seed=7, max_turns=6))
    moves = solving_moves(env)
    code = "\n".join(f"swap({i}, {j})" for i, j in moves) + "\nprint(state)\nanswer()"
    step = env.step(fence(code))
    assert step.done and env.solved
    assert step.info["swaps"] == [list(m) for m in moves]
    assert str(env.state) in step.observation.feedback
    assert step.reward == pytest.approx(0.95)


def test_code_images_become_the_next_observation(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=3, seed=8, max_turns=6))
    base = env.render()
    step = env.step(fence("img = observation(state)\npart = crop(img, [0, 0, 0.5, 0.5])\nbig = zoom(part, 2)"))
    height, width = base.shape[:2]
    assert step.observation.image.shape[:2] == (round(height / 2) * 2, round(width / 2) * 2)
    assert not step.done
    # The namespace persists across steps within the episode.
    step = env.step(fence("crop(img, [0.5, 0.5, 1, 1])"))
    assert step.info["sandbox_error"] is None
    assert step.observation.image.shape[0] == pytest.approx(height / 2, abs=1)


def test_code_cannot_change_the_puzzle_except_through_swap(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=3, seed=9, max_turns=6))
    before = list(env.arrangement)
    step = env.step(fence("state[0], state[1] = state[1], state[0]\nstate.sort()\nobservation(list(range(9)))"))
    assert env.arrangement == before
    # Looking at a hypothetical arrangement is allowed; it shows that arrangement, nothing more.
    assert step.info["sandbox_error"] is None
    assert np.array_equal(step.observation.image, env.render(list(range(9))))
    for code in ("emit({'op': 'swap', 'i': 0, 'j': 1})", "_puzzle", "swap.__globals__"):
        env.step(fence(code))
        assert env.arrangement == before, code


def test_rebound_helper_names_come_back_next_step(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=2, seed=6, max_turns=4))
    env.step(fence("answer = 'not a function'\nswap = None"))
    step = env.step(fence("swap(0, 1)\nanswer()"))
    assert step.done and step.info["swaps"] == [[0, 1]]


def test_helper_arguments_are_checked(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=3, seed=10, max_turns=8))
    cases = {
        "swap(0, 9)": "position from 0 to 8",
        "swap(0, 1.5)": "position from 0 to 8",
        "crop(observation(), [0.5, 0, 0.2, 1])": "x1 < x2",
        "zoom(observation(), 100)": "factor",
        "crop([1, 2], [0, 0, 1, 1])": "picture",
    }
    for code, message in cases.items():
        step = env.step(fence(code))
        assert message in step.observation.feedback, (code, step.observation.feedback)
        assert step.info["format_ok"] is True  # runtime errors are not format errors


def test_format_errors_are_counted_and_explained(env):
    env.reset(config=JigsawConfig(image="chelsea", grid=2, seed=4, max_turns=10))
    step = env.step("I would swap the first two pieces.")
    assert step.info["kind"] == "invalid" and "```python" in step.observation.feedback
    step = env.step(fence("import os"))
    assert step.info["format_ok"] is False and "imports are not allowed" in step.observation.feedback
    step = env.step('{"action": "swap", "i": 0}')
    assert "needs integer positions" in step.observation.feedback
    assert env.format_errors == 3
    for i, j in solving_moves(env):
        env.step({"action": "swap", "i": i, "j": j})
    final = env.step({"action": "answer"})
    assert final.done and final.reward == pytest.approx(0.8 - 0.05 * env.turn)


def test_parse_action_forms():
    assert parse_action("Let me try.\n```python\nswap(0, 1)\n```") == CodeAction(code="swap(0, 1)")
    assert parse_action('```json\n{"action": "swap", "i": 2, "j": 3}\n```') == MoveAction(action="swap", i=2, j=3)
    assert parse_action('I am done: {"action": "answer"}') == MoveAction(action="answer")
    with pytest.raises(ActionFormatError):
        parse_action('{"action": "fly"}')
    with pytest.raises(ActionFormatError):
        parse_action("")


def test_observation_text_and_png_content_parts(env):
    observation = env.reset(config=JigsawConfig(image="chelsea", grid=3, seed=12))
    text = observation.text()
    assert "state (piece label at each position)" in text
    assert "best neighbours per piece label" in text
    assert all(str(label) in text for label in env.state)
    parts = observation.content_parts()
    assert parts[0]["type"] == "text" and parts[1]["type"] == "image_url"
    url = parts[1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.format == "PNG" and decoded.size == (env.render().shape[1], env.render().shape[0])
    assert observation.content_parts(include_image=False) == parts[:1]


def test_bundled_photos_load_offline():
    for name in BUNDLED_PHOTOS:
        image = load_image(name)
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
        assert max(image.shape[:2]) <= 512


def test_user_image_files(tmp_path):
    path = tmp_path / "gradient.png"
    pixels = np.linspace(0, 255, 64 * 48, dtype=np.uint8).reshape(48, 64)
    Image.fromarray(pixels).save(path)
    with JigsawEnv(JigsawConfig(image=str(path), grid=2)) as e:
        assert e.pixels().shape == (48, 64, 3)
    with pytest.raises(ImageLoadError, match="neither a file nor a bundled photo"):
        load_image(tmp_path / "missing.png")
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG not really")
    with pytest.raises(ImageLoadError, match="cannot read image"):
        load_image(broken)
    with pytest.raises(ImageLoadError, match="not a file"):
        load_image(tmp_path)
