"""Small fakes for tests of the rollout (and of anything that consumes trajectories).

Test-only code (not part of the package): the tests import it as ``from fakes import
...``, since pytest puts ``tests/`` (the folder of ``conftest.py``) on ``sys.path``.

* :class:`LineEnv` -- a 1-D corridor: deterministic start/goal from the seed, optional
  slip probability drawn from the env's own RNG, an oracle and a random action. Not
  registered (no global side effect): pass the class as the env factory,
  ``EnvStateManager(LineEnv, {"slip": 0.2}, ...)``.
* :class:`ScriptedEngine` -- a token engine that answers each prompt with text from a
  callback, encoded with the tokenizer; log-probs are deterministic fake numbers.
* :class:`RandomTokenEngine` -- random ids of random length with random finish reasons
  (fuzzing).
* chat templates: ``HAND_TEMPLATE`` (append-only, plain-text role markers),
  ``THINK_DROPPING_TEMPLATE`` and ``COUNTING_TEMPLATE`` (not append-only),
  ``NO_SYSTEM_TEMPLATE`` (rejects the system role).
* :func:`check_token_exact` -- the core invariant, checked against an engine's log.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from ragen.engines.base import Generation, SamplingParams
from ragen.envs.base import Env, make_info


def index_log(log: list[tuple[list[int], Generation]]) -> dict[tuple[int, ...], list[Generation]]:
    """An engine log indexed by prompt (build once when checking many samples)."""
    by_prompt: dict[tuple[int, ...], list[Generation]] = {}
    for prompt, gen in log:
        by_prompt.setdefault(tuple(prompt), []).append(gen)
    return by_prompt


def check_token_exact(trajectory: Any, log: Any) -> None:
    """Assert the core invariant for one full-history or windowed sample.

    For every trainable segment (a maximal run of ``response_mask == 1``): the ids before
    it are a prompt the engine was called with, the segment is exactly the ids the engine
    returned for that prompt, ``gen_logprobs`` are its log-probs, and ``turn_ends`` lists
    each segment's last position. ``log`` is an engine's ``(prompt, Generation)`` list
    or its :func:`index_log`.
    """
    ids, mask = trajectory.input_ids, trajectory.response_mask
    assert len(ids) == len(mask) == len(trajectory.gen_logprobs)
    by_prompt = log if isinstance(log, dict) else index_log(log)
    segments, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            segments.append((start, i))
            start = None
    assert trajectory.turn_ends == [end - 1 for _, end in segments]
    for start, end in segments:
        gens = by_prompt.get(tuple(ids[:start]), [])
        assert gens, f"the ids before position {start} are not a prompt the engine saw"
        assert any(
            ids[start:end] == list(g.token_ids)
            and trajectory.gen_logprobs[start:end] == list(g.logprobs)
            for g in gens
        ), f"segment {start}:{end} is not what the engine sampled for its prompt"
    assert all(lp == 0.0 for lp, m in zip(trajectory.gen_logprobs, mask) if not m)


# -- chat templates for context tests ----------------------------------------
# A hand-written template: plain-text role markers, a special token closing assistant turns.
HAND_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}### System:\n{{ m['content'] }}\n\n"
    "{% elif m['role'] == 'user' %}### User:\n{{ m['content'] }}\n\n"
    "{% else %}### Assistant:\n{{ m['content'] }}<|endoftext|>\n\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}### Assistant:\n{% endif %}"
)

# NOT append-only: earlier assistant messages lose their <think> block (Qwen3-style).
THINK_DROPPING_TEMPLATE = (
    "{% for m in messages %}"
    "{% set content = m['content'] %}"
    "{% if m['role'] == 'assistant' and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] | trim %}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + content + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# NOT append-only: the system header counts the messages.
COUNTING_TEMPLATE = (
    "<|im_start|>system\n[{{ messages | length }} messages]<|im_end|>\n"
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

NO_SYSTEM_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class LineEnv(Env):
    """Positions 0..length-1; reach the goal. Actions: left, right.

    ``reset(seed)`` picks start != goal from the seed. With ``slip > 0`` a move goes
    the other way with that probability (drawn from ``self.rng``). Reward: -0.1 per
    valid step, +1.0 on reaching the goal (terminated, success). Never truncates.
    """

    description = "1-D corridor for rollout tests"

    def __init__(self, length: int = 6, slip: float = 0.0) -> None:
        super().__init__()
        self.length, self.slip = int(length), float(slip)
        self.pos = self.goal = 0
        self.log: list[str] = []  # actions applied, for tests

    @property
    def instructions(self) -> str:
        return (
            f"You are on a line of {self.length} cells. P is you, G is the goal, _ is empty.\n"
            "Actions: left, right. Reach G."
        )

    @property
    def action_names(self) -> list[str]:
        return ["left", "right"]

    def _reset(self, seed: int) -> None:
        r = random.Random(seed)
        self.pos, self.goal = r.sample(range(self.length), 2)
        self.log = []

    def _step(self, action: str):
        if action not in ("left", "right"):
            return self.render(), 0.0, False, False, make_info(False, False, False)
        move = -1 if action == "left" else 1
        if self.slip and self.rng.random() < self.slip:
            move = -move
        new = min(max(self.pos + move, 0), self.length - 1)
        effective = new != self.pos
        self.pos = new
        self.log.append(action)
        success = self.pos == self.goal
        reward = -0.1 + (1.0 if success else 0.0)
        return self.render(), reward, success, False, make_info(True, effective, success)

    def render(self, mode: str = "text") -> str:
        if mode != "text":
            raise ValueError(f"LineEnv renders only 'text', got {mode!r}")
        cells = ["_"] * self.length
        cells[self.goal] = "G"
        cells[self.pos] = "P"
        return "".join(cells)

    def oracle_action(self) -> str | None:
        if self.pos == self.goal:
            return None
        return "right" if self.goal > self.pos else "left"


class ScriptedEngine:
    """Token engine answering with ``respond(prompt_text, call_index, row) -> text``.

    The reply is encoded with ``tokenizer`` (plus the EOS id when ``respond`` returns a
    text ending in ``"<eos>"``: that marker is replaced by the real EOS token). Records
    every ``(prompt ids, Generation)`` pair in ``self.log``.
    """

    def __init__(self, tokenizer: Any, respond: Callable[[str, int, int], str]) -> None:
        self.tokenizer, self.respond = tokenizer, respond
        self.log: list[tuple[list[int], Generation]] = []
        self.calls = 0
        self.eos_token_ids = [tokenizer.eos_token_id]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for row, prompt in enumerate(prompts):
            text = self.respond(self.tokenizer.decode(prompt), self.calls, row)
            eos = text.endswith("<eos>")
            text = text.removesuffix("<eos>")
            ids = self.tokenizer.encode(text, add_special_tokens=False)[: params.max_new_tokens]
            reason = "length" if len(ids) == params.max_new_tokens else "stop"
            if eos and len(ids) < params.max_new_tokens:
                ids.append(self.tokenizer.eos_token_id)
                reason = "eos"
            logprobs = [-0.01 * (k + 1) for k in range(len(ids))]
            out.append(Generation(ids, logprobs, self.tokenizer.decode(ids), reason))
            self.log.append((list(prompt), out[-1]))
        self.calls += 1
        return out


class RandomTokenEngine:
    """Random ids (any vocabulary entry, special tokens included) for fuzzing; logs
    ``(prompt ids, Generation)`` pairs in ``self.log``."""

    def __init__(self, vocab_size: int, eos_id: int, seed: int = 0, tokenizer: Any = None) -> None:
        self.vocab_size, self.eos_id = vocab_size, eos_id
        self.rng = random.Random(seed)
        self.tokenizer = tokenizer
        self.eos_token_ids = [eos_id]
        self.log: list[tuple[list[int], Generation]] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for _ in prompts:
            n = self.rng.randint(0, params.max_new_tokens)
            ids = [self.rng.randrange(self.vocab_size) for _ in range(n)]
            reason = self.rng.choice(["stop", "eos", "length"])
            if reason == "eos" and ids:
                ids[-1] = self.eos_id
            lps = [-self.rng.random() * 5 for _ in ids]
            text = self.tokenizer.decode(ids) if self.tokenizer is not None else ""
            out.append(Generation(ids, lps, text, reason))
        self.log.extend(zip([list(p) for p in prompts], out))
        return out


@functools.lru_cache(maxsize=4)
def tiny_tokenizer(chat_format: str = "chatml") -> Any:
    """The tiny factory's tokenizer (``ragen.models.tiny``), built once per process."""
    from ragen.models.tiny import build_tokenizer

    return build_tokenizer(chat_format)


