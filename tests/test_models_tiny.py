"""The tiny-model factory: determinism, sizes, both chat formats, the CLI."""

from __future__ import annotations

import pytest
import torch
from fakes import child_env

from ragen.models.tiny import CHAT_FORMATS, PRESETS, TAG_TOKENS, build_tokenizer, create_tiny

CONVERSATION = [
    {"role": "system", "content": "You are a helpful agent."},
    {"role": "user", "content": "Turn 1:\nState:\n#P_X#\nYou have 5 actions left."},
    {"role": "assistant", "content": "<think>Push the box right.</think><answer>Right</answer>"},
    {"role": "user", "content": "Turn 2:\nReward: -0.1"},
]


@pytest.fixture(scope="module")
def nano_dir(tmp_path_factory):
    return create_tiny(tmp_path_factory.mktemp("tiny") / "nano", size="nano", seed=0)


def test_same_seed_gives_identical_files(nano_dir, tmp_path):
    again = create_tiny(tmp_path / "again", size="nano", seed=0)
    for name in ("tokenizer.json", "model.safetensors", "config.json", "generation_config.json"):
        assert (again / name).read_bytes() == (nano_dir / name).read_bytes(), name
    other = create_tiny(tmp_path / "other", size="nano", seed=1)
    assert (other / "tokenizer.json").read_bytes() == (nano_dir / "tokenizer.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (
        nano_dir / "model.safetensors"
    ).read_bytes()


def test_tokenizer_identical_across_processes():
    """BPE training must not depend on hash seeds or thread scheduling."""
    import subprocess
    import sys
    from pathlib import Path

    from ragen.models import tiny

    code = "import sys; from ragen.models.tiny import _trained_backend as t; sys.stdout.write(t('chatml'))"
    root = str(Path(__file__).resolve().parents[1])
    # the inherited path is kept: on the lent GPU machine, with it replaced, the child
    # lacked gymnasium and trained on another corpus
    env = child_env(root, PYTHONHASHSEED="12345")
    other = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    tiny.training_corpus.cache_clear()
    tiny._trained_backend.cache_clear()
    assert other == tiny._trained_backend("chatml")


@pytest.mark.parametrize(
    "size, low, high",
    [("nano", 0.8e6, 1.5e6), ("micro", 2e6, 4e6), ("small", 6e6, 10e6), ("base", 24e6, 36e6)],
)
def test_preset_parameter_counts(size, low, high):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = 3004  # upper end of the tokenizer's size
    config = Qwen2Config(vocab_size=vocab, tie_word_embeddings=True, **PRESETS[size])
    with torch.device("meta"):  # shapes only, no memory or init time
        model = Qwen2ForCausalLM(config)
    n = sum(p.numel() for p in model.parameters())
    assert low <= n <= high


def test_saved_model_loads_with_expected_config(nano_dir):
    from ragen.models import load_policy

    model, tok = load_policy(nano_dir)
    cfg = model.config
    assert cfg.model_type == "qwen2" and cfg.tie_word_embeddings
    assert cfg.max_position_embeddings >= 4096
    assert cfg.vocab_size == len(tok)
    assert 2000 <= len(tok) <= 4100
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.padding_side == "left"
    assert tok.eos_token_id in model.generation_config.eos_token_id


@pytest.mark.parametrize("fmt", list(CHAT_FORMATS))
def test_chat_formats_render_and_tokenize(fmt):
    spec = CHAT_FORMATS[fmt]
    tok = build_tokenizer(fmt)
    text = tok.apply_chat_template(CONVERSATION, tokenize=False)
    prompt = tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    if fmt == "chatml":
        assert text.startswith("<|im_start|>system\nYou are a helpful agent.<|im_end|>\n")
        assert prompt.endswith("<|im_start|>assistant\n")
    else:
        assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
        assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert prompt.startswith(text)
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text  # byte-level BPE round-trips exactly
    # every special token and tag is ONE id, also inside running text
    for token in (*spec.special_tokens, *TAG_TOKENS):
        token_ids = tok.encode(token, add_special_tokens=False)
        assert len(token_ids) == 1, token
        assert token_ids[0] in tok.encode(f"ab{token}cd", add_special_tokens=False)
    assert tok.eos_token == spec.eos and tok.pad_token == spec.pad
    # tags are not special: they survive skip_special_tokens; control tokens do not
    reply = tok.encode("<think>x</think><answer>Up</answer>" + spec.eos, add_special_tokens=False)
    assert tok.decode(reply, skip_special_tokens=True) == "<think>x</think><answer>Up</answer>"


def test_vocabulary_covers_agent_text():
    tok = build_tokenizer("chatml")
    for word in [" actions", " left", "Turn", " Up", " Down", " box"]:
        assert len(tok.encode(word, add_special_tokens=False)) == 1, word
    assert tok.encode("123", add_special_tokens=False) == [
        tok.convert_tokens_to_ids(d) for d in "123"
    ]  # digits are single tokens (arithmetic)


