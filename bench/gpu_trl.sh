#!/usr/bin/env bash
# ragen against TRL's GRPOTrainer with SmolLM2-135M at batch 256 on a lent GPU, in one
# command run right after experiments/grids/gpu_session.sh on the same warm machine
# (which leaves the SmolLM2 GGUF, its HF conversion and the carried wheels in /tmp/site):
#
#   bash bench/gpu_trl.sh [OUT_DIR]
#
# The lent machines' image has pandas, pyarrow, accelerate and huggingface_hub but not
# TRL, datasets, dill or multiprocess (/work/.library/device/KINDS.md); their wheels ride
# in `.whl/` (ignored by git; `pip download --no-deps --only-binary=:all: --python-version
# 3.12 ... trl==1.16.0 datasets==5.2.0 dill multiprocess`), which gpu_session.sh
# installs into /tmp/site. The script prints the versions it imports, so a mismatch with
# the image (datasets 5.2 needs pyarrow >= 24) shows as the finding.
set -u
OUT_DIR=${1:-${OUT:-runs/gpu}}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec > >(tee -a "$OUT_DIR/trl.log") 2>&1
export RAGEN_SMOLLM2_GGUF=${RAGEN_SMOLLM2_GGUF:-$HOME/.cache/ragen/models/SmolLM2-135M-Instruct.Q4_1.gguf}
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
timeout "${TRL_TIMEOUT:-240}" python3 -m bench.bench_vs_trl --model smollm2 --device cuda \
    --prompts 16 --group-size 16 --max-new-tokens 64 --lr 1e-5 --steps 3 --rounds "${TRL_ROUNDS:-2}" \
    --engine "${TRL_ENGINE:-static}" 2>&1 | grep -v -i -E "warn|^\s*$"
echo "bench exit ${PIPESTATUS[0]}"
