"""Reasoning formats (ragen.agent.reasoning): strict structured thoughts, canonical
replies, prompt text, and the thought/answer consistency rule."""

from __future__ import annotations

import random

import pytest

from ragen.agent.reasoning import (
    REASONING_FORMATS,
    SECTIONS,
    check_env_supports,
    check_format,
    clean_text,
    committed_actions,
    compact_reply_shape,
    format_guide,
    format_reply,
    format_response,
    has_think,
    is_consistent,
    is_structured,
    needs_facts,
    parse_reply,
    parse_response,
    reply_shape,
    thought_commitment,
)

MOVES = ["up", "down", "left", "right"]
TEXTS = {
    "thought": "The box is left of me; push it.",
    "observation": "player (2,3); box (2,2); target (2,1)",
    "plan": "The box must go left, so I move left.",
    "prediction": "player (2,2); box (2,1)",
}


def _reply(fmt: str, actions=("left",)) -> str:
    return format_reply(list(actions), fmt, **TEXTS)


# -- the format table --------------------------------------------------------------------


def test_format_table_and_helpers():
    assert REASONING_FORMATS == (
        "no_think",
        "free_think",
        "grounding",
        "world_modeling",
        "grounding_world_modeling",
    )
    assert set(SECTIONS) == set(REASONING_FORMATS)
    assert [has_think(f) for f in REASONING_FORMATS] == [False, True, True, True, True]
    assert [is_structured(f) for f in REASONING_FORMATS] == [False, False, True, True, True]
    assert [needs_facts(f) for f in REASONING_FORMATS] == [False, False, True, True, True]
    assert check_format("grounding") == "grounding"
    with pytest.raises(ValueError, match="no_think, free_think, grounding"):
        check_format("grounded")
    with pytest.raises(ValueError, match="unknown reasoning format"):
        has_think("think")
    check_env_supports("free_think", ())
    check_env_supports("grounding", ("player",))
    with pytest.raises(ValueError, match="'bandit' has no state checker.*free_think or no_think"):
        check_env_supports("world_modeling", (), "bandit")


# -- well-formed replies -----------------------------------------------------------------


@pytest.mark.parametrize("fmt", REASONING_FORMATS)
@pytest.mark.parametrize("actions", [["left"], ["up", "Left", "push up"]])
def test_round_trip_every_format(fmt, actions):
    text = _reply(fmt, actions)
    parsed = parse_reply(text, fmt)
    assert parsed.format_ok and parsed.error == ""
    assert parsed.actions == actions
    want = {"observation": TEXTS["observation"], "reasoning": TEXTS["plan"]}
    want["prediction"] = TEXTS["prediction"]
    assert parsed.sections == {s: want[s] for s in SECTIONS[fmt]}
    if fmt == "free_think":
        assert parsed.thought == TEXTS["thought"]
    if fmt == "no_think":
        assert parsed.thought == ""


def test_canonical_replies_exactly():
    assert format_reply(["up"], "no_think") == "<answer>up</answer>"
    assert format_reply(["up", "left"], "free_think", ";", thought="t") == (
        "<think>t</think><answer>up ; left</answer>"
    )
    assert format_reply(["up"], "grounding", observation=" o ", plan="p", prediction="x") == (
        "<think><observation>o</observation><reasoning>p</reasoning></think><answer>up</answer>"
    )
    assert format_reply(["up"], "grounding_world_modeling", observation="o", plan="p",
                        prediction="x") == (
        "<think><observation>o</observation><reasoning>p</reasoning>"
        "<prediction>x</prediction></think><answer>up</answer>"
    )  # fmt: skip
    # free_think / no_think replies are exactly the old format_response
    assert format_reply(["a", "b"], "free_think", thought="t") == format_response(["a", "b"], "t")
    assert format_reply(["a"], "no_think") == format_response(["a"], think=False)


def test_format_reply_refuses_an_empty_needed_section():
    with pytest.raises(ValueError, match="needs a non-empty observation"):
        format_reply(["up"], "grounding", plan="p")
    with pytest.raises(ValueError, match="needs a non-empty plan"):
        format_reply(["up"], "world_modeling", prediction="player (1,1)", plan="  ")
    with pytest.raises(ValueError, match="unknown reasoning format"):
        format_reply(["up"], "deep_think")
    # sections a format does not have are ignored
    assert "prediction" not in format_reply(["up"], "grounding", observation="o", plan="p",
                                            prediction="x")  # fmt: skip