def test_bad_arguments():
    with pytest.raises(ValueError, match="size"):
        create_tiny("/tmp/never-created", size="huge")
    with pytest.raises(ValueError, match="chat format"):
        create_tiny("/tmp/never-created", chat_format="alpaca")


def test_cli_create_tiny_and_info(tmp_path, capsys):
    from ragen.cli import main

    out = tmp_path / "m"
    args = ["models", "create-tiny", "--out", str(out), "--size", "nano", "--chat-format", "llama3"]
    assert main(args) == 0
    assert "created" in capsys.readouterr().out
    from ragen.models import load_tokenizer

    loaded = load_tokenizer(out)  # the saved tokenizer encodes like the in-memory one
    text = build_tokenizer("llama3").apply_chat_template(CONVERSATION, tokenize=False)
    assert loaded.encode(text) == build_tokenizer("llama3").encode(text)
    assert len(loaded) == len(build_tokenizer("llama3"))
    assert main(["models", "info", str(out)]) == 0
    info = capsys.readouterr().out
    assert "llama3" in info and "<|eot_id|>" in info and "parameters" in info
    assert main(["models", "info", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_grid_cells_are_single_tokens_and_load_back_identically(nano_dir):
    """One token per grid cell (rows/columns are relative positions), words stay whole,
    and the saved folder tokenizes exactly like the in-memory tokenizer (transformers 5
    would otherwise swap in Qwen2's own pre-tokenizer)."""
    from ragen.envs import make
    from ragen.models import load_tokenizer

    loaded = load_tokenizer(nano_dir)
    for name in ("sokoban", "frozen_lake"):
        env = make(name)
        obs = env.reset(seed=3)
        obs = obs[0] if isinstance(obs, tuple) else obs
        pieces = [loaded.decode([i]) for i in loaded.encode(obs, add_special_tokens=False)]
        assert pieces == [c for c in obs], (name, pieces)
    text = "Turn 2, 7 actions left, last reward -0.1: a box"
    ids = loaded.encode(text, add_special_tokens=False)
    assert ids == build_tokenizer("chatml").encode(text, add_special_tokens=False)
    assert [loaded.decode([i]) for i in ids][:3] == ["Turn", " ", "2"]
    assert " actions" in [loaded.decode([i]) for i in ids]


def test_tiny_means_one_size_everywhere(tmp_path, monkeypatch, capsys):
    """`create-tiny` without --size, `model=tiny` and `resolve_model("tiny")` agree."""
    import inspect
    import json

    from ragen.cli import main
    from ragen.models.names import resolve_model
    from ragen.models.tiny import DEFAULT_SIZE, PARAMETERS, describe
    from ragen.trainer.config import load_config

    assert inspect.signature(create_tiny).parameters["size"].default == DEFAULT_SIZE
    assert load_config(["model=tiny"]).model.path == f"tiny:{DEFAULT_SIZE}"
    built = []
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        "ragen.models.names.create_tiny", lambda out, size, seed: built.append(size) or out
    )
    resolve_model("tiny")
    assert built == [DEFAULT_SIZE]
    monkeypatch.undo()
    assert main(["models", "create-tiny", "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert describe(DEFAULT_SIZE) in out and f"{PARAMETERS[DEFAULT_SIZE]} parameters" in out
    info = json.loads((tmp_path / "t" / "ragen_tiny.json").read_text())
    assert info["size"] == DEFAULT_SIZE
    assert f"{info['num_parameters'] / 1e6:.1f}M" == PARAMETERS[DEFAULT_SIZE]


def test_named_parameter_counts_match_the_models():
    from ragen.models.loading import count_parameters
    from ragen.models.tiny import PARAMETERS, build_model, build_tokenizer

    tok = build_tokenizer()
    for size in ("nano", "micro", "small"):
        assert f"{count_parameters(build_model(size, tok)) / 1e6:.1f}M" == PARAMETERS[size]


def test_every_corpus_env_contributes_to_the_tokenizer(monkeypatch):
    """The corpus may not silently depend on what is installed: a GPU machine without
    gymnasium built another tokenizer from the same seed. Every CORPUS_ENV must build
    here (gymnasium is a core dependency), and one that fails is a loud warning."""
    import random
    import warnings

    from ragen.envs.adapters import gymnasium_env as gym_adapter
    from ragen.models import tiny

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a skipped env would raise here
        texts = tiny._env_texts(random.Random(0))
    assert any("Taxi" in t or "taxi" in t for t in texts)  # the gym envs are in it

    def no_gymnasium():
        raise ImportError("gymnasium is not installed")

    monkeypatch.setattr(gym_adapter, "import_gymnasium", no_gymnasium)
    with pytest.warns(UserWarning, match="'gym_frozen_lake' was left out"):
        tiny._env_texts(random.Random(0))
