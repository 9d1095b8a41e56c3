#!/usr/bin/env bash
# The commit policy's measures for one checkpoint, each written as JSON under OUT (then compare checkpoints with
# python scripts/candidate_table.py OUT_A OUT_B ...):
#   held-out (chosen on first): masked CE and context gap (512 examples), and the editor's path on 500 held-out
#   line holes at the checkpoint's sampler point (floor, spread and length threshold of its sampler.json; exact
#   match, prefix accuracy, edit similarity, code parse);
#   benchmarks (reported, run once): HumanEval single-line and SantaCoder-FIM Python, first LIMIT tasks, bare
#   (Engine.infill) and through the editor's path (--document), at the checkpoint's own sampler.json.
#
#   scripts/candidate_eval.sh MODEL_DIR|packaged OUT [THREADS]     # LIMIT=300 by default
#   EXTRA=runs/extra/site-packages scripts/candidate_eval.sh ...   # also masked CE on that root's held-out files
#   HELDOUT=runs/heldout/site-packages scripts/candidate_eval.sh ...  # also 600 HumanEval-shaped holes (a body
#     line of a short docstring-led function, that function as the context) in packages no checkpoint trained
#     on (scripts/algorithm_corpus.sh DIR heldout), bare, at the same sampler point
set -euo pipefail
MODEL=${1:?usage: scripts/candidate_eval.sh MODEL_DIR|packaged OUT [THREADS]}
OUT=${2:?usage: scripts/candidate_eval.sh MODEL_DIR|packaged OUT [THREADS]}
THREADS=${3:-1}
LIMIT=${LIMIT:-300}
HERE=$(cd "$(dirname "$0")" && pwd)
M=()
[ "$MODEL" = packaged ] || M=(--model "$MODEL")
# A training checkpoint has no sampler.json, and without one the benchmarks run at the engine's default (floor 1,
# no spread): 3-4x the passes per token of the packaged point, so not comparable with it. Refuse rather than guess.
if [ "$MODEL" != packaged ] && [ ! -f "$MODEL/sampler.json" ]; then
  echo "candidate_eval.sh: $MODEL has no sampler.json; to compare at the packaged point:" >&2
  echo "  cp edit_engine/models/default/sampler.json $MODEL/" >&2
  exit 2
fi
if [ "$MODEL" = packaged ]; then SAMPLER="$HERE/../edit_engine/models/default/sampler.json"
else SAMPLER="$MODEL/sampler.json"; fi
# the sweeps' policy row: the checkpoint's floor, spread, floor ramp, length threshold and novel-name penalty
# (defaults as SamplerConfig's), so the held-out rows run at the same point as the benchmark rows
read -r FLOOR SPREAD RAMP PAD NOVEL < <(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print(d.get("min_commit", 1), int(d.get("spread", 0)), d.get("floor_ramp", 0), d.get("pad_threshold", 0.5),
      d.get("novel_penalty", 0.0))' "$SAMPLER")
POINT=(--floors "$FLOOR" --spread "$SPREAD" --floor-ramp "$RAMP" --pad-thresholds "$PAD" --novel-penalty "$NOVEL")
mkdir -p "$OUT"
ee() { python3 -c 'import sys; from edit_engine.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }
ee eval --context-gap --limit 512 --json --no-progress --threads "$THREADS" "${M[@]}" | tail -1 > "$OUT/context_gap.json"
if [ -n "${EXTRA:-}" ]; then
  ee eval --context-gap --corpus "$EXTRA" --limit 512 --json --no-progress --threads "$THREADS" "${M[@]}" \
    | tail -1 > "$OUT/context_gap_extra.json"
fi
if [ -n "${HELDOUT:-}" ]; then
  python3 "$HERE/sweep_commit.py" "${M[@]}" --holes functions --corpus "$HELDOUT" --all-files --n 600 "${POINT[@]}" \
    --threads "$THREADS" --json "$OUT/heldout_functions.json" > "$OUT/heldout_functions.txt"
fi
python3 "$HERE/sweep_commit.py" "${M[@]}" --holes lines --n 500 "${POINT[@]}" --document --threads "$THREADS" \
  --json "$OUT/heldout_lines_document.json" > "$OUT/heldout_lines_document.txt"
for bench in humaneval-single santacoder-fim; do
  for path in bare document; do
    flag=(); [ "$path" = document ] && flag=(--document)
    ee eval --benchmark "$bench" --limit "$LIMIT" --json --no-progress --threads "$THREADS" "${M[@]}" "${flag[@]}" \
      --out "$OUT/$bench-$path.jsonl" | tail -1 > "$OUT/$bench-$path.json"
  done
done
echo "wrote $OUT"