def test_whitespace_around_and_between_sections_is_fine():
    text = (
        " \n<think>\n  <observation> player (1,1) </observation>\n\t"
        "<reasoning>\ngo up\n</reasoning>\n</think>\n<answer> up </answer>\n"
    )
    parsed = parse_reply(text, "grounding")
    assert parsed.format_ok, parsed.error
    assert parsed.sections == {"observation": "player (1,1)", "reasoning": "go up"}


def test_custom_separator():
    parsed = parse_reply(_reply("world_modeling").replace("left", "left ; up", 1), "no_think")
    assert not parsed.format_ok  # world_modeling reply under no_think
    text = format_reply(["up", "left"], "world_modeling", ";", plan="p up left", prediction="x")
    assert parse_reply(text, "world_modeling", ";").actions == ["up", "left"]


# -- malformed replies: each with its precise error --------------------------------------

OBS, REA, PRE = (
    "<observation>player (1,1)</observation>",
    "<reasoning>go up</reasoning>",
    "<prediction>player (0,1)</prediction>",
)


def _wrap(thought: str, answer: str = "up") -> str:
    return f"<think>{thought}</think><answer>{answer}</answer>"


@pytest.mark.parametrize(
    "fmt, text, error",
    [
        # rule 1: a section the format does not have
        ("grounding", _wrap(OBS + REA + PRE),
         "unexpected <prediction> in the thought (format grounding)"),
        ("world_modeling", _wrap(OBS + REA + PRE),
         "unexpected <observation> in the thought (format world_modeling)"),
        ("grounding", _wrap(OBS + "<reasoning>go up</prediction></reasoning>"),
         "unexpected </prediction> in the thought (format grounding)"),
        # rule 2: each tag exactly once
        ("grounding", _wrap(REA), "missing <observation> in the thought (format grounding)"),
        ("grounding_world_modeling", _wrap(OBS + REA),
         "missing <prediction> in the thought (format grounding_world_modeling)"),
        ("grounding", _wrap("<observation>player (1,1)" + REA),
         "missing </observation> in the thought (format grounding)"),
        ("grounding", _wrap(OBS + OBS + REA),
         "<observation> appears 2 times in the thought (format grounding)"),
        ("world_modeling", _wrap(REA + "<prediction><prediction>x</prediction></prediction>"),
         "<prediction> appears 2 times in the thought (format world_modeling)"),
        # rule 3: order, no nesting
        ("grounding", _wrap(REA + OBS),
         "<reasoning> out of order or nested in the thought (format grounding); "
         "the order is observation, reasoning"),
        ("grounding", _wrap("<observation>x" + REA + "</observation>"),
         "<reasoning> out of order or nested in the thought (format grounding); "
         "the order is observation, reasoning"),
        ("grounding_world_modeling", _wrap(OBS + PRE + REA),
         "<prediction> out of order or nested in the thought (format "
         "grounding_world_modeling); the order is observation, reasoning, prediction"),
        ("grounding", _wrap("</observation>x<observation>" + REA),
         "<observation> out of order or nested in the thought (format grounding); "
         "the order is observation, reasoning"),
        # rule 4: only whitespace outside the sections
        ("grounding", _wrap("Sure. " + OBS + REA),
         "text outside the sections in the thought (format grounding) (before <observation>)"),
        ("grounding", _wrap(OBS + " so " + REA),
         "text outside the sections in the thought (format grounding) "
         "(between </observation> and <reasoning>)"),
        ("world_modeling", _wrap(REA + PRE + "done"),
         "text outside the sections in the thought (format world_modeling) "
         "(after </prediction>)"),
        # rule 5: non-empty sections
        ("grounding", _wrap("<observation> \n </observation>" + REA),
         "empty <observation> section in the thought (format grounding)"),
        ("world_modeling", _wrap(REA + "<prediction></prediction>"),
         "empty <prediction> section in the thought (format world_modeling)"),
        # no section tag in the answer
        ("grounding", _wrap(OBS + REA, "<reasoning>up</reasoning>"),
         "unexpected <reasoning> in the answer (format grounding)"),
        ("grounding", _wrap(OBS + REA, "up </prediction>"),
         "unexpected </prediction> in the answer (format grounding)"),
        # outer rules still come first
        ("grounding", OBS + REA + "<answer>up</answer>", "missing <think>"),
        ("grounding", "<think>" + OBS + REA + "</think> ok <answer>up</answer>",
         "text outside the tags"),
        ("grounding", "<think>" + OBS + "</think>" + REA + "<answer>up</answer>",
         "text outside the tags"),
        ("grounding", _wrap(OBS + REA, " || "), "empty answer"),
        ("grounding", _wrap(""), "missing <observation> in the thought (format grounding)"),
        # section tags in no_think: outside the answer block they are outside text
        ("no_think", OBS + "<answer>up</answer>", "text outside the tags"),
        ("no_think", _wrap(OBS + REA), "unexpected <think> (think=False)"),
        # tags are lower case and literal
        ("grounding", _wrap("<Observation>x</Observation>" + REA),
         "missing <observation> in the thought (format grounding)"),
        ("grounding", _wrap(OBS + "<REASONING>up</REASONING>"),
         "missing <reasoning> in the thought (format grounding)"),
        ("grounding", _wrap("<observation >x</observation>" + REA),
         "missing <observation> in the thought (format grounding)"),
    ],
)  # fmt: skip
def test_malformed_replies_execute_nothing(fmt, text, error):
    parsed = parse_reply(text, fmt)
    assert not parsed.format_ok
    assert parsed.actions == [] and parsed.sections == {}
    assert parsed.error == error


