#!/usr/bin/env bash
# The extra training corpus of small, docstring-led functions (edit-engine train --extra-corpus DIR/site-packages):
# pinned PyPI packages of data structures and algorithms, installed without their dependencies into DIR, then
# decontaminated: every file that shares a 13-word run with a HumanEval-infilling or SantaCoder-FIM program
# (scripts/contamination.py) is removed. Reproducible from this command; nothing of it enters the repository.
#
#   scripts/algorithm_corpus.sh runs/extra        # then: edit-engine train ... --extra-corpus runs/extra/site-packages
set -euo pipefail
DIR=${1:?usage: scripts/algorithm_corpus.sh DIR}
HERE=$(cd "$(dirname "$0")" && pwd)
PACKAGES=(
  algorithms==1.0.1 pygorithm==1.0.4 leetcode-solutions==0.1.0 python-ds==1.0.0 pydsa==0.14
  python-algorithms==0.2.2 algocraft==0.2.6 algods==0.2.0 algos-py==0.5.1 algorithms3==0.1.9 alex-solver==1.3
  cormen-lib==1.1.3 dalpy==1.0.2 algosinpy==0.1.0 algos-structs==0.1.0
)
mkdir -p "$DIR/site-packages"
python3 -m pip install -q --no-deps --target "$DIR/site-packages" "${PACKAGES[@]}"
find "$DIR/site-packages" -name __pycache__ -type d -prune -exec rm -rf {} +
python3 "$HERE/contamination.py" "$DIR/site-packages" --json "$DIR/contamination.json" || true
python3 - "$DIR/contamination.json" <<'EOF'
import json, os, sys
hits = json.load(open(sys.argv[1]))
for h in hits:
    os.remove(h["file"])
print(f"removed {len(hits)} file(s) that share a 13-word run with a benchmark program")
EOF
python3 "$HERE/contamination.py" "$DIR/site-packages"
