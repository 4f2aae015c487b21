"""ragen view without a browser: the three kinds of run folder, bad input, the data the
pages embed, pictures, and what the trainer logs for it (ragen.trainer.trajectory_log)."""

import json
import re

import pytest

from ragen.agent.trajectory import Trajectory, TurnRecord
from ragen.cli import main
from ragen.trainer.config import load_config
from ragen.trainer.metrics_logger import read_metrics
from ragen.trainer.trajectory_log import episode_records, should_log, turn_advantages
from ragen.viewer import build_site
from ragen.viewer.charts import tick_label, ticks
from ragen.viewer.data import check_facts, read_data_file
from ragen.viewer.load import load, read_episodes
from ragen.viewer.pictures import grid_lines, tile_palette
from ragen.viewer.synthetic import synthesize


def _data(path):
    return read_data_file(path)[1]


def test_training_run_site(tmp_path):
    run = tmp_path / "run"
    synthesize(run, steps=20, episodes=32)
    index = build_site(run, tmp_path / "site")
    site = index.parent
    html = index.read_text()
    # every chart marks the warnings (by signal and action) and the rollback (an arrow)
    assert html.count('data-signals="entropy" data-action="rollback"') >= 6
    assert html.count('class="event-marker rollback-marker"') >= 6
    assert "id=events" in html and "group_reward_std" in html
    # the rollback's row: where from and to, the change and the rate read back, the branch
    assert "model.actor_lr 0.001 -&gt; 0.0005" in html and "actor lr now 0.0005" in html
    assert 'href="branch-rollback1_step10-step_000010.html"' in html
    assert (site / "branch-rollback1_step10-step_000010.html").exists()
    assert "reasoning/mutual_info" in html and 'id="lr"' in html
    assert "id=validation" in html and 'href="val_step_000010.html"' in html
    assert 'href="step_000001.html"' in html and "Reasoning over training" in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing from the network
    data = _data(site / "data" / "step_000003.js")
    records = read_episodes(run / "trajectories" / "step_000003.jsonl")
    assert len(data["episodes"]) == len(records) == 32 and data["chunks"] == 1
    ep, rec = data["episodes"][5], records[5]
    assert ep["r"] == pytest.approx(rec["episode_reward"]) and ep["k"] == rec["kept"]
    assert ep["sn"] == rec["turns"][0]["thought"][:120] and ep["n"] == len(rec["turns"])
    assert _data(site / "data" / "step_000003.c0.js") == records  # the records, as written
    assert (site / "data" / "tiles.js").exists()  # sokoban: pictures from its rgb tiles
    assert max(f.stat().st_size for f in site.rglob("*") if f.is_file()) < 3e6
    # the validation states: the same 32 seeds at steps 10 and 20
    states = _data(site / "data" / "states.js")
    assert states["steps"] == [10, 20] and len(states["states"]) == 32
    assert all(set(s["cells"]) == {"10", "20"} for s in states["states"])
    thoughts = _data(site / "data" / "thoughts.js")["steps"]
    assert [s["step"] for s in thoughts] == list(range(1, 21))
    first = thoughts[0]["samples"][0]
    episode = read_episodes(run / "trajectories" / "step_000001.jsonl")[first[1]]
    assert first[0] in [t["thought"] for t in episode["turns"]]


