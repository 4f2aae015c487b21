"""Training where the signal is: DAPO's dynamic sampling and a difficulty curriculum.

**Dynamic sampling** (Yu et al., 2025, arXiv 2503.14476). Under a group baseline (GRPO,
Dr.GRPO, RLOO, StarPO-S's outcome scores) a group whose episodes all agree, every one
solved or every one failed, has zero advantage: it costs a forward and backward pass
and teaches nothing. :func:`sample_informative` drops such groups and rolls out fresh
initial states (``EnvStateManager.seeds_for_step(step, draw=r)``) until the batch holds
``target`` informative groups or ``max_rounds`` refills are spent::

    informative(g) = |{ v(e) : e in g }| > 1,   v(e) = success(e) or episode_reward(e)

Round 0 is the step's ordinary rollout; its metrics (``rollout/*``) stay the step's, so a
run with and without dynamic sampling report success on the same kind of batch. The
cost is logged: ``sampling/rounds``, ``sampling/episodes`` (all rolled out),
``sampling/informative_frac`` (informative groups / groups rolled out) and
``sampling/filled_frac`` (informative groups kept / ``target``). When no round finds
one, the first round is trained on as it is (``sampling/fallback`` = 1): a critic can
still learn from it, and the run goes on.

**Curriculum** (:class:`Curriculum`). Training states are drawn no harder than a level
(``Env.difficulty``: Sokoban's optimal solution length, FrozenLake's 1 - the solver's
discounted chance of reaching the goal); the level rises by ``step`` once the mean
training success of the last ``window`` steps reaches ``advance_at``, up to ``stop``,
past which every state is drawn. Its state is saved with each checkpoint, so a resumed
run continues at the same level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ragen.agent.trajectory import Trajectory


def informative_groups(trajectories: Sequence[Trajectory], on: str = "success") -> set[int]:
    """Ids of the groups whose episodes differ in ``on`` (``success`` or ``reward``).
    A windowed episode's samples share its episode id and count once."""
    values: dict[int, dict[int, float]] = {}
    for t in trajectories:
        value = float(bool(t.success)) if on == "success" else float(t.episode_reward)
        values.setdefault(t.group_id, {})[t.episode_id] = value
    return {g for g, episodes in values.items() if len(set(episodes.values())) > 1}


def sample_informative(
    rollout_round: Callable[[int], Sequence[Trajectory]],
    target: int,
    group_size: int,
    on: str = "success",
    max_rounds: int = 3,
) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
    """Roll out rounds ``0, 1, ..`` (``rollout_round(r)``: ``target`` groups of fresh
    states, group ids ``0..target-1``) until ``target`` informative groups are kept.

    Returns ``(kept, first_round, metrics)``: the kept trajectories, renumbered so group
    ids run ``0..`` and episode ids stay unique; round 0's trajectories as rolled out
    (the step's ordinary rollout, for its metrics and logs); and the ``sampling/*``
    metrics. With no informative group in any round, ``kept`` is round 0 as it is.
    """
    kept: list[Trajectory] = []
    first: list[Trajectory] = []
    found = rolled = rounds = 0
    for r in range(max_rounds + 1):
        batch = list(rollout_round(r))
        rounds += 1
        if r == 0:
            first = batch
        groups = informative_groups(batch, on)
        rolled += len({t.group_id for t in batch})
        found += len(groups)
        for g in sorted(groups):
            if len({t.group_id for t in kept}) >= target:
                break
            new_group = len({t.group_id for t in kept})
            # copies: round 0's own trajectories keep their ids for the step's metrics
            kept += [
                replace(
                    t,
                    group_id=new_group,
                    episode_id=new_group * group_size + t.episode_id % group_size,
                )
                for t in batch
                if t.group_id == g
            ]
        if len({t.group_id for t in kept}) >= target:
            break
    n_kept = len({t.group_id for t in kept})
    metrics = {
        "sampling/rounds": float(rounds),
        "sampling/episodes": float(rolled * group_size),
        "sampling/informative_frac": found / max(rolled, 1),
        "sampling/filled_frac": n_kept / max(target, 1),
        "sampling/fallback": float(n_kept == 0),
    }
    return (kept if kept else first), first, metrics


@dataclass
class Curriculum:
    """The training states' difficulty level (``env.curriculum``), advanced by success."""

    start: float
    step: float = 1.0
    stop: float | None = None
    advance_at: float = 0.6
    window: int = 3
    level: float | None = None
    recent: list[float] = field(default_factory=list)  # training success, last steps

    def __post_init__(self) -> None:
        if self.level is None:
            self.level = self.start

    @property
    def max_difficulty(self) -> float | None:
        """The hardest state drawn now; None once the level is past ``stop`` (all states)."""
        if self.stop is not None and self.level > self.stop:
            return None
        return self.level

    def observe(self, success_rate: float) -> bool:
        """Record a step's training success; True when the level advanced."""
        if self.max_difficulty is None:
            return False
        self.recent = [*self.recent, float(success_rate)][-self.window :]
        if len(self.recent) == self.window and sum(self.recent) / self.window >= self.advance_at:
            self.level += self.step
            self.recent = []
            return True
        return False

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (JSON)."""
        return {"level": self.level, "recent": list(self.recent)}

    def restore(self, state: dict[str, Any] | None) -> None:
        if state:
            self.level = float(state["level"])
            self.recent = [float(v) for v in state.get("recent", [])]
