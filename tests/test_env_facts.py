"""State facts and world-model predictions of the grid envs (FrozenLake, Sokoban).

Hand-built maps and rooms with hand-written facts, then properties over many seeds:
``predict_facts`` agrees with stepping a deterministic env, never changes the env (nor
FrozenLake's RNG), and the facts round-trip through ``parse_facts``.
"""

from __future__ import annotations

import random

import pytest

from ragen.envs import make
from ragen.envs.facts import Fact, format_facts, parse_facts
from ragen.envs.games.frozen_lake import FrozenLakeEnv
from ragen.envs.games.sokoban import SokobanEnv, parse_levels

# a few strings no env reads as an action: they must be no-ops in predictions too
GARBAGE = ("jump", "", "up up", "north", "<answer>", "7")


def facts(text: str) -> list[Fact]:
    """Hand-written expected facts, in the facts grammar."""
    parsed = parse_facts(text, ("player", "goal", "hole", "box", "target"))
    assert parsed.ok, parsed.error
    return parsed.facts


def lake(desc: list[str], p: float = 1.0) -> FrozenLakeEnv:
    env = FrozenLakeEnv(desc=desc, p=p)
    env.reset(0)
    return env


def room(level: str) -> SokobanEnv:
    env = SokobanEnv(levels=parse_levels(level))
    env.reset(0)
    return env


def random_actions(rng: random.Random, names: list[str], n: int) -> list[str]:
    """Action names, their aliases in any case, and garbage, mixed."""
    pool = list(names) + [n[0].upper() for n in names] + [f" {n.upper()} " for n in names]
    return [rng.choice(GARBAGE) if rng.random() < 0.15 else rng.choice(pool) for _ in range(n)]


# -- FrozenLake ---------------------------------------------------------------------------
def test_frozen_lake_kinds():
    env = make("frozen_lake")
    assert env.fact_kinds == ("player", "goal", "hole")
    assert env.prediction_kinds == ("player",)


def test_frozen_lake_state_facts_by_hand():
    # holes up and left of the player; the diagonal hole (0,0) and the far one do not count
    env = lake(["HHF", "HSF", "FFG", "FFH"])
    assert env.state_facts() == facts("player (1,1); goal (2,2); hole (0,1); hole (1,0)")
    # in a corner only the neighbours inside the map count
    env = lake(["SH", "HG"])
    assert env.state_facts() == facts("player (0,0); goal (1,1); hole (0,1); hole (1,0)")
    # no adjacent hole: player and goal only
    env = lake(["SFH", "FFF", "HFG"])
    assert format_facts(env.state_facts()) == "player (0,0); goal (2,2)"


def test_frozen_lake_state_facts_in_a_hole_and_on_the_goal():
    env = lake(["SHF", "FFG"])
    env.step("right")  # into the hole at (0,1); its neighbours (0,0), (0,2), (1,1) are ice
    assert env.terminated and not env.success
    assert env.state_facts() == facts("player (0,1); goal (1,2)")
    env = lake(["SGH"])
    env.step("right")
    assert env.success
    assert env.state_facts() == facts("player (0,1); goal (0,1); hole (0,2)")


def test_frozen_lake_predict_by_hand():
    env = lake(["SFFF", "FHFH", "FFFH", "HFFG"])
    assert env.predict_facts([]) == facts("player (0,0)")
    assert env.predict_facts(["right", "right", "down"]) == facts("player (1,2)")
    # aliases in any case, garbage is a no-op, the edge of the map leaves you in place
    assert env.predict_facts(["R", "jump", "u", " UP ", "left"]) == facts("player (0,0)")
    assert env.predict_facts(["r", "r", " D ", "Down", "l"]) == facts("player (2,1)")
    # the prediction stops in the first hole: later moves do not get out of it
    assert env.predict_facts(["right", "down", "down", "right"]) == facts("player (1,1)")
    # and at the goal
    env = lake(["SG", "FF"])
    assert env.predict_facts(["right", "down", "left"]) == facts("player (0,1)")


def test_frozen_lake_predict_after_the_end_moves_nothing():
    env = lake(["SHF", "FFG"])
    env.step("right")
    assert env.done
    assert env.predict_facts(["down", "right"]) == facts("player (0,1)")


@pytest.mark.parametrize("name", ["frozen_lake_det", "frozen_lake"])
def test_frozen_lake_predict_matches_deterministic_steps(name):
    """With p = 1, stepping the actions one by one ends where the prediction says."""
    rng = random.Random(0)
    env = make(name, p=1.0)
    for seed in range(60):
        actions = random_actions(rng, env.action_names, rng.randint(0, 12))
        env.reset(seed)
        predicted = env.predict_facts(actions)
        for action in actions:
            env.step(action)
        assert predicted == [Fact("player", *env.position)], (seed, actions)