def test_charts_draw_values_thresholds_and_branches(tmp_path):
    run = tmp_path / "run"
    synthesize(run, steps=16, episodes=16)
    html = build_site(run, tmp_path / "site").read_text()
    svg = html[html.index('id="collapse-entropy"') :]
    svg = svg[: svg.index("</svg>")]
    # the threshold is the run's config (entropy_ratio 0.4), the neutral level 1
    assert 'class="ref ref-threshold" data-y="0.4"' in svg and "fires below 0.4" in svg
    assert 'class="ref ref-chance" data-y="1.0"' in svg
    # the line is drawn where the values are: map its pixels back through the axes
    box = {
        k: float(v) for k, v in re.findall(r'data-(x0|x1|y0|y1|left|top|pw|ph)="([-\d.e]+)"', svg)
    }
    points = re.search(r'data-key="collapse/entropy" data-branch="" [^>]*points="([^"]+)"', svg)
    rows = [r for r in read_metrics(run) if "collapse/entropy" in r]
    for (px, py), row in zip((p.split(",") for p in points.group(1).split()), rows):
        step = box["x0"] + (float(px) - box["left"]) / box["pw"] * (box["x1"] - box["x0"])
        value = box["y1"] - (float(py) - box["top"]) / box["ph"] * (box["y1"] - box["y0"])
        assert step == pytest.approx(row["step"], abs=0.1)
        assert value == pytest.approx(row["collapse/entropy"], abs=0.01 * (box["y1"] - box["y0"]))
    # the abandoned branch, faded, starts where it left the run's line
    assert 'data-key="collapse/entropy" data-branch="rollback1_step8"' in svg
    assert ticks(0, 1)[0] == [0, 0.25, 0.5, 0.75, 1.0]
    assert [tick_label(v, 0.0002, 0.001) for v in (0.0004, 0.001)] == ["4e-4", "1e-3"]


def test_eval_and_demo_folders(tmp_path):
    ev = tmp_path / "demo" / "sokoban" / "eval"
    args = ["eval", "--model", "oracle", "--env", "sokoban", "--n", "4", "--out", str(ev)]
    assert main(args) == 0
    index = build_site(ev, tmp_path / "eval_site")
    assert "eval.html" in index.read_text()
    data = _data(index.parent / "data" / "eval.js")
    assert len(data["episodes"]) == 4 and data["episodes"][0]["n"] >= 1
    # a demo-like folder: runs found below it, results.json shown
    synthesize(tmp_path / "demo" / "sokoban" / "rl", steps=2, episodes=16)
    (tmp_path / "demo" / "results.json").write_text(
        json.dumps({"sokoban": {"oracle": {"success_rate": 1.0}}})
    )
    assert [r.name for r in load(tmp_path / "demo").runs] == ["sokoban/eval", "sokoban/rl"]
    assert main(["view", str(tmp_path / "demo")]) == 0
    site = tmp_path / "demo" / "site"
    top = (site / "index.html").read_text()
    assert 'href="sokoban/rl/index.html"' in top and "id=results" in top
    rl = (site / "sokoban" / "rl" / "index.html").read_text()
    assert (
        'href="../../assets/viewer.css"' in rl
        and (site / "sokoban" / "rl" / "step_000002.html").exists()
    )


def test_structured_thoughts_are_checked_against_the_recorded_truth(tmp_path):
    out = tmp_path / "eval"
    args = ["eval", "--model", "oracle", "--env", "frozen_lake", "--n", "8", "--out", str(out)]
    args += ["--reasoning", "grounding_world_modeling", "--epsilon", "0.2"]
    assert main(args) == 0
    records = read_episodes(out / "trajectories.jsonl")
    site = build_site(out, tmp_path / "site").parent
    entries = _data(site / "data" / "eval.js")["episodes"]
    slipped = 0
    for rec, entry in zip(records, entries):
        for turn, extra in zip(rec["turns"], entry["rx"]):
            facts = turn["info"]["facts"]  # what the rollout recorded
            assert extra["sec"]["prediction"] == facts["intended"]  # the oracle's prediction
            assert extra["gf"] == {
                "stated": [[f, True] for f in facts["state"].split("; ")],
                "missed": [],
                "truth": facts["state"],
            }
            right = facts["next"] == facts["intended"]
            assert extra["pf"]["stated"] == [[facts["intended"], right]]
            assert extra["pf"]["missed"] == ([] if right else [facts["next"]])
            slipped += not right
    assert slipped, "epsilon and the slippery lake should make a prediction miss"
    assert check_facts("player (1,2); box (9,9); junk", "player (1,2); box (3,3)") == {
        "stated": [["player (1,2)", True], ["box (9,9)", False], ["junk", None]],
        "missed": ["box (3,3)"],
        "truth": "player (1,2); box (3,3)",
    }


