"""A visual run shows the exact pictures the model received: the rollout keeps each
turn's pictures (PNG, lossless) in its record, and they decode to the very arrays the
processor was given."""

import base64
import io

import numpy as np
from PIL import Image

from ragen.agent import EnvStateManager, RolloutConfig, run_rollout
from ragen.agent.evaluate import write_results
from ragen.agent.policies import OraclePolicy
from ragen.models.vlm import load_processor
from ragen.viewer import build_site
from ragen.viewer.data import read_data_file


def _decode(uri: str) -> np.ndarray:
    assert uri.startswith("data:image/png;base64,")
    png = base64.b64decode(uri.split(",", 1)[1])
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def visual_rollout(processor, n_groups=2):
    """The oracle, tokenized with the VLM's processor, on sokoban_visual: token-exact
    samples whose ``images`` are the pictures handed to the processor, turn by turn."""
    policy = OraclePolicy(epsilon=0.3, tokenizer=processor)
    manager = EnvStateManager("sokoban_visual", env_groups=n_groups, group_size=1, seed=0)
    config = RolloutConfig(max_turns=4, max_actions_per_turn=1)
    return run_rollout(policy, manager, config, manager.seeds_for_step(0))


def test_the_record_holds_the_pictures_the_model_received(tiny_vlm_dir, tmp_path):
    result = visual_rollout(load_processor(tiny_vlm_dir))
    moved = 0
    for traj in result.trajectories:
        assert len(traj.images) == len(traj.turns) >= 2  # full history: one per turn
        for turn, given in zip(traj.turns, traj.images):
            (uri,) = turn.info["images"]
            assert np.array_equal(_decode(uri), np.asarray(given))  # pixel for pixel
        moved += any(not np.array_equal(traj.images[0], im) for im in traj.images[1:])
    assert moved, "the oracle's moves should change the picture"
    # the site carries them unchanged to the trajectory page
    out = write_results(tmp_path / "eval", result.trajectories, {}, {"env": "sokoban_visual"})
    site = build_site(out, tmp_path / "site").parent
    records = read_data_file(site / "data" / "eval.c0.js")[1]
    for record, traj in zip(records, result.trajectories):
        for turn, given in zip(record["turns"], traj.images):
            assert np.array_equal(_decode(turn["info"]["images"][0]), np.asarray(given))
