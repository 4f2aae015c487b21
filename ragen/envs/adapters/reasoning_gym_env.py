"""reasoning-gym's procedural task generators as ragen environments
(``pip install 'ragen[reasoning-gym]'``).

    env = make("reasoning_gym", task="basic_arithmetic", task_config={"max_terms": 3})
    env = make("reasoning_gym", task=["word_sorting", "caesar_cipher"], max_attempts=3)

`reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ generates about 100
families of verifiable reasoning tasks offline (arithmetic, ciphers, logic puzzles,
graph problems, ...), each with its own scorer. The adapter:

* **tasks by name**: ``task`` is one reasoning-gym dataset name or a list of them; with
  several, the seed picks the task. ``task_config`` is passed through to the dataset's
  own config dataclass (its difficulty settings: ``max_terms``, ``min_words``, ...); for
  several tasks it maps each task name to its settings.
* **seeded**: a dataset is built once per (task, config, ``dataset_seed``, ``size``) and
  shared by every env of the process; the episode of ``seed`` is item ``seed mod size``,
  so a seed gives the same question in any process.
* **scored by the generator's own verifier**: the reward is
  ``dataset.score_answer(answer, entry)`` in ``[0, 1]`` (partial credit where the task
  gives it); ``success`` when it reaches ``success_threshold`` (1.0). The answer is the
  action text exactly as written: case and spacing matter to many verifiers, so it is
  not normalized like the other envs' action names.
* **multi-turn option**: ``max_attempts > 1`` lets the agent answer again after a wrong
  answer; the observation then shows the feedback (the score) and the answers left, so
  the last allowed answer terminates the episode (never a hidden cut). The reward is
  the score of the answer that ends the episode, 0 for the answers before it.
* **reference policies**: the oracle answers with the generator's answer
  (``entry["answer"]``); the random policy answers with the answer of another,
  randomly drawn question of the same task: the right form, unrelated content, so its
  success rate is the task's chance level.

A verifier that raises on a strange answer scores it 0 (the reason is in
``info["reason"]``); an empty answer is an invalid action.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragen.errors import EnvConfigError, MissingDependencyError

from ..base import Env, StepResult, derive_seed, make_info

DEFAULT_SIZE = 10_000  # questions per task; the item of a seed is seed mod size


def import_reasoning_gym() -> Any:
    """The ``reasoning_gym`` module, or a one-line error naming the pip extra."""
    try:
        import reasoning_gym
    except ImportError as err:
        raise MissingDependencyError(
            "reasoning-gym is not installed; install it with: pip install 'ragen[reasoning-gym]'"
        ) from err
    return reasoning_gym


def task_names() -> list[str]:
    """Every dataset name reasoning-gym registers (sorted)."""
    import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


@functools.lru_cache(maxsize=64)
def _dataset(task: str, config_json: str, dataset_seed: int, size: int) -> Any:
    """One reasoning-gym dataset, shared by every env of the process with the same
    settings (items are generated on demand from ``dataset_seed + index``; building some
    datasets loads word lists or puzzles, so it happens once)."""
    rg = import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    config = json.loads(config_json)
    _, config_cls = DATASETS[task]
    try:
        return rg.create_dataset(task, seed=dataset_seed, size=size, **config)
    except TypeError as err:
        fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in ("seed", "size")]
        raise EnvConfigError(
            f"reasoning-gym task {task!r} rejected task_config {config} ({err}); "
            f"its settings are: {', '.join(fields)}"
        ) from None
    except (AssertionError, ValueError) as err:
        raise ValueError(
            f"reasoning-gym task {task!r}: invalid task_config {config}: {err}"
        ) from None


class ReasoningGymEnv(Env):
    """Questions from reasoning-gym generators, answered in one turn (or a few).

    Config:
        task: a reasoning-gym dataset name (``basic_arithmetic``) or a list of names;
            ``ragen.envs.adapters.reasoning_gym_env.task_names()`` lists them all.
        task_config: the dataset's settings (difficulty), passed through; with several
            tasks, a mapping ``{task: {setting: value}}``.
        size: questions per task; the item of ``seed`` is ``seed mod size``.
        dataset_seed: the generator seed of the datasets (the same questions for the
            same ``dataset_seed``).
        max_attempts: answers allowed per episode (1 = single turn; more: retry after
            feedback).
        success_threshold: the score at which an answer counts as a success.
    """

    description = "reasoning-gym task generators, scored by their own verifiers"
    single_turn = True

    def __init__(
        self,
        task: str | Sequence[str] = "basic_arithmetic",
        task_config: dict[str, Any] | None = None,
        size: int = DEFAULT_SIZE,
        dataset_seed: int = 0,
        max_attempts: int = 1,
        success_threshold: float = 1.0,
    ) -> None:
        super().__init__()
        import_reasoning_gym()
        self.tasks = [task] if isinstance(task, str) else [str(t) for t in task]
        if not self.tasks:
            raise ValueError("task must name at least one reasoning-gym task")
        known = task_names()
        for name in self.tasks:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(
                    f"reasoning-gym has no task {name!r}.{hint} "
                    "See ragen.envs.adapters.reasoning_gym_env.task_names()"
                )
        if size < 1 or max_attempts < 1:
            raise ValueError(f"size={size} and max_attempts={max_attempts} must be >= 1")
        if not 0.0 < success_threshold <= 1.0:
            raise ValueError(f"success_threshold={success_threshold} must be in (0, 1]")
        self.task_configs = self._split_configs(dict(task_config or {}))
        self.size, self.dataset_seed = int(size), int(dataset_seed)
        self.max_attempts = int(max_attempts)
        self.single_turn = self.max_attempts == 1
        self.success_threshold = float(success_threshold)
        for name in self.tasks:  # fail at construction on a bad config, not at reset
            self._data(name)
        self.task = self.tasks[0]
        self.index = 0
        self.entry: dict[str, Any] = {"question": "", "answer": None, "metadata": {}}
        self._attempts = 0
        self._feedback = ""
        self._raw_action = ""

    def _split_configs(self, config: dict[str, Any]) -> dict[str, dict[str, Any]]:
        if len(self.tasks) == 1:
            return {self.tasks[0]: config}
        unknown = sorted(set(config) - set(self.tasks))
        if unknown:
            raise ValueError(
                f"with several tasks, task_config maps task names to their settings; "
                f"{unknown} are not among the tasks {self.tasks}"
            )
        return {name: dict(config.get(name) or {}) for name in self.tasks}

    def _data(self, task: str) -> Any:
        config_json = json.dumps(self.task_configs[task], sort_keys=True)
        return _dataset(task, config_json, self.dataset_seed, self.size)

    # -- the contract ----------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        pick = derive_seed("reasoning_gym", seed) % len(self.tasks)
        self.task = self.tasks[pick]
        self.index = seed % self.size
        self.entry = self._data(self.task)[self.index]
        self._attempts = 0
        self._feedback = ""

    def step(self, action: str) -> StepResult:
        # the verifier reads the answer as written: keep its case and inner spacing
        self._raw_action = str(action).strip()
        return super().step(action)

    def _step(self, action: str) -> StepResult:
        answer = self._raw_action
        if not answer:
            info = make_info(False, False, False, reason="empty answer")
            return self.render("text"), 0.0, False, False, info
        self._attempts += 1
        score, reason = self.score(answer)
        success = score >= self.success_threshold
        terminated = success or self._attempts >= self.max_attempts
        verdict = "correct" if success else f"not correct (score {score:.2f})"
        self._feedback = f"Your answer {answer!r} is {verdict}."
        reward = score if terminated else 0.0
        info = make_info(
            True, True, success, score=score, attempts=self._attempts, task=self.task, reason=reason
        )
        return self.render("text"), reward, terminated, False, info

    def score(self, answer: str) -> tuple[float, str]:
        """``(score in [0, 1], reason)`` of ``answer`` by the task's own verifier."""
        try:
            value = self._data(self.task).score_answer(answer, self.entry)
            score = float(value or 0.0)
        except Exception as err:  # noqa: BLE001 - any verifier failure scores 0
            return 0.0, f"the verifier raised {type(err).__name__}: {str(err)[:120]}"
        if not np.isfinite(score):
            return 0.0, f"the verifier returned {value!r}"
        return min(max(score, 0.0), 1.0), "scored by the verifier"

    @property
    def instructions(self) -> str:
        tasks = ", ".join(self.tasks)
        kind = "task" if len(self.tasks) == 1 else "tasks"
        budget = (
            "You have one answer."
            if self.max_attempts == 1
            else f"You have {self.max_attempts} answers; after a wrong one you may try again."
        )
        return (
            f"Each episode is one question from the reasoning-gym {kind} {tasks}. "
            "Read it carefully and answer with the final answer only, in exactly the form "
            "the question asks for (no explanation in the answer).\n"
            f"Reward: the verifier's score of your answer, 1 for a fully correct one. {budget}"
        )

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode != "text":
            raise self._unsupported_mode(mode)
        lines = [str(self.entry["question"]).strip()]
        if self._feedback:
            lines.append(self._feedback)
        if self.max_attempts > 1:  # the answer budget is part of the state
            lines.append(f"Answers left: {self.max_attempts - self._attempts}")
        return "\n".join(lines)

    def snapshot(self) -> object:
        return (self.task, self.index, self._attempts, self._feedback, self.done)

    # -- reference policies ----------------------------------------------------------------
    def oracle_action(self) -> str | None:
        """The generator's own answer (None when the task has none)."""
        answer = self.entry.get("answer")
        if self.done or answer is None:
            return None
        return str(answer)

    def random_action(self, rng: random.Random) -> str:
        """The answer of a randomly drawn other question of the same task: the right
        form, unrelated content (the task's chance level)."""
        data = self._data(self.task)
        for _ in range(8):
            other = data[rng.randrange(self.size)].get("answer")
            if other is not None and str(other).strip():
                return str(other)
        return "0"
