#!/usr/bin/env bash
# The speed benchmark (`edit-engine bench`: diffusion against the autoregressive baseline) on one GPU, for
# checkpoints trained earlier (e.g. by benchmarks/gpu_train.sh): eager, then with the per-pass step compiled
# (Engine.compile), each with its own hard stop. MODEL_GZ / AR_GZ: folders holding model.safetensors.gz,
# config.json and (for the diffusion model) sampler.json, copied to the GPU machine compressed; the packaged
# tokenizer is added there. Results: OUT_DIR/bench_gpu2.tgz (tables, JSON lines, progress, machine).
# Usage: MODEL_GZ=DIR/diff_mid AR_GZ=DIR/ar_mid [KERNELS=auto|torch] benchmarks/gpu_bench.sh OUT_DIR
# CPU check: DEVICE=cpu MODEL_GZ=... AR_GZ=... benchmarks/gpu_bench.sh /tmp/x (runs --quick).
set -u
OUT_DIR=${1:?usage: benchmarks/gpu_bench.sh OUT_DIR}
WORK=${WORK:-/tmp/edit-engine-bench}
RES="$WORK/results"
mkdir -p "$OUT_DIR" "$RES"
OUT_DIR=$(cd "$OUT_DIR" && pwd)  # absolute: the packing below runs from $WORK
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
DEVICE=${DEVICE:-cuda}
{ date -u; nproc --all; nvidia-smi -L; python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__)"; } \
  >> "$RES/machine.txt" 2>&1
unpack() {  # gz folder -> checkpoint folder
  local dst="$WORK/$(basename "$1")"; mkdir -p "$dst"
  cp "$1"/*.json "$dst/"; gunzip -c "$1/model.safetensors.gz" > "$dst/model.safetensors"
  cp edit_engine/models/default/tokenizer.json "$dst/"; echo "$dst"
}
M=$(unpack "${MODEL_GZ:?}"); AR=$(unpack "${AR_GZ:?}")
Q=(); [ "$DEVICE" = cpu ] && Q=(--quick --threads 1)
bench() {  # name, kernels backend, extra flags...
  local name=$1 kb=$2; shift 2
  EDIT_ENGINE_KERNELS=$kb timeout "${BENCH_S:-170}" python3 -m edit_engine.cli.main bench --device "$DEVICE" "${Q[@]}" \
    "$@" --json --model "$M" --ar-model "$AR" > "$RES/bench_$name.txt" 2> "$RES/bench_$name.err"
  local rc=$?; echo "$(date -u +%T) bench $name exit $rc" >> "$RES/machine.txt"; return $rc
}
# Eager with the Triton kernels; if that fails (not a timeout), eager with the PyTorch twins; then compiled.
# KERNELS=torch runs both with the PyTorch twins (the Triton kernels' end-to-end worth: compare the two runs).
K=${KERNELS:-auto}
bench "eager_$K" "$K"; rc=$?
if [ "$K" = auto ] && [ $rc != 0 ] && [ $rc != 124 ]; then bench eager_torch torch; fi
bench "compile_$K" "$K" --compile
( cd "$WORK" && tar -czf "$OUT_DIR/bench_gpu2.tgz" results )
cat "$RES/machine.txt"; grep -v '^{' "$RES/bench_eager_$K.txt" | tail -40
