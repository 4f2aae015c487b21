"""Does the thought carry the decision? Replays logged episodes and compares, per turn,
the action the thought commits to, the answer, and the expert's action.

    .venv/bin/python -m experiments.thought_decision.run runs/reasoning/sokoban/grounding_world_modeling/seed0/sokoban/rl_outcome/trajectories/val_step_000040.jsonl

For every well-formed turn of a trajectories file (``trajectories/*.jsonl`` of a run):
the committed action (the last action named in the ``<reasoning>`` section, or in the
whole thought for ``free_think``), the answer's first action, and the solver's action
in the state the turn answered (replayed from the episode's seed and executed actions;
exact for deterministic envs, so Sokoban and ``frozen_lake_det``; for slippery
FrozenLake the replay needs the episode's own dynamics seed, which is not logged, so
only turn 0 is scored). Prints the shares: thought = answer, thought = expert, answer =
expert, and answer = expert among turns where thought != answer; with a
``<prediction>``, whether it states the intended outcome of the answer or of the plan.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import ragen.envs as envs
from ragen.agent.reasoning import SECTIONS, committed_actions, parse_reply


def _reasoning_text(response: str, fmt: str) -> str:
    parsed = parse_reply(response, fmt)
    if not parsed.format_ok:
        return ""
    return parsed.sections.get("reasoning", parsed.thought) if SECTIONS[fmt] else parsed.thought


def _prediction(response: str, fmt: str, env) -> list | None:
    """The reply's predicted facts, sorted (None without a readable prediction)."""
    from ragen.envs.facts import parse_facts

    parsed = parse_reply(response, fmt)
    if not parsed.format_ok or "prediction" not in parsed.sections:
        return None
    facts = parse_facts(parsed.sections["prediction"], env.prediction_kinds)
    return sorted(facts.facts) if facts.ok else None


def analyse(path: Path, fmt: str, env_name: str | None = None) -> dict[str, float]:
    counts = dict(turns=0, both=0, thought_eq_answer=0, thought_expert=0, answer_expert=0)
    # turns with a <prediction>: does it state the outcome of the answer, or of the plan?
    pred = dict(n=0, of_answer=0, of_plan=0, differ=0, differ_of_answer=0, differ_of_plan=0)
    disagree = dict(n=0, answer_expert=0, thought_expert=0)
    for line in path.read_text().splitlines():
        ep = json.loads(line)
        if ep.get("turn_index", 0) != 0:  # a windowed episode: every sample repeats its turns
            continue
        name = env_name or ep["env_name"]
        env = envs.make(name)
        env.reset(ep["seed"])
        deterministic = getattr(env, "p", 1.0) >= 1.0
        for k, turn in enumerate(ep["turns"]):
            if k > 0 and not deterministic:
                break
            expert = env.oracle_action()
            if turn["format_ok"] and turn["actions"] and expert is not None:
                text = _reasoning_text(turn["response"], fmt)
                named = committed_actions(text, env.action_names)
                answer = turn["actions"][0].lower()
                counts["turns"] += 1
                if named:
                    thought = named[-1]
                    counts["both"] += 1
                    counts["thought_eq_answer"] += thought == answer
                    counts["thought_expert"] += thought == expert
                    counts["answer_expert"] += answer == expert
                    stated = _prediction(turn["response"], fmt, env)
                    if stated is not None:
                        of_answer = stated == sorted(env.predict_facts([answer]))
                        of_plan = stated == sorted(env.predict_facts([thought]))
                        pred["n"] += 1
                        pred["of_answer"] += of_answer
                        pred["of_plan"] += of_plan
                        if thought != answer:
                            pred["differ"] += 1
                            pred["differ_of_answer"] += of_answer
                            pred["differ_of_plan"] += of_plan
                    if thought != answer:
                        disagree["n"] += 1
                        disagree["answer_expert"] += answer == expert
                        disagree["thought_expert"] += thought == expert
            for action in turn["executed_actions"]:
                env.step(action)
    n = max(1, counts["both"])
    d = max(1, disagree["n"])
    extra = {}
    if pred["n"]:
        extra = {
            "prediction_is_the_answer_outcome": pred["of_answer"] / pred["n"],
            "prediction_is_the_plan_outcome": pred["of_plan"] / pred["n"],
            "when_they_differ_prediction_is_the_answer_outcome": pred["differ_of_answer"]
            / max(1, pred["differ"]),
            "when_they_differ_prediction_is_the_plan_outcome": pred["differ_of_plan"]
            / max(1, pred["differ"]),
        }
    return {
        "turns": counts["turns"],
        "turns_with_a_committed_action": counts["both"],
        "thought_eq_answer": counts["thought_eq_answer"] / n,
        "thought_eq_expert": counts["thought_expert"] / n,
        "answer_eq_expert": counts["answer_expert"] / n,
        "when_they_differ": disagree["n"],
        "when_they_differ_answer_eq_expert": disagree["answer_expert"] / d,
        "when_they_differ_thought_eq_expert": disagree["thought_expert"] / d,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--format", default=None, help="reply format (default: from the run's config)")
    args = p.parse_args(argv)
    for path in args.files:
        fmt = args.format
        if fmt is None:
            import yaml

            cfg = yaml.safe_load((path.parent.parent / "config.yaml").read_text())
            fmt = cfg["rollout"]["reasoning"]
        result = analyse(path, fmt)
        print(path, fmt)
        for k, v in result.items():
            print(f"  {k}: {v:.3f}" if isinstance(v, float) else f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
