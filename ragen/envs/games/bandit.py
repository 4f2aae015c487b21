"""Two-armed bandit with semantically named arms (single turn).

One arm is low-risk (always pays ``low_payout``, 0.15 by default as in the RAGEN
paper), the other high-risk (pays ``high_payout`` = 1.0 with probability
``high_prob`` = 0.25, else 0). The names carry the hint: in the training pair
Phoenix is the safe arm and Dragon the risky one. Since 0.25 > 0.15 the risky arm is
the better bet. The model must infer that from the names alone: the instructions do
not reveal the payoffs.

* ``bandit``: the train pair (Phoenix, Dragon).
* ``bandit_test``: other (safe, risky) name pairs, one chosen per seed.
* ``bandit_reversed``: names swapped against their meaning (the safe-sounding arm
  is the risky one).

Which name is shown first is random per seed. The payout is drawn from the env's own
RNG, so every trajectory draws its own outcome even when a group shares the seed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from ragen.errors import EnvOptionError

from ..base import Env, StepResult, derive_seed, make_info

#: (safe-sounding, risky-sounding) name pairs
TRAIN_PAIRS: tuple[tuple[str, str], ...] = (("Phoenix", "Dragon"),)
TEST_PAIRS: tuple[tuple[str, str], ...] = (
    ("Turtle", "Tiger"),
    ("Shield", "Sword"),
    ("Anchor", "Rocket"),
    ("Oak", "Lightning"),
    ("Vault", "Casino"),
    ("Lighthouse", "Volcano"),
    ("Shepherd", "Gambler"),
    ("Granite", "Wildfire"),
)

PAIR_SETS = {"train": TRAIN_PAIRS, "test": TEST_PAIRS}


class BanditEnv(Env):
    """Pick one of two named arms; one response ends the episode.

    Config:
        arm_pairs: ``"train"`` (Phoenix/Dragon), ``"test"`` (the held-out pairs) or a list
            ``[(safe_name, risky_name), ...]``; one pair is chosen per seed.
        reversed_semantics: give the risky payout to the safe-sounding name.
        low_payout: the low-risk arm's fixed payout.
        high_payout: the high-risk arm's payout when it hits.
        high_prob: the high-risk arm's hit probability.
    """

    description = "Two-armed bandit: pick Phoenix or Dragon from the names alone (single turn)"
    single_turn = True

    def __init__(
        self,
        arm_pairs: str | Sequence[Sequence[str]] = "train",
        reversed_semantics: bool = False,
        low_payout: float = 0.15,
        high_payout: float = 1.0,
        high_prob: float = 0.25,
    ) -> None:
        super().__init__()
        if isinstance(arm_pairs, str):
            if arm_pairs not in PAIR_SETS:
                raise EnvOptionError(
                    f"arm_pairs={arm_pairs!r}; use {' or '.join(map(repr, PAIR_SETS))} or a list "
                    "of (safe_name, risky_name) pairs"
                )
            arm_pairs = PAIR_SETS[arm_pairs]
        pairs = [tuple(str(n) for n in pair) for pair in arm_pairs]
        if not pairs or any(len(p) != 2 for p in pairs):
            raise EnvOptionError("arm_pairs must be a non-empty list of (safe_name, risky_name)")
        for a, b in pairs:
            if a.lower() == b.lower() or not a.strip() or not b.strip():
                raise EnvOptionError(f"arm pair {(a, b)} needs two different, non-empty names")
        if not 0.0 <= high_prob <= 1.0:
            raise EnvOptionError(f"high_prob={high_prob} must be a probability in [0, 1]")
        self.arm_pairs = pairs
        self.reversed_semantics = bool(reversed_semantics)
        self.low_payout = float(low_payout)
        self.high_payout = float(high_payout)
        self.high_prob = float(high_prob)
        self._set_arms(pairs[0], swap=False)
        self._pulled: str | None = None
        self._payout = 0.0

    def _set_arms(self, pair: tuple[str, str], swap: bool) -> None:
        safe_name, risky_name = pair
        if self.reversed_semantics:
            safe_name, risky_name = risky_name, safe_name
        self.low_arm, self.high_arm = safe_name, risky_name  # low-risk / high-risk arm names
        self.shown = [risky_name, safe_name] if swap else [safe_name, risky_name]

    # -- episode ---------------------------------------------------------------------------
    def _reset(self, seed: int) -> None:
        rng = random.Random(derive_seed("bandit-arms", seed))
        pair = self.arm_pairs[rng.randrange(len(self.arm_pairs))]
        self._set_arms(pair, swap=rng.random() < 0.5)
        self._pulled = None
        self._payout = 0.0

    def _step(self, action: str) -> StepResult:
        chosen = next((name for name in self.shown if name.lower() == action), None)
        if chosen is None:
            return self.render("text"), 0.0, False, False, make_info(False, False, False)
        if chosen == self.high_arm:
            payout = self.high_payout if self.rng.random() < self.high_prob else 0.0
        else:
            payout = self.low_payout
        self._pulled, self._payout = chosen, payout
        best = chosen == self.oracle_arm
        info = make_info(
            True, True, best, arm=chosen, high_risk=chosen == self.high_arm, payout=payout
        )
        return self.render("text"), payout, True, False, info  # the one pull ends the MDP

    # -- views --------------------------------------------------------------------------------
    @property
    def oracle_arm(self) -> str:
        """The arm with the higher expected payout (ties go to the low-risk arm)."""
        high_mean = self.high_prob * self.high_payout
        return self.high_arm if high_mean > self.low_payout else self.low_arm

    @property
    def action_names(self) -> list[str]:
        return list(self.shown)

    def snapshot(self) -> object:
        return (tuple(self.shown), self._pulled, self._payout, self.done)

    @property
    def instructions(self) -> str:
        return (
            "You are playing a two-armed bandit. You will see two arms, each with a name. "
            "Each arm has its own reward distribution, related to the meaning of its name. "
            "Pull the arm you believe gives the higher reward on average; you get one pull.\n"
            "Answer with exactly one arm name as shown (case does not matter), e.g. "
            f"'{self.shown[0]}'."
        )

    def state_key(self) -> None:
        """No state split: the bandit has only a few initial states (two names in two
        orders); its held-out test is other arm names (``val_config``), not other states."""
        return None

    def render(self, mode: str = "text") -> str | np.ndarray:
        if mode != "text":
            raise self._unsupported_mode(mode)
        if self._pulled is None:
            return (
                f"There are two arms: {self.shown[0]} and {self.shown[1]}. "
                f"Which arm do you pull? Answer {self.shown[0]} or {self.shown[1]}."
            )
        return f"You pulled {self._pulled} and received {self._payout:g}."

    def oracle_action(self) -> str | None:
        return None if self.done else self.oracle_arm
