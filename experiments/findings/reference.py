"""Random and oracle play on the held-out states a finding evaluates its policies on.

    python -m experiments.findings.reference            # every finding with held-out states
    python -m experiments.findings.reference diversity

A finding whose verdict compares RL gains (diversity, actions, reasoning) can only show
an effect when its warm starts play above random play; this writes the reference:
``experiments/findings/results/reference.json``, per finding, the random policy's and
the oracle's success on the same ``eval_episodes`` held-out states, the same sampling
seed and the finding's env settings as ``sweep.heldout``, with per-state outcomes and
the command, commit and date. No model is loaded: a few seconds per finding.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from experiments.common import write_results
from experiments.findings.config import finding_names, load_finding
from experiments.findings.sweep import rollout_config

OUT = Path(__file__).parent / "results" / "reference.json"
POLICIES = ("random", "oracle")


def play(name: str) -> dict[str, dict]:
    """Each reference policy on the finding's held-out states (one action per turn)."""
    from ragen.agent.evaluate import run_evaluation
    from ragen.agent.metrics import success_by_state

    cfg = load_finding(name)
    out = {}
    for policy in POLICIES:
        played = run_evaluation(
            policy,
            env=cfg.env,
            n=cfg.eval_episodes,
            temperature=0.5,
            max_turns=cfg.max_turns,
            seed=0,
            config=rollout_config(cfg, cfg.reasoning, 1),
            env_config=dict(cfg.env_config),
        )
        wins = success_by_state(played.trajectories)
        out[policy] = {
            "success_rate": float(played.metrics["success_rate"]),
            "per_state": [wins[s] for s in sorted(wins)],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("findings", nargs="*", help="default: every finding with eval_episodes")
    args = p.parse_args(argv)
    names = args.findings or [n for n in finding_names() if load_finding(n).eval_episodes]
    data = json.loads(OUT.read_text()) if OUT.exists() else {"findings": {}}
    for name in names:
        tic = time.perf_counter()
        data["findings"][name] = play(name)
        cells = ", ".join(
            f"{k} {100 * v['success_rate']:.1f}%" for k, v in data["findings"][name].items()
        )
        print(f"{name}: {cells} ({time.perf_counter() - tic:.0f}s)", flush=True)
    write_results(OUT, {"findings": data["findings"]}, "python -m experiments.findings.reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