def test_malformed_keeps_the_best_effort_thought():
    parsed = parse_reply(_wrap(REA + OBS), "grounding")
    assert not parsed.format_ok and parsed.thought == REA + OBS


def test_free_think_and_no_think_are_the_old_parses():
    # a free thought may hold anything, section tags included
    for thought in (OBS, REA + REA, "<observation>", PRE + OBS + "text", "</reasoning>"):
        parsed = parse_reply(_wrap(thought), "free_think")
        assert parsed.format_ok and parsed.thought == thought and parsed.sections == {}
    rng = random.Random(0)
    pieces = ["<think>", "</think>", "<answer>", "</answer>", OBS, REA, PRE, "up", "||", " ", "x"]
    for _ in range(500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert parse_reply(text, "free_think") == parse_response(text, think=True)
        assert parse_reply(text, "no_think") == parse_response(text, think=False)


# -- adversarial inputs --------------------------------------------------------------------


def test_tags_inside_sections_and_answer():
    # a think/answer tag inside a section breaks the outer format
    bad = parse_reply(_wrap(OBS + "<reasoning>say <answer>up</answer></reasoning>"), "grounding")
    assert not bad.format_ok and bad.error == "<answer> appears 2 times"
    # other tags (not section tags) inside a section are plain text
    ok = parse_reply(_wrap(OBS + "<reasoning><b>up</b> <plan>x</plan></reasoning>"), "grounding")
    assert ok.format_ok and ok.sections["reasoning"] == "<b>up</b> <plan>x</plan>"


def test_unicode_huge_and_undecodable_text():
    plan = "Gehe nach oben ⬆️ 中文 🙂 \u202e " * 3
    text = format_reply(["up"], "grounding", observation="player (1,1)", plan=plan)
    assert parse_reply(text, "grounding").sections["reasoning"] == plan.strip()
    huge = "x" * 1_000_000 + " up"
    text = format_reply(["up"], "world_modeling", plan=huge, prediction="player (0,0)")
    parsed = parse_reply(text, "world_modeling")
    assert parsed.format_ok and len(parsed.sections["reasoning"]) == len(huge)
    lone = format_reply(["up"], "grounding", observation="player (1,1)", plan="go \ud800 up")
    for text in (lone, clean_text(lone)):
        parsed = parse_reply(text, "grounding")
        assert not parsed.format_ok and parsed.actions == []
        assert parsed.error == "undecodable text (U+FFFD or a lone surrogate)"


def test_fuzz_structured_parse_never_raises():
    rng = random.Random(1)
    pieces = [
        "<think>", "</think>", "<answer>", "</answer>", "<observation>", "</observation>",
        "<reasoning>", "</reasoning>", "<prediction>", "</prediction>", "up", " ", "||",
        "player (1,1)", "\n", "🙂",
    ]  # fmt: skip
    n_ok = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        for fmt in REASONING_FORMATS:
            parsed = parse_reply(text, fmt)
            if parsed.format_ok:
                n_ok += 1
                assert parsed.actions and set(parsed.sections) == set(SECTIONS[fmt])
                assert all(parsed.sections.values())
                again = parse_reply(
                    format_reply(parsed.actions, fmt, thought=parsed.thought,
                                 observation=parsed.sections.get("observation", ""),
                                 plan=parsed.sections.get("reasoning", ""),
                                 prediction=parsed.sections.get("prediction", "")),
                    fmt,
                )  # fmt: skip
                assert again.actions == parsed.actions and again.sections == parsed.sections
            else:
                assert parsed.actions == [] and parsed.sections == {} and parsed.error
    assert n_ok > 0


# -- prompt text ---------------------------------------------------------------------------


def test_reply_shapes():
    assert reply_shape("no_think") == "<answer>action1 || action2</answer>"
    assert reply_shape("free_think", ";") == (
        "<think>your reasoning</think><answer>action1 ; action2</answer>"
    )
    assert reply_shape("grounding") == (
        "<think><observation>the facts of the current state</observation>"
        "<reasoning>your plan</reasoning></think><answer>action1 || action2</answer>"
    )
    assert compact_reply_shape("free_think") == "<think>...</think><answer>...</answer>"
    assert compact_reply_shape("no_think") == "<answer>...</answer>"
    assert compact_reply_shape("world_modeling") == (
        "<think><reasoning>...</reasoning><prediction>...</prediction></think><answer>...</answer>"
    )
    for fmt in REASONING_FORMATS:
        for shape in (reply_shape(fmt), compact_reply_shape(fmt)):
            assert "\n" not in shape
            for s in ("observation", "reasoning", "prediction"):
                assert (f"<{s}>" in shape) == (s in SECTIONS[fmt])


def test_format_guide():
    kinds, moving = ("player", "box", "target"), ("player", "box")
    assert format_guide("no_think", kinds, moving) == ""
    assert format_guide("free_think", (), ()) == ""
    g = format_guide("grounding_world_modeling", kinds, moving)
    assert "<observation>" in g and "<prediction>" in g and "<reasoning>" in g
    assert "player, box, target" in g and "kind (row,col)" in g and '"; "' in g
    assert "e.g. player (2,3); box (3,3)" in g
    assert "names your chosen action(s) last" in g
    assert "<prediction>" not in format_guide("grounding", kinds, moving)
    w = format_guide("world_modeling", ("player", "hole", "goal"), ("player",))
    assert "<observation>" not in w and "kinds player after your actions" in w
    assert "e.g. player (2,3)." in w
    with pytest.raises(ValueError, match="state checker"):
        format_guide("grounding", (), ())
    with pytest.raises(ValueError, match="prediction_kinds"):
        format_guide("world_modeling", kinds, ())


# -- consistency ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, names, committed",
    [
        ("The best next action from this state is right.", MOVES, ["right"]),
        ("Up is a wall, Left is a hole; go DOWN.", MOVES, ["up", "left", "down"]),
        ("Move upward, then rightwards, uplift", MOVES, []),
        ("up-left then right.", MOVES, ["up", "left", "right"]),
        ("I will push   Up\nthen up", ["up", "push up"], ["push up", "up"]),
        ("no moves named here", MOVES, []),
        ("", MOVES, []),
        ("go up", None, []),
        ("go up", [], []),
        ("_up up_ up2 (up)", MOVES, ["up"]),
    ],
)
def test_committed_actions(text, names, committed):
    assert committed_actions(text, names) == committed