def test_bad_input_is_one_clear_line(tmp_path, capsys):
    assert main(["view", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "ragen train" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "holds no run" in capsys.readouterr().err


def test_old_per_sample_records_become_one_episode_each(tmp_path):
    run = tmp_path / "old"
    (run / "trajectories").mkdir(parents=True)
    turn = {"observation": "o", "thought": "t", "actions": ["up"], "reward": 1.0}
    lines = [
        json.dumps({"group_id": 0, "episode_id": e, "turn_index": k, "turns": [turn, turn]})
        for e in range(2)
        for k in range(2)
    ]
    (run / "trajectories" / "step_000001.jsonl").write_text("\n".join(lines) + "\n")
    assert len(read_episodes(run / "trajectories" / "step_000001.jsonl")) == 2
    build_site(run)  # no metrics, no config: still a site
    assert (run / "site" / "step_000001.html").exists()


def test_pictures_come_from_the_envs_rgb_tiles():
    palette = tile_palette("sokoban", {})
    assert palette["size"] == 16 and {"#", "P", "X", "_"} <= set(palette["tiles"])
    assert all(uri.startswith("data:image/png;base64,") for uri in palette["tiles"].values())
    assert tile_palette("bandit", {}) is None  # no render("rgb"): text only
    assert grid_lines("Turn 1\n###\n#P#\n###\ngoodbye") == ["###", "#P#", "###"]


# ------------------------------------------------------------- what the trainer logs
def _sample(group, episode, turn_index=0, windowed=False, n_turns=2):
    turns = [
        TurnRecord(f"obs{k}", "r", "t", ["up"], ["up"], 0.0, True, 0.5, False)
        for k in range(n_turns)
    ]
    ids = list(range(10))
    return Trajectory(
        input_ids=ids,
        response_mask=[0, 0, 1, 1, 0, 0, 1, 1, 1, 0],
        gen_logprobs=[0.0] * 10,
        turn_ends=[3] if windowed else [3, 8],
        turn_rewards=[0.5] if windowed else [0.5, 0.5],
        group_id=group,
        episode_id=episode,
        turn_index=turn_index,
        reward_from_turn=0.5 if windowed else None,
        turns=turns,
    )


def test_turn_advantages_full_history_and_windowed():
    adv = [0, 0, 1.0, 3.0, 0, 0, -1.0, -2.0, -3.0, 0]
    full = _sample(0, 0)
    assert turn_advantages(full, adv, full.response_mask) == {0: 2.0, 1: -2.0}
    win = _sample(0, 0, turn_index=1, windowed=True)
    assert turn_advantages(win, adv, win.response_mask) == {1: 2.0}


def test_episode_records_one_per_episode_whole_groups():
    # windowed: two samples per episode; groups 0, 1, 2 of two episodes each
    samples = [
        _sample(g, 2 * g + m, turn_index=k, windowed=True)
        for g in range(3)
        for m in range(2)
        for k in range(2)
    ]
    keep = [s.group_id != 1 for s in samples]
    advantages = {0: {0: 0.25}, 1: {1: -0.5}}
    records = episode_records(samples, keep=keep, advantages=advantages, max_episodes=3)
    assert [(r["group_id"], r["episode_id"]) for r in records] == [(0, 0), (0, 1)]  # whole groups
    assert records[0]["advantages"] == [0.25, -0.5] and records[1]["advantages"] == [None, None]
    assert records[0]["kept"] is True and records[0]["samples"] == 2
    assert "turn_index" not in records[0] and len(records[0]["turns"]) == 2
    everything = episode_records(samples, keep=keep)
    assert len(everything) == 6 and everything[2]["kept"] is False
    assert "kept" not in episode_records(samples)[0]
    assert episode_records(samples, max_episodes=1)[0]["group_id"] == 0  # at least one group


def test_should_log_and_config_keys():
    assert [s for s in range(1, 11) if should_log(s, 4, 10)] == [1, 4, 8, 10]
    assert not any(should_log(s, 0, 10) for s in range(1, 11))
    cfg = load_config(["trainer.log_trajectories_every=5", "trainer.log_trajectories_max=null"])
    assert cfg.trainer.log_trajectories_every == 5 and cfg.trainer.log_trajectories_max is None
    from ragen.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.log_trajectories_max"):
        load_config(["trainer.log_trajectories_max=0"])
    with pytest.raises(ConfigError, match="trainer.log_trajectories_every"):
        load_config(["trainer.log_trajectories_every=-1"])
