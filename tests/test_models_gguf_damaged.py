"""Damaged GGUF files fail with one line naming the file, never a numpy/struct traceback."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ragen.cli import main
from ragen.errors import ModelLoadError
from ragen.models.gguf import check_gguf
from ragen.models.loading import load_policy

gguf = pytest.importorskip("gguf")


def _write_valid(path) -> bytes:
    """A small, complete GGUF file (two float32 tensors); returns its bytes."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_string("general.name", "damaged-test")
    writer.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def _damaged(tmp_path):
    """(name, bytes) of damaged variants of a valid file."""
    good = _write_valid(tmp_path / "good.gguf")
    absurd_tensors = bytearray(good)
    absurd_tensors[8:16] = struct.pack("<Q", 2**60)
    absurd_kv = bytearray(good)
    absurd_kv[16:24] = struct.pack("<Q", 2**40)
    return [
        ("empty", b""),
        ("magic-only", b"GGUF"),
        ("not-gguf", b"PK\x03\x04" + b"\0" * 60),
        ("short-header", good[:20]),
        ("half-metadata", good[:100]),
        ("half-tensors", good[: len(good) - 100]),
        ("absurd-tensor-count", bytes(absurd_tensors)),
        ("absurd-kv-count", bytes(absurd_kv)),
    ]


def test_valid_file_passes(tmp_path):
    _write_valid(tmp_path / "good.gguf")
    check_gguf(tmp_path / "good.gguf")


def test_damaged_files_are_one_line_model_load_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "cache"))
    for name, data in _damaged(tmp_path):
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(data)
        with pytest.raises(ModelLoadError, match=f"{name}.gguf is damaged") as info:
            load_policy(path, device="cpu")
        assert "\n" not in str(info.value), name
    assert not (tmp_path / "cache" / "gguf").exists() or not any(
        (tmp_path / "cache" / "gguf").iterdir()
    )  # nothing half-converted is cached


def test_damaged_file_without_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_GGUF_CACHE", "0")
    good = _write_valid(tmp_path / "good.gguf")
    (tmp_path / "half.gguf").write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelLoadError, match="half.gguf is damaged"):
        load_policy(tmp_path / "half.gguf", device="cpu")


def test_eval_cli_says_damaged_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAGEN_CACHE", str(tmp_path / "cache"))
    good = _write_valid(tmp_path / "good.gguf")
    path = tmp_path / "download.gguf"
    path.write_bytes(good[: len(good) - 300])  # a half-downloaded file
    code = main(["eval", "--model", str(path), "--env", "bandit", "--n", "2"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    # the env preset's line (what eval plays) may come first; the error is one line
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1 and errors[0] == lines[-1]
    assert errors[0].startswith("ragen eval: error: GGUF file")
    assert "download.gguf is damaged" in errors[0]
    assert not any("Traceback" in line for line in lines)