@pytest.mark.parametrize(
    "text, actions, consistent",
    [
        ("The best next action from this state is right.", ["right"], True),
        ("The best next action from this state is right.", ["Right"], True),
        ("The best next action from this state is right.", ["left"], False),
        ("Up is blocked, so I go left.", ["left"], True),
        ("I go left, not up.", ["left"], False),  # lexical: the last named is up
        ("First up, then left.", ["up", "left"], True),
        ("First up, then left.", ["left", "up"], False),
        ("First up, then left.", ["left"], True),  # a suffix of the plan
        ("Go left.", ["up", "left"], False),  # the answer is longer than the plan
        ("Nothing to say.", ["up"], False),  # the thought names no action
        ("Go up.", [], False),
        ("Go upward.", ["up"], False),
        ("Go up.", ["jump"], False),  # not an action of the env
        ("go  Up", [" UP "], True),
    ],
)
def test_is_consistent(text, actions, consistent):
    assert is_consistent(text, actions, MOVES) is consistent


def test_thought_commitment():
    g = parse_reply(_reply("grounding"), "grounding")
    assert thought_commitment(g, "grounding") == TEXTS["plan"]
    f = parse_reply(_reply("free_think"), "free_think")
    assert thought_commitment(f, "free_think") == TEXTS["thought"]
    n = parse_reply(_reply("no_think"), "no_think")
    assert thought_commitment(n, "no_think") == ""
    bad = parse_reply(_wrap(REA + OBS), "grounding")
    assert thought_commitment(bad, "grounding") == ""
