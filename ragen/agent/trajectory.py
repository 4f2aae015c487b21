"""The rollout -> trainer contract: one training sample built from sampled token ids.

The central invariant of ragen: ``input_ids`` holds exactly the ids the policy
sampled (never re-tokenized text) interleaved with the tokenized prompt and
observation turns; ``response_mask`` is 1 on exactly the sampled ids.

Layout of one multi-turn sample (full-history context)::

    input_ids      [ system+user turn 0 | sampled 0 | user turn 1 | sampled 1 | ... ]
    response_mask  [ 0 0 0 0 0 0 0 0 0 0 | 1 1 1 1 1 | 0 0 0 0 0 0 | 1 1 1 1 1 | ... ]
    turn_ends      positions of the last sampled id of each turn (here 2 entries)
    gen_logprobs   log p(sampled id) from generation at sampled positions, 0.0 elsewhere

With a windowed context (last k turns) every turn is its own sample holding one
response; ``episode_id`` ties the samples of one episode together (``turn_index`` is
the turn it trains; episode-level facts and ``turns`` are repeated on each sample).

``len(turn_ends) == len(turn_rewards)`` for every sample with ids. A turn whose response has no ids (only
possible for a policy that returned nothing) has no end position; its reward is folded
into the neighbouring turn's entry. Text-only samples (a chat API policy) have no ids:
``input_ids == turn_ends == []`` and ``turn_rewards`` holds every turn's reward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TurnRecord:
    """Human-readable record of one turn, for trajectories.jsonl and the viewer."""

    observation: str
    response: str  # decoded sampled ids (display only; training uses ids)
    thought: str
    actions: list[str]  # actions parsed from the response (before budget clipping)
    executed_actions: list[str]  # actions actually sent to env.step
    env_reward: float  # sum of env rewards this turn
    format_ok: bool
    reward: float  # env_reward + format shaping (penalty / bonus)
    done: bool
    info: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""  # the full user message that opened the turn (what the policy read)


@dataclass
class Trajectory:
    """One training sample (an episode, or one turn of it with a windowed context)."""

    input_ids: list[int]
    response_mask: list[int]  # len == len(input_ids); 1 on sampled ids
    gen_logprobs: list[float]  # len == len(input_ids); generation log-probs on sampled ids
    turn_ends: list[int]  # index into input_ids of each turn's last sampled id
    turn_rewards: list[float]  # one per turn in this sample (env reward + format shaping)
    # --- episode-level facts --------------------------------------------------------
    env_name: str = ""
    seed: int = 0  # initial-state seed (shared within a group)
    group_id: int = 0  # samples from the same initial state share it (``index``)
    episode_id: int = 0  # unique per episode in a rollout batch
    turn_index: int = 0  # first turn this sample covers (0 for full history)
    episode_reward: float = 0.0  # sum of all turn rewards of the whole episode
    # sum of the episode's turn rewards from ``turn_index`` on (None: ``episode_reward``)
    reward_from_turn: float | None = None
    success: bool = False
    num_turns: int = 0
    num_actions: int = 0
    num_valid_actions: int = 0
    num_effective_actions: int = 0
    num_format_errors: int = 0
    truncated: bool = False  # ended because the next prompt exceeded max_model_len
    turns: list[TurnRecord] = field(default_factory=list)  # the whole episode's turns
    # --- provenance -----------------------------------------------------------------
    source: str = ""  # policy that played it: "model", "oracle", "random", "chat"
    context_exact: bool = True  # decode(input_ids) == the chat template's own rendering
    # len == len(input_ids) (or empty): 1 on the chat-template ids that close each
    # trainable response, e.g. ``<|im_end|>\n`` (ragen.agent.context); masked_gae's M_adv
    turn_close_mask: list[int] = field(default_factory=list)

    @property
    def reward(self) -> float:
        """Sum of this sample's turn rewards."""
        return float(sum(self.turn_rewards))

    @property
    def reward_to_go(self) -> float:
        """What this sample's actions can still earn: the episode's rewards from its first
        turn on. The whole episode reward for a full-history sample; for turn k of a
        windowed episode, ``sum(turn_rewards[k:])`` over the episode's turns, since turn
        k's reply cannot change rewards already paid in turns < k."""
        return self.episode_reward if self.reward_from_turn is None else self.reward_from_turn

    @property
    def num_response_tokens(self) -> int:
        return int(sum(self.response_mask))

    def to_json(self, with_ids: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_ids:
            for k in ("input_ids", "response_mask", "gen_logprobs", "turn_close_mask"):
                d.pop(k)
        return d
