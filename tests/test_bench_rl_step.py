"""bench/bench_rl_step.py: the worker times the demo's RL step and reports it as JSON; the
driver's summaries and comparisons read that JSON."""

import json

from bench import bench_rl_step


def test_worker_runs_the_demo_step_and_reports_it(tiny_model_dir, capsys):
    bench_rl_step.main(
        [
            "--worker",
            "--model",
            tiny_model_dir,
            "--groups",
            "2",
            "--group-size",
            "2",
            "--warmup",
            "0",
            "--steps",
            "1",
            "--profile",
            "--set",
            "rollout.max_new_tokens=8",
        ]
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 4 and len(result["steps"]) == 1 and result["digest"]
    step = result["steps"][0]
    assert step["wall"] > 0 and step["cpu"] > 0
    assert "timing/rollout" in step["metrics"]
    assert any(path.startswith("rollout/generate") for path in step["profile"])
    summary = bench_rl_step.summarize(result)
    assert summary["episodes_per_s"] == 4 / step["wall"]
    worst, where = bench_rl_step.compare_metrics(result, result)
    assert worst == 0.0 and where == ""
