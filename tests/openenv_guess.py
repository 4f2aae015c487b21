"""A native OpenEnv environment for the tests: written against ``openenv-core`` alone
(no ragen), with a structured action and observation, as a user's own OpenEnv env is.

Test-only code. Guess a hidden number in 1..8 from "higher"/"lower" hints, four guesses
at most; reward 1 for finding it. Served by ``openenv-core``'s ``create_app`` under
uvicorn (``ragen.envs.serving.openenv_server.AppServer``), it is a real local OpenEnv server.

``to_action`` and ``to_text`` are the small user functions that map ragen's text
actions and observations to its structured ones (``env.config.action_fn`` /
``observation_fn``).
"""

from __future__ import annotations

import random
from typing import Any

from openenv.core import Action, Environment, Observation, State, create_app

MAX_GUESSES = 4


class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    hint: str = ""
    guesses_left: int = MAX_GUESSES


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.secret, self.left = 1, MAX_GUESSES
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any):
        self.secret = random.Random(seed).randint(1, 8)
        self.left = MAX_GUESSES
        self._state = State(episode_id=episode_id)
        return GuessObservation(hint="Guess a number from 1 to 8.", guesses_left=self.left)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any):
        self._state.step_count += 1
        self.left -= 1
        if action.guess == self.secret:
            return GuessObservation(hint="correct", guesses_left=self.left, reward=1.0, done=True)
        hint = "higher" if action.guess < self.secret else "lower"
        return GuessObservation(hint=hint, guesses_left=self.left, reward=0.0, done=self.left == 0)

    @property
    def state(self) -> State:
        return self._state


def make_app(max_sessions: int = 32) -> Any:
    return create_app(
        GuessEnvironment, GuessAction, GuessObservation, max_concurrent_envs=max_sessions
    )


def to_action(text: str) -> dict[str, Any]:
    """ragen's action text -> the structured action (non-numbers fail the schema)."""
    text = text.strip()
    return {"guess": int(text) if text.isdigit() else text}


def to_text(observation: dict[str, Any]) -> str:
    """The structured observation -> the text the agent reads."""
    return f"Hint: {observation['hint']}. Guesses left: {observation['guesses_left']}."
