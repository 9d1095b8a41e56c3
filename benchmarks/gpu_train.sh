#!/usr/bin/env bash
# One prepared GPU training run: trains, side by side on one GPU for the same wall-clock time,
#   diff_mid   the masked-diffusion infiller, preset "mid" (13 M parameters)
#   ar_mid     the autoregressive baseline: the same network and data, prefix-suffix-middle, causal
#   diff_small the diffusion infiller at the packaged CPU size, preset "small", warm-started from the packaged
#              model (the candidate to replace it: the CPU's latency budget is set for this size)
# with `edit-engine train` unchanged (--device cuda --bf16), the packaged tokenizer, and the corpus of that
# machine's own Python (standard library + site-packages).
#
# Order: (1) a smoke run, 3 steps of each objective with the final validation and checkpoint save, stops the
# script within a minute if anything in the CUDA path is broken, so a retry still fits in the time left;
# (2) the three runs, and beside them kernels.bench (every Triton kernel against its PyTorch twin on the GPU:
# the max-difference column is the point, its timings are taken beside the training); (3) the speed benchmark
# (`edit-engine bench`) on the same GPU, diff_mid against ar_mid (same size), with the Triton kernels and, if
# that fails, the twins; (4) everything packed into OUT_DIR/runs.tgz.part-* (gzip parts of 15 MB, small enough
# to copy back one by one), the small text results first in the archive, then diff_small, diff_mid, ar_mid.
# OUT_DIR/machine.txt is also left plain. To unpack: cat runs.tgz.part-* | tar -xzf -
#
# Usage: benchmarks/gpu_train.sh OUT_DIR [MINUTES] (default 4.75 minutes of training, and about 3 for the rest:
# the whole fits a 10-minute limit). A check of the script on a CPU:
#   DEVICE=cpu BATCH=4 PREFIX=64 SUFFIX=32 W=1 benchmarks/gpu_train.sh /tmp/x 0.2
set -u
OUT_DIR=${1:?usage: benchmarks/gpu_train.sh OUT_DIR [MINUTES]}
MIN=${2:-4.75}
# Which runs (default all three, side by side). The packaged model is the GPU-trained diff_small line; to
# continue it with the whole GPU: RUNS=diff_small W=12 benchmarks/gpu_train.sh OUT 7 (7 minutes of training
# leave room for the smoke run, the final save and the packing inside a 600 s limit)
RUNS=${RUNS:-diff_mid ar_mid diff_small}
# COMPILE=1: every run (the smoke run too, so a failure shows in its first minute) with `train --compile`
# (1.1-1.2x on one CPU thread; untested on a GPU so far, where Python overhead dominated the first run).
CMP=(); [ -n "${COMPILE:-}" ] && CMP=(--compile)
# HOLES=K: the diffusion runs train K holes per row sharing one prefix (train --holes-per-window K, window span
# SPAN tokens, default 64); the AR run keeps one hole per row. Unset, `edit-engine train`'s default applies: 4
# holes per row for diffusion (HOLES=1 for one). On a GPU, where the first run supervised about 3% of each row's
# tokens (768 + 256 context, ~33 canvas slots), this is where the next run's compute goes.
WIN=(); [ -n "${HOLES:-}" ] && WIN=(--holes-per-window "$HOLES" --window-span "${SPAN:-64}")
# EXTRA=DIR: every run (the AR baseline too, so it sees the same data) also draws EXTRA_SHARE (default 0.1) of
# its examples from the extra corpus of small functions at DIR (train --extra-corpus, docs/training.md). Build
# it with benchmarks/algorithm_corpus.sh runs/extra and copy runs/extra to the GPU machine (2.1 MB of source).
EXT=(); [ -n "${EXTRA:-}" ] && EXT=(--extra-corpus "$EXTRA" --extra-share "${EXTRA_SHARE:-0.1}")
if [ -n "${EXTRA:-}" ] && [ ! -d "$EXTRA" ]; then echo "EXTRA: no directory '$EXTRA'"; exit 2; fi
for r in $RUNS; do
  case $r in diff_mid|ar_mid|diff_small) ;; *) echo "RUNS: unknown run '$r' (diff_mid, ar_mid, diff_small)"; exit 2;; esac
