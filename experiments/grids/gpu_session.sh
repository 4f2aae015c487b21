#!/usr/bin/env bash
# SmolLM2-135M-Instruct on the grids on one lent GPU, in one command:
#
#   bash experiments/grids/gpu_session.sh [OUT_DIR] [SECONDS] [CONFIG OVERRIDES...]
#
# 1. the SmolLM2 GGUF: $RAGEN_SMOLLM2_GGUF, else ~/.cache/ragen/models, else joined from
#    the parts in $SMOL_PARTS (default /tmp/smol_a and .smol/b: a lent machine takes at
#    most 64 MiB per call and the file is 94 MiB, so one call leaves the first part in
#    /tmp and the next brings the second), checked against .smol/sha256;
# 2. wheels the machine lacks (.whl/*.whl: gguf, omegaconf, gymnasium; trl, datasets,
#    dill, multiprocess for bench/gpu_trl.sh) into /tmp/site;
# 3. in the background: SmolLM2's rollout against bare HF generate at batch 256
#    (bench.bench_rollout; BENCH_ROLLOUT=0 skips it), the reasoning statistics' one call
#    against one per prompt (bench.bench_reasoning_stats), then the CUDA-only tests;
# 4. experiments.grids.run --config smollm2-gpu, time-boxed to end SECONDS (default
#    560) after this script started; results.json / results.md / the logs land in OUT_DIR.
#
# With the device tool (15 minutes of device time; a machine goes back 30 s after a call):
#   run 1, carry [.smol/a]:        cp .smol/a /tmp/smol_a            (about 30 s, start included)
#   run 2 at once, carry [.smol/b, .whl]:  bash experiments/grids/gpu_session.sh $OUT 560 ...
#   run 3 at once, if time is left, no carry:   bash bench/gpu_trl.sh $OUT   (ragen vs TRL,
#     SmolLM2 at batch 256; TRL's wheels ride in .whl, see that script's header)
#
# What two H200 sessions measured (docs/RESULTS.md, "The grids with SmolLM2"): SFT for
# 150 s gives warm starts of 80.1% (Sokoban) / 78.7% (FrozenLake), 75 s gives 46.3 / 68.4%;
# 3-8 RL steps of 1,024 episodes moved neither (lr 1e-5 with one optimizer step, or 2e-5
# with about four: rl.mini_batch_size=1536). A Sokoban step is ~55 s with two runs on the
# card, 38 s of it in the update and old log-probs over ~400-token full prompts. A third
# (STUDY_CONFIG=smollm2-gpu-sk: Sokoban alone, compact prompts, 100 s of SFT -> 68.9%)
# ran 10-15 RL steps of 18-23 s: five optimizer steps per update at lr 2e-5 led one step
# by +2.6 / +3.2 points of training success on 2 seeds and ended +3.1 / +0.0 held-out.
# A fourth (STUDY_CONFIG=smollm2-gpu-sk-lr) tried lr 5e-5 and 1e-4: both fell in their
# first update (-18.4, -56.1 held-out). Next, the lr ramped over the first 5 updates
# (the preset's header says why):
#   STUDY_CONFIG=smollm2-gpu-sk-warm CUDA_TESTS=0 BENCH_ROLLOUT=0 BENCH_REASONING=0 EVAL_RESERVE=45 \
#     bash experiments/grids/gpu_session.sh $OUT 555
#
# Environment knobs: STUDY_CONFIG (default smollm2-gpu; e.g. smollm2-gpu-sk, Sokoban alone
# with two RL step sizes), BENCH_ROLLOUT=0 (no rollout bench), BENCH_ENGINES (default
# static,static-graphs,eager), BENCH_TURNS (default 5), CUDA_TESTS=0 (skip them),
# EVAL_RESERVE (seconds kept for the held-out evaluations after RL; default 100),
# STUDY_JOBS (RL runs side by side on the card; default 4),
# BENCH_REASONING=0 (skip the reasoning statistics' one-call vs per-prompt bench).
set -u
STUDY_CONFIG=${STUDY_CONFIG:-smollm2-gpu}
OUT_DIR=${1:-${OUT:-runs/gpu}}
BUDGET_S=${2:-560}
shift 2 2>/dev/null || shift $#
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
exec > >(tee -a "$OUT_DIR/session.log") 2>&1
say() { echo "[session ${SECONDS}s] $*"; }

