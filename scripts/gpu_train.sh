#!/usr/bin/env bash
# One prepared GPU run (issue 9's GPU path): trains, side by side on one GPU for the same wall-clock time,
#   diff_mid   the masked-diffusion infiller, preset "mid" (13 M parameters)
#   ar_mid     the autoregressive baseline: the same network and data, prefix-suffix-middle, causal
#   diff_small the diffusion infiller at the packaged CPU size, preset "small" (a scaling point)
# with `edit-engine train` unchanged (--device cuda --bf16), the packaged tokenizer, and the corpus of that
# machine's own Python (standard library + site-packages). Each run writes OUT_DIR/<name>/{checkpoint/,
# log.jsonl, train.out}; at the end the checkpoints and logs are packed into OUT_DIR/runs.tgz.part-* (parts of
# 15 MB, so they pass the device tool's file limits). Then issue 6's benchmark on the same GPU, diff_mid against
# ar_mid (same size): OUT_DIR/bench_gpu.txt (table + JSON line). Usage: scripts/gpu_train.sh OUT_DIR [MINUTES]
# The device tool allows 10 minutes per command: 5.5 minutes of training + about 2.5 of benchmark and packing.
set -u
OUT_DIR=${1:?usage: scripts/gpu_train.sh OUT_DIR [MINUTES]}
MIN=${2:-5.5}
WORK=${WORK:-/tmp/edit-engine-gpu}
mkdir -p "$OUT_DIR" "$WORK"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
TOK=edit_engine/models/default/tokenizer.json
{ date -u; nvidia-smi -L; python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"; nproc; } > "$OUT_DIR/machine.txt" 2>&1
# DEVICE=cpu BATCH=4 PREFIX=64 SUFFIX=32 W=1 scripts/gpu_train.sh /tmp/x 0.2   checks the script on a CPU.
DEVICE=${DEVICE:-cuda}
BF16=(--bf16); [ "$DEVICE" = cpu ] && BF16=()
COMMON=(--device "$DEVICE" "${BF16[@]}" --tokenizer "$TOK" --minutes "$MIN" --train-prefix "${PREFIX:-768}"
        --train-suffix "${SUFFIX:-256}" --batch-size "${BATCH:-128}" --lr 1.5e-3 --warmup-steps 100
        --eval-every 1 --save-every 2)
# Hard stop a minute after the budget, whatever happens (the checkpoint of the last save survives).
LIMIT=$(python3 -c "print(int(float('$MIN') * 60 + 100))")
run() {  # name, extra args...
  local name=$1; shift
  timeout "$LIMIT" python3 -m edit_engine.cli train --out "$WORK/$name" "${COMMON[@]}" "$@" \
    > "$WORK/$name.out" 2>&1
  echo "$name exit $?" >> "$OUT_DIR/machine.txt"
}
run diff_mid --preset mid --workers "${W:-5}" &
run ar_mid --preset mid --objective ar --workers "${W:-5}" &
run diff_small --preset small --workers "${W:-3}" &
wait
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv >> "$OUT_DIR/machine.txt" 2>&1
# Issue 6's benchmark on this GPU (CPU check: --quick); its own hard stop so the packing below always runs.
BENCH=(--device cuda); [ "$DEVICE" = cpu ] && BENCH=(--device cpu --quick --threads 1)
if [ -d "$WORK/diff_mid/checkpoint" ] && [ -d "$WORK/ar_mid/checkpoint" ]; then
  timeout "${BENCH_S:-150}" python3 -m edit_engine.cli bench "${BENCH[@]}" --json --model "$WORK/diff_mid/checkpoint" \
    --ar-model "$WORK/ar_mid/checkpoint" > "$OUT_DIR/bench_gpu.txt" 2> "$OUT_DIR/bench_gpu.err"
  echo "bench exit $?" >> "$OUT_DIR/machine.txt"
fi
for name in diff_mid ar_mid diff_small; do
  tr '\r' '\n' < "$WORK/$name.out" | grep -v '^step' > "$WORK/$name/train.out" 2>/dev/null
  tr '\r' '\n' < "$WORK/$name.out" | grep '^step' | tail -3 >> "$WORK/$name/train.out" 2>/dev/null
done
( cd "$WORK" && tar -cf - */checkpoint */log.jsonl */train.out | gzip -1 ) | split -b 15000000 -d - "$OUT_DIR/runs.tgz.part-"
ls -la "$OUT_DIR" >> "$OUT_DIR/machine.txt"
cat "$OUT_DIR/machine.txt"
