"""A frozen ragen model as the opponent of a two-player game
(``make("ta_tictactoe", opponent="checkpoint", opponent_model=PATH)``).

The env (:mod:`ragen.envs.adapters.textarena_two_player`) asks it for one move at a time with
the game's instructions and what the opponent's side sees; it answers through the same
system prompt and reply format as the agent (``<think>..</think><answer>..</answer>``),
from a model loaded like ``ragen eval --model PATH`` (a run folder, a checkpoint, any
model folder or hub id). It is frozen: never trained, greedy by default. A model is
loaded once per process and path and shared by every env that names it.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from ragen.engines.base import SamplingParams
from ragen.engines.hf_vlm import engine_for
from ragen.models import load_policy

from . import prompts
from .evaluate import find_training_run
from .reasoning import check_format, parse_reply


def model_folder(model: str) -> str:
    """What to load for ``model``, as ``ragen eval --model`` reads it: a run folder (its
    newest checkpoint's actor), a checkpoint folder (``RUN/checkpoints/step_N``: its
    actor) or its actor folder; anything else (a model folder, a hub id) as it is."""
    run = find_training_run(model)
    return run.model if run is not None else model


@functools.lru_cache(maxsize=4)
def _load(model: str) -> tuple[Any, Any]:
    """``(engine, tokenizer)`` of ``model``, loaded once per process."""
    lm, tokenizer = load_policy(model_folder(model))
    return engine_for(lm, tokenizer), tokenizer


class ModelOpponent:
    """A frozen policy that answers one position at a time.

    Args:
        model: a run folder, checkpoint folder, model folder or hub id.
        temperature: sampling temperature (0: greedy, the same move for the same view).
        reasoning: the reply format the model was trained with.
        max_new_tokens: the reply budget.
    """

    def __init__(
        self,
        model: str,
        temperature: float = 0.0,
        reasoning: str = "free_think",
        max_new_tokens: int = 64,
    ) -> None:
        check_format(reasoning)
        if temperature < 0:
            raise ValueError(f"opponent temperature must be >= 0, got {temperature}")
        self.model, self.temperature = str(model), float(temperature)
        self.reasoning, self.max_new_tokens = reasoning, int(max_new_tokens)
        _load(self.model)  # fail at construction on a bad path, with the loader's message

    def act(self, instructions: str, observation: str, rng: random.Random) -> str | None:
        """The first action of the model's reply to ``observation``, or None when the
        reply is not well formed."""
        engine, tokenizer = _load(self.model)
        system = prompts.system_message(instructions, self.reasoning, max_actions_per_turn=1)
        user = prompts.user_message(0, observation, 1, 1, reasoning=self.reasoning, max_turns=1)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # a BatchEncoding
            ids = ids["input_ids"]
        params = SamplingParams(
            temperature=self.temperature,
            max_new_tokens=self.max_new_tokens,
            seed=rng.getrandbits(31),
        )
        text = engine.generate([list(ids)], params)[0].text
        parsed = parse_reply(text, self.reasoning)
        return parsed.actions[0] if parsed.format_ok and parsed.actions else None