GGUF=${RAGEN_SMOLLM2_GGUF:-$HOME/.cache/ragen/models/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$GGUF" ]; then
    mkdir -p "$(dirname "$GGUF")"
    cat ${SMOL_PARTS:-/tmp/smol_a .smol/b} > "$GGUF.part" || { say "GGUF parts missing"; exit 3; }
    if [ -f .smol/sha256 ] && [ "$(sha256sum < "$GGUF.part" | cut -d' ' -f1)" != "$(cat .smol/sha256)" ]; then
        say "joined GGUF does not match .smol/sha256"; rm -f "$GGUF.part"; exit 3
    fi
    mv "$GGUF.part" "$GGUF"
fi
export RAGEN_SMOLLM2_GGUF=$GGUF
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || { say "wheel install failed"; exit 3; }
fi
export PYTHONPATH=$PWD:/tmp/site:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
echo "cores: $(nproc --all)"

say "SmolLM2 GGUF -> HF folder (once, before the workers)"
python3 -c "from ragen.models import load_policy; load_policy('smollm2', device='cpu')" \
    2>&1 | grep -v -i warn | tail -2

# In the background while the study generates its expert data on the CPU (about a
# minute, no GPU): SmolLM2's rollout loop against bare HF generate at batch 256
# (BENCH_ROLLOUT=0 skips it), then the CUDA-only tests.
say "rollout bench -> bench_rollout.log, then CUDA tests -> cuda_tests.log (background)"
(
    if [ "${BENCH_ROLLOUT:-1}" = 1 ]; then
        echo "bench start ${SECONDS}s"
        timeout 150 python3 -m bench.bench_rollout --device cuda --model smollm2 --env sokoban \
            --groups 16 --group-size 16 --turns "${BENCH_TURNS:-5}" --max-new-tokens 64 \
            --engines "${BENCH_ENGINES:-static,static-graphs,eager}"
        echo "bench end ${SECONDS}s"
    fi > "$OUT_DIR/bench_rollout.log" 2>&1
    if [ "${BENCH_REASONING:-1}" = 1 ]; then
        timeout 90 python3 -m bench.bench_reasoning_stats --device cuda --model smollm2 --rounds 4
    fi > "$OUT_DIR/bench_reasoning_stats.log" 2>&1
    if [ "${CUDA_TESTS:-1}" = 1 ]; then
        OMP_NUM_THREADS=1 timeout 200 python3 -m pytest -q -p no:cacheprovider tests -k cuda
    else
        echo "CUDA tests skipped (CUDA_TESTS=0)"
    fi > "$OUT_DIR/cuda_tests.log" 2>&1
) &
TESTS_PID=$!

say "grids study ($STUDY_CONFIG) -> grids.log"
python3 -m experiments.grids.run --config "$STUDY_CONFIG" --out runs/grids_gpu --jobs "${STUDY_JOBS:-4}" \
    --finish-by $((BUDGET_S - 20 - SECONDS)) --eval-reserve "${EVAL_RESERVE:-100}" "$@" > "$OUT_DIR/grids.log" 2>&1
say "study exit $?"
grep -E "^\||FAIL|Error|sft epoch|time budget|steps fit|RL time box" "$OUT_DIR/grids.log" | grep -v -i warn | tail -40
cp runs/grids_gpu/results.json runs/grids_gpu/results.md "$OUT_DIR/" 2>/dev/null
find runs/grids_gpu -name metrics.jsonl -o -name sft_metrics.jsonl | grep -v checkpoints \
    | tar czf "$OUT_DIR/metrics.tgz" -T - 2>/dev/null
wait "$TESTS_PID"
say "CUDA tests:"; tail -3 "$OUT_DIR/cuda_tests.log"
say "rollout bench:"; grep -v -i warn "$OUT_DIR/bench_rollout.log" | tail -16
say "reasoning statistics bench:"; grep -v -i warn "$OUT_DIR/bench_reasoning_stats.log" | tail -4
ls -la "$OUT_DIR"
say "done"