done
WORK=${WORK:-/tmp/edit-engine-gpu}
RES="$WORK/results"
mkdir -p "$OUT_DIR" "$RES"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
TOK=edit_engine/models/default/tokenizer.json
DEVICE=${DEVICE:-cuda}
BF16=(--bf16); [ "$DEVICE" = cpu ] && BF16=()
note() { echo "$(date -u +%T) $*" | tee -a "$RES/machine.txt"; }
{ date -u; nvidia-smi -L; python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no cuda')"; python3 -c "import tree_sitter_python" && echo "tree-sitter ok"; nproc --all; } >> "$RES/machine.txt" 2>&1

# (1) Smoke.
SMOKE=(--device "$DEVICE" "${BF16[@]}" --tokenizer "$TOK" --steps 3 --batch-size 8 --workers 1 --train-prefix 64
       --train-suffix 32 --eval-every 100 --save-every 100 --preset small "${CMP[@]}")
for obj in diffusion ar; do
  timeout 150 python3 -m edit_engine.cli.main train --out "$WORK/smoke_$obj" --objective "$obj" "${SMOKE[@]}" \
    > "$WORK/smoke_$obj.out" 2>&1 &
done
wait
for obj in diffusion ar; do
  if [ ! -f "$WORK/smoke_$obj/checkpoint/model.safetensors" ]; then
    cp "$RES/machine.txt" "$WORK/smoke_$obj.out" "$OUT_DIR/"
    echo "SMOKE FAILED ($obj):"; cat "$RES/machine.txt"; tr '\r' '\n' < "$WORK/smoke_$obj.out" | tail -40; exit 1
  fi
done
note "smoke ok"

# (2) Training. The runs use the PyTorch twins throughout (their validation too): a kernel problem on the GPU
# must not cost the checkpoints. (Under autograd the twins run anyway: the Triton kernels are forward-only.)
COMMON=(--device "$DEVICE" "${BF16[@]}" --minutes "$MIN" --train-prefix "${PREFIX:-768}"
        --train-suffix "${SUFFIX:-256}" --batch-size "${BATCH:-128}" --lr 1.5e-3 --warmup-steps 100
        --eval-every 1 --save-every 2 "${CMP[@]}" "${EXT[@]}")
LIMIT=$(python3 -c "print(int(float('$MIN') * 60 + 100))")  # hard stop; the last save survives it
run() {  # name, extra args...
  local name=$1; shift
  EDIT_ENGINE_KERNELS=torch timeout "$LIMIT" python3 -m edit_engine.cli.main train --out "$WORK/$name" \
    "${COMMON[@]}" "$@" > "$WORK/$name.out" 2>&1
  note "$name exit $?"
}
KB=(); [ "$DEVICE" = cpu ] && KB=(--smoke)
( EDIT_ENGINE_KERNELS=auto timeout 240 python -m edit_engine.kernels.bench "${KB[@]}" --json "$RES/kernels_bench.json" \
  > "$RES/kernels_bench.txt" 2>&1; note "kernels.bench exit $?" ) &
has() { [[ " $RUNS " == *" $1 "* ]]; }
has diff_mid && run diff_mid --preset mid --tokenizer "$TOK" --workers "${W:-5}" "${WIN[@]}" &
has ar_mid && run ar_mid --preset mid --tokenizer "$TOK" --objective ar --workers "${W:-5}" &
has diff_small && run diff_small --preset small --workers "${W:-4}" --init edit_engine/models/default "${WIN[@]}" &
wait
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv >> "$RES/machine.txt" 2>&1

# (3) The speed benchmark on this GPU (CPU check: --quick); its own hard stop so the packing below always runs.
BENCH=(--device cuda); [ "$DEVICE" = cpu ] && BENCH=(--device cpu --quick --threads 1)
if [ -d "$WORK/diff_mid/checkpoint" ] && [ -d "$WORK/ar_mid/checkpoint" ]; then
  for kb in auto torch; do
    EDIT_ENGINE_KERNELS=$kb timeout "${BENCH_S:-170}" python3 -m edit_engine.cli.main bench "${BENCH[@]}" --json \
      --model "$WORK/diff_mid/checkpoint" --ar-model "$WORK/ar_mid/checkpoint" > "$RES/bench_gpu_$kb.txt" \
      2> "$RES/bench_gpu_$kb.err"
    rc=$?; note "bench (kernels $kb) exit $rc"
    [ $rc = 0 ] || [ $rc = 124 ] && break  # done, or out of time (its rows are in the .err progress lines)
  done
fi

# (4) Pack: text results first, then the checkpoints in order of importance (a cut archive keeps its head).
for name in diff_mid ar_mid diff_small; do
  [ -d "$WORK/$name" ] || continue
  tr '\r' '\n' < "$WORK/$name.out" | grep -v '^step' > "$WORK/$name/train.out" 2>/dev/null
  tr '\r' '\n' < "$WORK/$name.out" | grep '^step' | tail -3 >> "$WORK/$name/train.out" 2>/dev/null
done
cp "$RES/machine.txt" "$OUT_DIR/machine.txt"
ITEMS=(results)
for name in diff_small diff_mid ar_mid; do
  for f in log.jsonl train.out checkpoint/config.json checkpoint/training.json checkpoint/model.safetensors; do
    [ -e "$WORK/$name/$f" ] && ITEMS+=("$name/$f")
  done
done
( cd "$WORK" && tar -cf - "${ITEMS[@]}" | gzip -1 ) | split -b 15000000 -d - "$OUT_DIR/runs.tgz.part-"
ls -la "$OUT_DIR"
cat "$RES/machine.txt"