def test_frozen_lake_stochastic_prediction_is_the_intended_outcome():
    """On slippery ice the prediction is the move as intended, whatever the slip drew."""
    env = FrozenLakeEnv(desc=["FFFFF", "FFFFF", "FFSFF", "FFFFF", "GFFFF"], p=0.5)
    seen = set()
    for rng_seed in range(40):
        env.reset(0, rng_seed=rng_seed)
        assert env.predict_facts(["up", "right"]) == facts("player (1,3)")
        env.step("up")
        env.step("right")
        seen.add(env.position)
    assert len(seen) > 1  # the real outcomes did vary: the prediction ignored the slips


def test_frozen_lake_predict_changes_nothing():
    env = make("frozen_lake", p=0.5)
    rng = random.Random(1)
    for seed in range(20):
        env.reset(seed, rng_seed=seed)
        env.step("down")
        before = (env.snapshot(), env.render("text"), env.rng.getstate())
        env.predict_facts(random_actions(rng, env.action_names, 10))
        assert (env.snapshot(), env.render("text"), env.rng.getstate()) == before


# -- Sokoban ------------------------------------------------------------------------------
# targets at (1,1) (the player on it), (2,2) (a box on it) and (2,4)
THREE_BOXES = "######\n#+$  #\n# *$.#\n#    #\n######"


def test_sokoban_kinds():
    env = make("sokoban")
    assert env.fact_kinds == ("player", "box", "target")
    assert env.prediction_kinds == ("player", "box")


def test_sokoban_state_facts_by_hand():
    env = room(THREE_BOXES)
    assert env.state_facts() == facts(
        "player (1,1); box (1,2); box (2,2); box (2,3); target (1,1); target (2,2); target (2,4)"
    )
    env = room("#####\n#@  #\n##$ #\n#  .#\n#####")
    assert format_facts(env.state_facts()) == "player (1,1); box (2,2); target (3,3)"


def test_sokoban_predict_by_hand():
    env = room(THREE_BOXES)
    # walls block; garbage is a no-op; "R" pushes the box at (1,2) onto the free (1,3)
    assert env.predict_facts(["up", "left", "jump", "R"]) == facts(
        "player (1,2); box (1,3); box (2,2); box (2,3)"
    )
    # down, down, right to (3,2); up would push (2,2) into the box at (1,2): blocked
    assert env.predict_facts(["down", "down", "right", "up"]) == facts(
        "player (3,2); box (1,2); box (2,2); box (2,3)"
    )
    # from (3,3), up pushes the box (2,3) to (1,3): boxes come out sorted
    assert env.predict_facts(["d", "d", "r", "r", "u"]) == facts(
        "player (2,3); box (1,2); box (1,3); box (2,2)"
    )
    assert env.state_facts()[0] == Fact("player", 1, 1)  # the env did not move


def test_sokoban_predict_stops_once_solved():
    env = room("#####\n#@$.#\n#   #\n#####")
    # the push solves the room: the following moves are never played
    assert env.predict_facts(["right", "left", "down"]) == facts("player (1,2); box (1,3)")
    env.step("right")
    assert env.done
    assert env.predict_facts(["left"]) == facts("player (1,2); box (1,3)")


@pytest.mark.parametrize("name", ["sokoban", "sokoban_large", "sokoban_symbols"])
def test_sokoban_predict_matches_steps(name):
    rng = random.Random(2)
    env = make(name)
    for seed in range(40):
        actions = random_actions(rng, env.action_names, rng.randint(0, 20))
        env.reset(seed)
        predicted = env.predict_facts(actions)
        for action in actions:
            env.step(action)
        assert predicted == env.state_facts()[: 1 + env.num_boxes], (seed, actions)


def test_sokoban_predict_changes_nothing():
    env = make("sokoban_large")
    rng = random.Random(3)
    for seed in range(20):
        env.reset(seed)
        env.step("left")
        before = (env.snapshot(), env.render("text"), env.room)
        env.predict_facts(random_actions(rng, env.action_names, 15))
        assert (env.snapshot(), env.render("text"), env.room) == before


# -- both ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["frozen_lake", "frozen_lake_det", "sokoban", "sokoban_large", "sokoban_symbols"]
)
def test_facts_round_trip_through_parse_facts(name):
    env = make(name)
    rng = random.Random(4)
    for seed in range(25):
        env.reset(seed)
        for _ in range(rng.randint(0, 6)):
            if not env.done:
                env.step(env.random_action(rng))
        truth = env.state_facts()
        parsed = parse_facts(format_facts(truth), env.fact_kinds)
        assert parsed.ok and parsed.facts == truth
        predicted = env.predict_facts(random_actions(rng, env.action_names, 4))
        assert {f.kind for f in predicted} <= set(env.prediction_kinds)
        parsed = parse_facts(format_facts(predicted), env.prediction_kinds)
        assert parsed.ok and parsed.facts == predicted
        # canonical order: sorted within each kind, kinds in the order of fact_kinds
        order = [env.fact_kinds.index(f.kind) for f in truth]
        assert order == sorted(order) and truth[0].kind == "player"
        for kind in env.fact_kinds:
            cells = [f for f in truth if f.kind == kind]
            assert cells == sorted(cells)
