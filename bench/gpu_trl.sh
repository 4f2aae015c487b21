#!/usr/bin/env bash
# ragen against TRL's GRPOTrainer with SmolLM2-135M at batch 256 on a lent GPU, in one
# command after experiments/grids/gpu_session.sh (which leaves the SmolLM2 GGUF, its HF
# conversion and the wheels in /tmp/site on the machine):
#
#   bash bench/gpu_trl.sh [OUT_DIR]
#
# TRL and its data stack (datasets, pyarrow, pandas, ...) are not on the lent machines
# and are too large to carry with the model in one call (64 MiB a call), so the wheels
# travel in three parts, each staged into /tmp/whl-trl by one call (`.whl-trl/` is
# ignored by git; fill it with `pip download --no-deps --only-binary=:all:
# --python-version 3.12 ...`, see docs/SPEED.md "On a GPU"):
#   call 1, carry [.smol/a, .whl-trl/a]:   cp .smol/a /tmp/smol_a && mkdir -p /tmp/whl-trl && cp .whl-trl/a/*.whl /tmp/whl-trl/
#   call 2, carry [.smol/b, .whl, .whl-trl/b]:  cp .whl-trl/b/*.whl /tmp/whl-trl/ && <gpu_session.sh command>
#   call 3, carry [.whl-trl/c]:            cp .whl-trl/c/*.whl /tmp/whl-trl/ && bash bench/gpu_trl.sh $OUT
# Every wheel staged is installed into /tmp/site (ahead of the machine's packages on
# PYTHONPATH); numpy, torch, transformers and huggingface_hub stay the machine's.
set -u
OUT_DIR=${1:-${OUT:-runs/gpu}}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec > >(tee -a "$OUT_DIR/trl.log") 2>&1
export RAGEN_SMOLLM2_GGUF=${RAGEN_SMOLLM2_GGUF:-$HOME/.cache/ragen/models/SmolLM2-135M-Instruct.Q4_1.gguf}
if ls /tmp/whl-trl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site /tmp/whl-trl/*.whl || echo "TRL wheel install failed"
fi
export PYTHONPATH=$PWD:/tmp/site:${PYTHONPATH:-}
python3 - <<'PY'
import importlib
for name in ("trl", "datasets", "pyarrow", "pandas", "accelerate", "transformers", "huggingface_hub", "torch"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '?')}")
    except Exception as err:  # what is missing or broken is the finding
        print(f"{name}: {type(err).__name__}: {err}")
PY
# GRPO on the bandit at 16 prompts x 16 samples = 256 sequences per step, up to 64 new
# tokens, one optimizer step per step, no KL, lr 1e-5; one warm-up step then 3 counted
# steps per trainer, two rounds in alternating order.
timeout "${TRL_TIMEOUT:-420}" python3 -m bench.bench_vs_trl --model smollm2 --device cuda \
    --prompts 16 --group-size 16 --max-new-tokens 64 --lr 1e-5 --steps 3 --rounds 2 \
    --engine "${TRL_ENGINE:-static}" 2>&1 | grep -v -i -E "warn|^\s*$"
echo "bench exit ${PIPESTATUS[0]}"
