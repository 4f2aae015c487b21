"""What ``ragen sft`` trains on and how: :class:`SFTConfig`, checked by its ``validate``.

The expert episodes are played and prompted as the RL run's (``rollout``: the same
:class:`~ragen.agent.rollout.RolloutConfig`), so a warm start and the RL run that
follows it read the same prompts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ragen.agent.reasoning import REASONING_FORMATS
from ragen.agent.rollout import RolloutConfig
from ragen.errors import ConfigError

SFT_LABELS = ("expert", "played")


@dataclass
class SFTConfig:
    env: str = "sokoban"  # a registered environment (``ragen envs``)
    env_config: dict = field(default_factory=dict)  # the env's own knobs
    # how the expert episodes are played and prompted: max_turns, max_actions_per_turn,
    # think, prompt_style, context_window must match the RL run's rollout.* (its
    # env_groups/group_size/sampling knobs are unused here)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    episodes: int = 512  # expert episodes generated
    # fraction of the moves played while generating that are random instead of the
    # expert's: the states visited then include the mistakes a learner makes
    epsilon: float = 0.0
    # what a turn is trained to answer. "expert": the solver's move in the state the
    # episode is in, whatever was played (DAgger's labels; a random move is never a
    # target; needs rollout.context_window=0 when epsilon > 0, since the recorded reply
    # then differs from the move that ran). "played": the move that ran, random or not
    # (teaches the reply format alone when epsilon is 1, as the bandit's warm start does)
    labels: str = "expert"
    actions_per_turn: int = 1  # expert actions per response (<= rollout.max_actions_per_turn)
    seed: int = 0
    epochs: int = 2
    batch_size: int = 32  # sequences per optimizer step
    # padded tokens per forward/backward micro-batch. 4096 pads Sokoban expert data 9%
    # (16384: 20%) and ran an epoch 1.3-1.4x faster with the same losses, but in one
    # demo-length run the grid phase change came later; kept at 16384 until measured on
    # more seeds
    # 0 (auto): 16384, or the power of two below what fits in free memory when less
    # (ragen.models.memory)
    micro_token_budget: int = 0
    lr: float = 5e-4
    # linear warm-up over this fraction of the optimizer steps, then cosine decay to 10%
    warmup_frac: float = 0.0
    weight_decay: float = 0.0
    # AdamW's second-moment decay. 0.95 (as in most LLM pretraining) adapts the step
    # size faster than PyTorch's 0.999 when the gradient scale changes, as it does when
    # a from-scratch model leaves its loss plateau
    adam_beta2: float = 0.999
    # expert episodes (from validation-disjoint training states, apart from the training
    # data) whose loss and per-token accuracy are measured after every epoch: does the
    # warm start fit what it was taught? 0 = no held-out slice
    heldout_episodes: int = 0
    # an auxiliary reply format also trained on (e.g. "grounding": the expert first states
    # the facts of the state, player and goal by coordinates), on aux_episodes more
    # episodes: a dense target for reading the grid that the model's own format
    # (rollout.reasoning, what RL and evaluation play) shares its circuits with
    aux_reasoning: str | None = None
    aux_episodes: int = 0
    # A from-scratch model either leaves its loss plateau (predicting the most common
    # move) or stays on it, depending on its random init. With fit_check > 0 the fit is
    # checked once that fraction of the optimizer steps has run: the greedy reply must
    # match the expert's on at least fit_min_reply_accuracy of a slice of the training
    # data (never the validation states), else a from-scratch tiny model is drawn again
    # with a new init seed and trained from the start, at most fit_restarts times. A
    # pretrained model is never re-drawn: a failed check is logged and training goes on
    fit_check: float = 0.0
    fit_min_reply_accuracy: float = 0.5
    fit_restarts: int = 0
    # The same plateau read at the end of SFT: when the training slice's reply accuracy
    # after the last epoch (``train_reply_accuracy``, measured beside the held-out one, so
    # heldout_episodes > 0) is below end_fit_min_reply_accuracy, end_fit_extra_epochs more
    # epochs run, each from a fresh optimizer and one-epoch schedule at lr. Only a run
    # that fails the check changes. 0 = off. (The demo's Sokoban at another float
    # rounding: 0.20 after two epochs, a warm start as good as random play; two more
    # epochs: 0.75, and RL then added +7.6 where it had added +2.5)
    end_fit_min_reply_accuracy: float = 0.0
    end_fit_extra_epochs: int = 2
    # wall-clock budget of the optimizer steps (None: every epoch): after the first
    # steps the schedule is shortened to the steps that fit, so warm-up and decay still
    # run their course
    max_seconds: float | None = None
    # stop once the model solves this share of its own SFT states (0: train every
    # epoch). A warm start chosen on training data, never on validation states, to sit
    # below what RL can reach: checked every success_check_every optimizer steps on the
    # first success_check_episodes SFT states at success_check_temperature (the
    # evaluation's). ragen/sft/expert_data.py: training_state_success
    stop_at_success: float = 0.0
    success_check_every: int = 20
    success_check_episodes: int = 128
    success_check_temperature: float = 0.5
    lora_rank: int = 0  # 0 = full fine-tuning
    lora_alpha: int = 16
    only_successful: bool = False  # keep only episodes the (noisy) expert solved
    # forward + backward under bf16 autocast on a CPU with bf16 instructions (weights,
    # grads and AdamW stay float32; a no-op elsewhere: ragen.models.precision). On the
    # dev CPU (avx512_bf16) 1.4x faster, the same loss for 16 steps, but in the demo's
    # 1,032-step Sokoban warm start the loss plateau lasted longer, so it is off by
    # default
    bf16: bool = False

    def validate(self) -> None:
        """Raise :class:`~ragen.errors.ConfigError` naming the option and the fix."""
        self.rollout.validate(prefix="rollout.")
        if not 1 <= self.actions_per_turn <= self.rollout.max_actions_per_turn:
            raise ConfigError(
                f"actions_per_turn={self.actions_per_turn} must be between 1 and "
                f"rollout.max_actions_per_turn={self.rollout.max_actions_per_turn} (the limit "
                "the prompt states). Fix: raise --max-actions-per-turn or lower --actions-per-turn"
            )
        for name in ("episodes", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.micro_token_budget < 0:
            raise ConfigError(
                f"micro_token_budget: padded tokens per micro-batch must be >= 0, got "
                f"{self.micro_token_budget}. Fix: e.g. 8192, or 0 (what fits in the free memory)"
            )
        if self.lora_rank < 0:  # else it would silently mean full fine-tuning
            raise ConfigError(
                f"lora_rank: must be >= 0 (0: full fine-tuning; N > 0: LoRA adapters of rank "
                f"N), got {self.lora_rank}. Fix: e.g. --lora-rank 8, or --lora-rank 0"
            )
        # `not a <= x` style checks: NaN fails them too (an inf/NaN lr trains NaN weights)
        if not 0 < self.lr < math.inf:
            raise ConfigError(
                f"lr: the learning rate must be a finite number > 0, got {self.lr}. "
                "Fix: e.g. --lr 5e-4 (the default)"
            )
        if not 0 <= self.fit_check < 1:
            raise ConfigError(
                f"fit_check: the share of the optimizer steps after which the fit is "
                f"checked must be in [0, 1), got {self.fit_check}. Fix: e.g. 0.5, or 0 (off)"
            )
        if not 0 <= self.fit_min_reply_accuracy <= 1 or self.fit_restarts < 0:
            raise ConfigError(
                f"fit_min_reply_accuracy must be in [0, 1] (got {self.fit_min_reply_accuracy}) "
                f"and fit_restarts >= 0 (got {self.fit_restarts}). Fix: e.g. 0.5 and 2"
            )
        if not 0 < self.adam_beta2 < 1:
            raise ConfigError(
                f"adam_beta2: must be in (0, 1), got {self.adam_beta2}. Fix: e.g. 0.95 or 0.999"
            )
        if not 0 <= self.weight_decay < math.inf:
            raise ConfigError(
                f"weight_decay: must be a finite number >= 0, got {self.weight_decay}. "
                "Fix: 0 turns it off"
            )
        if not 0 <= self.epsilon <= 1:
            raise ConfigError(
                f"epsilon: the share of expert actions made random must be in [0, 1], got "
                f"{self.epsilon}. Fix: e.g. --epsilon 0.1 (0: the expert's own actions)"
            )
        if self.labels not in SFT_LABELS:
            raise ConfigError(
                f"labels={self.labels!r} is not one of {', '.join(SFT_LABELS)}. Fix: labels=expert "
                "(the solver's move in every visited state) or labels=played (the move that ran)"
            )
        if self.labels == "expert" and self.epsilon > 0 and self.rollout.context_window != 0:
            raise ConfigError(
                f"labels=expert with epsilon={self.epsilon} needs rollout.context_window=0: "
                "each turn's reply is the expert's move while a random move may have run, so "
                "a sample that shows earlier replies would show moves that did not happen. "
                "Fix: --context-window 0 (each turn prompted with the current state alone; "
                "train the RL run on the same prompts with rollout.context_window=0), or "
                "--labels played, or --epsilon 0"
            )
        if not 0.0 <= self.warmup_frac < 1.0:
            raise ConfigError(f"warmup_frac must be in [0, 1), got {self.warmup_frac}")
        if self.max_seconds is not None and not 0 < self.max_seconds < float("inf"):
            raise ConfigError(f"max_seconds must be null or a number > 0, got {self.max_seconds}")
        if self.aux_reasoning is not None:
            if self.aux_reasoning not in REASONING_FORMATS:
                raise ConfigError(
                    f"aux_reasoning={self.aux_reasoning!r} is not a reply format; use one of "
                    f"{', '.join(REASONING_FORMATS)}"
                )
        if not 0 <= self.stop_at_success <= 1:
            raise ConfigError(
                f"stop_at_success: a share of the SFT states solved, in [0, 1], got "
                f"{self.stop_at_success}. Fix: e.g. 0.4, or 0 (train every epoch)"
            )
        if self.stop_at_success and (
            self.success_check_every < 1 or self.success_check_episodes < 1
        ):
            raise ConfigError(
                "success_check_every and success_check_episodes must be >= 1 with "
                f"stop_at_success (got {self.success_check_every}, "
                f"{self.success_check_episodes}). Fix: e.g. 20 and 128"
            )
        if not 0 <= self.success_check_temperature < math.inf:
            raise ConfigError(
                f"success_check_temperature must be a finite number >= 0, got "
                f"{self.success_check_temperature}. Fix: e.g. 0.5 (the evaluation's)"
            )
        if self.aux_episodes < 0:
            raise ConfigError(f"aux_episodes must be >= 0, got {self.aux_episodes}")
        if self.heldout_episodes < 0:
            raise ConfigError(f"heldout_episodes must be >= 0, got {self.heldout_episodes}")
        if not 0 <= self.end_fit_min_reply_accuracy <= 1 or self.end_fit_extra_epochs < 0:
            raise ConfigError(
                f"end_fit_min_reply_accuracy must be in [0, 1] (got "
                f"{self.end_fit_min_reply_accuracy}) and end_fit_extra_epochs >= 0 (got "
                f"{self.end_fit_extra_epochs}). Fix: e.g. 0.4 and 2, or 0 (off)"
            )
        if self.end_fit_min_reply_accuracy and not self.heldout_episodes:
            raise ConfigError(
                "end_fit_min_reply_accuracy reads the training slice's reply accuracy, which "
                "is measured beside the held-out slice. Fix: set heldout_episodes > 0 "
                "(e.g. 256), or end_fit_min_reply_accuracy=0"
            )