def short_train_args(
    model_dir: Any, run_dir: Any, *extra: str, max_new_tokens: int = 12
) -> list[str]:
    """``ragen train`` arguments for a 2-step StarPO-S Sokoban run of a tiny model (2
    groups x 2, 2 turns, validation and a checkpoint at step 2); ``extra`` overrides
    come after the defaults, so they win."""
    return [
        "train",
        "env=sokoban",
        "algo=starpo-s",
        f"model.path={model_dir}",
        "rollout.env_groups=2",
        "rollout.group_size=2",
        "rollout.max_turns=2",
        f"rollout.max_new_tokens={max_new_tokens}",
        "rollout.max_model_len=1024",
        "algo.ppo_mini_batch_size=2",
        "algo.filter.value=0.5",
        "trainer.total_steps=2",
        "trainer.val_every=2",
        "trainer.val_groups=2",
        "trainer.save_every=2",
        "trainer.console=false",
        f"trainer.run_dir={run_dir}",
        *extra,
    ]


def advantage_batch(response_mask: list[list[float]], advantages: list[list[float]]) -> Any:
    """A :class:`~ragen.batching.TrainingBatch` of zeros with the given response
    mask and advantages, (B, T) each, for tests of what the trainer does to advantages
    before the update (``floor_advantages``, ``mask_certain_tokens``)."""
    import torch

    from ragen.batching import TrainingBatch

    response = torch.tensor(response_mask, dtype=torch.float32)
    rows, length = response.shape
    batch = TrainingBatch(
        input_ids=torch.zeros(rows, length, dtype=torch.long),
        attention_mask=torch.ones(rows, length),
        response_mask=response,
        turn_end_mask=torch.zeros(rows, length),
        gen_log_prob=torch.zeros(rows, length),
        lengths=torch.full((rows,), length),
    )
    batch.advantages = torch.tensor(advantages, dtype=torch.float32)
    return batch


def child_env(root, **variables: str) -> dict[str, str]:
    """The environment of a test's child Python process: this one's, with ``root`` (the
    repository) put before the inherited ``PYTHONPATH`` rather than replacing it, so
    that packages installed beside the interpreter (``pip install --target``, as on a
    lent GPU machine) stay importable, plus ``variables``."""
    import os

    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **variables, "PYTHONPATH": path}
