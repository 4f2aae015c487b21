"""load_policy / load_tokenizer: sources, defaults and the one-line errors."""

from __future__ import annotations

import sys

import pytest
import torch

from ragen.errors import ModelLoadError
from ragen.models import load_policy, load_tokenizer, pick_device, pick_dtype
from ragen.models.loading import chat_template_kind, count_parameters
from ragen.models.names import resolve_source
from ragen.models.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A nano model saved to disk, plus the in-memory original."""
    tok = build_tokenizer("chatml")
    model = build_model("nano", tok, seed=0)
    path = tmp_path_factory.mktemp("policy") / "nano"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model


def test_load_local_folder_round_trips_weights(saved):
    path, original = saved
    model, tok = load_policy(path, device="cpu")
    assert not model.training and tok.padding_side == "left" and tok.pad_token is not None
    assert next(model.parameters()).dtype == torch.float32  # the CPU's default dtype
    ids = torch.tensor([tok.encode("<think>go</think>")])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, original(ids).logits)
    assert count_parameters(model) == sum(p.numel() for p in original.parameters())
    assert chat_template_kind(tok) == "chatml"
    assert load_tokenizer(str(path)).encode("Turn 1") == tok.encode("Turn 1")


def test_dtype_and_device_choices(saved):
    path, _ = saved
    model, _ = load_policy(path, device="cpu", dtype="bf16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert pick_dtype("cpu") == torch.float32
    assert pick_dtype("cpu", "float16") == torch.float16
    assert pick_device("cpu").type == "cpu"
    assert pick_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown dtype"):
        pick_dtype("cpu", "float8")
    with pytest.raises(ValueError, match="invalid device"):
        pick_device("toaster")


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist.*create-tiny"):
        load_policy(tmp_path / "nope")
    with pytest.raises(ModelLoadError, match="GGUF file .* not found"):
        load_policy(str(tmp_path / "model.gguf"))


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_policy(tmp_path)
    (tmp_path / "weights.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match="weights.gguf"):
        resolve_source(tmp_path)


def test_non_gguf_file(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        load_policy(path)


def test_gguf_without_package(tmp_path, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)  # makes `import gguf` fail
    with pytest.raises(ModelLoadError, match="pip install gguf"):
        load_policy(path)


def test_unknown_hub_id_offline():
    with pytest.raises(ModelLoadError, match="not a local path.*create-tiny"):
        load_policy("ragen-test/does-not-exist", local_files_only=True)


def test_tokenizer_without_pad_gets_eos(saved, tmp_path):
    path, _ = saved
    tok = load_tokenizer(path)
    tok.pad_token = None
    tok.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    again = load_tokenizer(tmp_path)
    assert again.pad_token == again.eos_token and again.padding_side == "left"


def test_gguf_cache_dir_tracks_the_file(tmp_path, monkeypatch):
    import os

    from ragen.models.gguf import gguf_cache_dir, gguf_cache_enabled

    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    first = gguf_cache_dir(path)
    assert first.parent == tmp_path / "cache" / "gguf" and first.name.startswith("m-")
    assert gguf_cache_dir(path) == first
    os.utime(path, ns=(1, 1))  # a replaced file gets a fresh conversion
    assert gguf_cache_dir(path) != first
    monkeypatch.setenv("RAGEN_GGUF_CACHE", "0")
    assert not gguf_cache_enabled()


def test_resolve_model_names(tmp_path, monkeypatch):
    from ragen.models.names import resolve_model

    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path))
    folder = resolve_model("tiny:nano", seed=3)
    assert folder == str(tmp_path / "models" / "tiny-nano-seed3")
    assert resolve_model("tiny:nano", seed=3) == folder  # built once, then reused
    assert resolve_model(str(tmp_path)) == str(tmp_path)  # an existing path passes through
    assert resolve_model("smollm2").endswith(".gguf")  # a model preset names its file


@pytest.mark.parametrize(
    "name, hint",
    [
        ("tiny:nan", "Did you mean 'tiny:nano'"),
        ("tinyy", "Did you mean 'tiny'"),
        ("smolm2", "smollm2"),
    ],
)
def test_unknown_model_names_fail_at_once(name, hint, monkeypatch):
    import time

    from ragen.models import names

    monkeypatch.setattr(names, "_hub_reachable", lambda *a, **k: pytest.fail("probed the hub"))
    tic = time.perf_counter()
    with pytest.raises(ModelLoadError, match=hint):
        names.resolve_model(name)
    assert time.perf_counter() - tic < 1.0


def test_uncached_hub_id_offline_fails_without_hub_retries(monkeypatch):
    from ragen.models import names

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(names, "_hub_reachable", lambda *a, **k: False)
    with pytest.raises(ModelLoadError, match="unreachable.*create-tiny"):
        names.resolve_model("ragen-test/does-not-exist")
