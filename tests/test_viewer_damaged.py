"""ragen view on damaged run folders: each damaged file is skipped, the skip is said
(stderr and the overview page), and the rest of the site is built. Each test replays one
of the inputs that used to stop the build."""

import json
import random

import pytest

from ragen.cli import main
from ragen.viewer import build_site
from ragen.viewer.data import read_data_file
from ragen.viewer.synthetic import synthesize


@pytest.fixture
def run(tmp_path):
    """A small synthetic training run: steps 1-4, 16 episodes each."""
    path = tmp_path / "run"
    synthesize(path, steps=4, episodes=16)
    return path


def _view(run, capsys):
    """``ragen view RUN``: exit status, the skip lines it printed, the site folder."""
    status = main(["view", str(run)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    skipped = [line for line in err.splitlines() if line.startswith("ragen view: skipped ")]
    return status, skipped, run / "site"


def _pages(site):
    return sorted(p.name for p in site.glob("step_*.html"))


def test_random_bytes(run, capsys):
    rng = random.Random(0)
    (run / "trajectories" / "step_000002.jsonl").write_bytes(rng.randbytes(4096))
    (run / "config.yaml").write_bytes(b"\xff\xfe" + rng.randbytes(200))
    status, skipped, site = _view(run, capsys)
    assert status == 0
    assert _pages(site) == ["step_000001.html", "step_000003.html", "step_000004.html"]
    assert any("trajectories/step_000002.jsonl" in s and "not UTF-8" in s for s in skipped)
    assert any("config.yaml" in s and "not UTF-8" in s for s in skipped)
    html = (site / "index.html").read_text()
    assert "id=skipped" in html and "step_000002.jsonl" in html and "id=curves" in html


def test_a_json_array_as_a_record(run, capsys):
    path = run / "trajectories" / "step_000001.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "[1, 2, 3]", *lines[1:]]) + "\n")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('["step", 5]\n')
    status, skipped, site = _view(run, capsys)
    assert status == 0
    assert any(
        "step_000001.jsonl: line 2 skipped (a JSON list, not an object)" in s for s in skipped
    )
    assert any("metrics.jsonl" in s and "a JSON list" in s for s in skipped)
    data = read_data_file(site / "data" / "step_000001.js")[1]
    assert len(data["episodes"]) == 16  # every real episode is kept


def test_a_bad_metrics_line(run, capsys):
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines.insert(2, '{"step": 2, "rollout/reward_mean": ')  # not the last line
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    status, skipped, site = _view(run, capsys)
    assert status == 0
    assert skipped == ["ragen view: skipped metrics.jsonl: line 3 skipped (not valid JSON)"]
    html = (site / "index.html").read_text()
    assert 'data-key="rollout/success_rate"' in html  # the curves of the other lines


def test_a_folder_in_place_of_a_file(run, capsys):
    path = run / "trajectories" / "step_000003.jsonl"
    path.unlink()
    path.mkdir()
    (run / "config.yaml").unlink()
    (run / "config.yaml").mkdir()
    status, skipped, site = _view(run, capsys)
    assert status == 0
    assert "step_000003.html" not in _pages(site) and "step_000004.html" in _pages(site)
    assert any("step_000003.jsonl" in s and "a folder where a file belongs" in s for s in skipped)
    assert any("config.yaml" in s and "a folder where a file belongs" in s for s in skipped)


def test_a_truncated_trajectory_file(run, capsys):
    path = run / "trajectories" / "step_000004.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - 200])  # cut inside the last record
    status, skipped, site = _view(run, capsys)
    assert status == 0
    assert any("step_000004.jsonl: line 16 skipped (cut off mid-record)" in s for s in skipped)
    data = read_data_file(site / "data" / "step_000004.js")[1]
    assert len(data["episodes"]) == 15


def test_a_record_with_fields_of_the_wrong_type(run, capsys):
    path = run / "trajectories" / "step_000001.jsonl"
    bad = {"group_id": 99, "episode_id": 99, "turns": [{"thought": {"x": 1}, "actions": 5}]}
    with open(path, "a") as f:
        f.write(json.dumps(bad) + "\n")
    status, skipped, site = _view(run, capsys)
    assert status == 0
    assert any("step_000001.jsonl: episode 17 skipped" in s for s in skipped)
    assert len(read_data_file(site / "data" / "step_000001.js")[1]["episodes"]) == 16


def test_damaged_eval_output_and_nothing_readable(tmp_path, capsys):
    ev = tmp_path / "eval"
    ev.mkdir()
    (ev / "trajectories.jsonl").write_bytes(random.Random(1).randbytes(300))
    (ev / "metrics.json").write_text("[1, 2]")
    # nothing at all is readable: a clear error, not an empty site with exit 0
    assert main(["view", str(ev)]) == 2
    err = capsys.readouterr().err
    assert "nothing readable" in err and "Traceback" not in err
    # one good record: the rest is built, the bad metrics.json said
    good = {"group_id": 0, "episode_id": 0, "turns": [{"thought": "t", "actions": ["up"]}]}
    with open(ev / "trajectories.jsonl", "a") as f:
        f.write("\n" + json.dumps(good) + "\n")
    index = build_site(ev, tmp_path / "site", on_skip=lambda line: None)
    assert (index.parent / "eval.html").exists()
    assert "metrics.json: skipped (not a JSON object)" in index.read_text()


def test_a_damaged_run_in_a_folder_of_runs(tmp_path, capsys):
    synthesize(tmp_path / "demo" / "sokoban" / "rl", steps=2, episodes=16)
    bad = tmp_path / "demo" / "sokoban" / "rl" / "trajectories" / "step_000001.jsonl"
    bad.write_bytes(b"\x00\xff" * 50)
    status, skipped, site = _view(tmp_path / "demo", capsys)
    assert status == 0
    assert skipped == [
        "ragen view: skipped sokoban/rl/trajectories/step_000001.jsonl: line 1 skipped "
        "(not UTF-8 text)",
        "ragen view: skipped sokoban/rl/trajectories/step_000001.jsonl: nothing readable "
        "left; no page written",
    ]
    assert (site / "sokoban" / "rl" / "step_000002.html").exists()


def test_a_number_of_4301_digits(run, capsys):
    """Issue 55: one integer of more than 4,300 digits in metrics.jsonl (Python refuses
    to read it) crashed `ragen view`; one past the float range (400 digits) crashed the
    charts. Both now read as the overflow they are (inf), and the site is built."""
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "rollout/reward_mean": ' + "9" * 4301 + "}\n")
        f.write('{"step": 6, "rollout/reward_mean": -' + "9" * 400 + "}\n")
    path = run / "trajectories" / "step_000001.jsonl"
    record = json.loads(path.read_text().splitlines()[0])
    with open(path, "a") as f:
        f.write(
            json.dumps({**record, "episode_id": 999}).replace(
                '"episode_id": 999', '"episode_id": ' + "9" * 4301
            )
            + "\n"
        )
    status, skipped, site = _view(run, capsys)
    assert status == 0 and skipped == []
    assert "id=curves" in (site / "index.html").read_text()
    assert len(read_data_file(site / "data" / "step_000001.js")[1]["episodes"]) == 17
