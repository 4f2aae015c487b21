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

``end_reason`` says why the episode ended (one of :data:`END_REASONS`); together with
``continues_after_end`` it tells a critic whether the return stops at the sample's end
or would have gone on (bootstrap).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Why an episode ended, in the order the rollout checks them after a turn:
#:
#: * ``terminated``: the env reached a terminal state (goal, failure, the answer of a
#:   single-turn env). Nothing follows; the return is complete.
#: * ``env_truncated``: the env cut the episode for a reason the agent does not
#:   observe (a hidden step limit, gymnasium's ``TimeLimit``). The return would go on.
#: * ``action_budget``: the trajectory's ``max_actions_per_trajectory`` actions are spent.
#: * ``turn_limit``: ``max_turns`` turns were played.
#: * ``context_overflow``: the next turn's prompt plus ``max_new_tokens`` did not fit
#:   ``max_model_len`` (the agent would have acted again; the return would go on).
#:
#: The two budgets are shown in every prompt ("Turn 2 of 5", "8 actions left"), so they
#: are part of the state and may be treated as terminal (``budget_is_terminal``).
END_REASONS = ("terminated", "turn_limit", "action_budget", "context_overflow", "env_truncated")
_BUDGET_REASONS = ("turn_limit", "action_budget")
_CUT_REASONS = ("env_truncated", "context_overflow")


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
    done: bool  # the episode ended after this turn (why: ``Trajectory.end_reason``)
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
    end_reason: str = "terminated"  # why the episode ended, one of END_REASONS
    # why the env failed, when the episode ended by an env failure (an exception, a
    # server that did not answer; end_reason "env_truncated"); None otherwise
    env_error: str | None = None
    turns: list[TurnRecord] = field(default_factory=list)  # the whole episode's turns
    # --- provenance -----------------------------------------------------------------
    source: str = ""  # policy that played it: "model", "oracle", "random", "chat"
    context_exact: bool = True  # decode(input_ids) == the chat template's own rendering
    # len == len(input_ids) (or empty): 1 on the chat-template ids that close each
    # trainable response, e.g. ``<|im_end|>\n`` (ragen.agent.context); masked_gae's M_adv
    turn_close_mask: list[int] = field(default_factory=list)
    # the pictures of a visual env's observations in this sample ((H, W, 3) uint8 numpy),
    # in the order of their image ids in input_ids; the trainer's forward passes turn
    # them into pixel inputs (ragen.models.vlm.pixel_inputs). Never written to JSON.
    images: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.end_reason not in END_REASONS:
            raise ValueError(f"end_reason must be one of {END_REASONS}, got {self.end_reason!r}")

    def continues_after_end(self, budget_is_terminal: bool) -> bool:
        """Whether the return truly continues past this sample's end, so that a critic
        should bootstrap from the value of the state after it.

        True when the episode was cut (``end_reason`` ``"env_truncated"`` or
        ``"context_overflow"``), or ran out of a budget (``"turn_limit"``,
        ``"action_budget"``) and ``budget_is_terminal`` is False. A terminated episode,
        or a spent budget treated as terminal (it is shown in every prompt, so it is part
        of the state), ends the return: False.

        A windowed sample (one turn per sample, ``reward_from_turn is not None``) ends
        the episode only if it holds the episode's last turn; the samples of earlier
        turns return False, since their reward-to-go already sums the rest of the
        episode (Monte-Carlo).
        """
        if self.reward_from_turn is not None and self.turn_index != self.num_turns - 1:
            return False
        if self.end_reason in _CUT_REASONS:
            return True
        return self.end_reason in _BUDGET_REASONS and not budget_is_terminal

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

    def discounted_reward_to_go(self, gamma: float) -> float:
        """:attr:`reward_to_go` with later turns discounted: for turn k of a windowed
        episode ``sum_j gamma^(j-k) r_j`` over the episode's turns ``j >= k`` (``r_j`` each
        turn's reward, ``turns[j].reward``). ``gamma = 1`` is :attr:`reward_to_go`; ``gamma
        = 0`` credits the turn with its own reward only (with potential-based progress
        shaping: the move's own ``Phi(s') - Phi(s)``). A full-history sample, or a sample
        without turn records, keeps its undiscounted reward."""
        if gamma == 1.0 or self.reward_from_turn is None or len(self.turns) <= self.turn_index:
            return self.reward_to_go
        total = 0.0
        for turn in reversed(self.turns[self.turn_index :]):
            total = float(turn.reward) + gamma * total
        return total

    @property
    def num_response_tokens(self) -> int:
        return int(sum(self.response_mask))

    def to_json(self, with_ids: bool = False) -> dict[str, Any]:
        images, self.images = self.images, []  # arrays: not JSON, and costly to deep-copy
        try:
            d = asdict(self)
        finally:
            self.images = images
        d.pop("images")
        if not with_ids:
            for k in ("input_ids", "response_mask", "gen_logprobs", "turn_close_mask"):
                d.pop(k)
        return d
