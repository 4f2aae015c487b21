"""Advantage estimators in one place: the GAE family, the outcome-based family and the registry.

=====================  ==========================  ======  =========  =========
name                   function                    critic  turn ends  group ids
=====================  ==========================  ======  =========  =========
gae                    compute_gae                 yes     no         no
masked_gae             compute_masked_gae          yes     no         no
bi_level_gae           compute_bi_level_gae        yes     yes        no
turn_gae               compute_turn_gae            yes     yes        no
grpo                   compute_grpo                no      no         yes
drgrpo                 compute_drgrpo              no      no         yes
rloo                   compute_rloo                no      no         yes
reinforce_plus_plus    compute_reinforce_plus_plus no      no         no
=====================  ==========================  ======  =========  =========

See ``ragen.algo.registry`` for the uniform calling convention.
"""

from ragen.algo.gae import compute_bi_level_gae, compute_gae, compute_masked_gae, compute_turn_gae
from ragen.algo.outcome import (
    compute_drgrpo,
    compute_grpo,
    compute_reinforce_plus_plus,
    compute_rloo,
    sequence_scores,
)
from ragen.algo.registry import (
    AdvantageEstimator,
    get_advantage_estimator,
    list_advantage_estimators,
    needs_critic,
    needs_index,
    needs_turn_ends,
    register_advantage_estimator,
)

__all__ = [
    "compute_gae",
    "compute_masked_gae",
    "compute_bi_level_gae",
    "compute_turn_gae",
    "compute_grpo",
    "compute_drgrpo",
    "compute_rloo",
    "compute_reinforce_plus_plus",
    "sequence_scores",
    "AdvantageEstimator",
    "register_advantage_estimator",
    "get_advantage_estimator",
    "list_advantage_estimators",
    "needs_critic",
    "needs_turn_ends",
    "needs_index",
]
