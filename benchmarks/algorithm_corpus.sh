#!/usr/bin/env bash
# The extra training corpus of small, docstring-led functions (edit-engine train --extra-corpus DIR/site-packages):
# pinned PyPI packages of data structures and algorithms, installed without their dependencies into DIR, then
# decontaminated: every file that shares a 13-word run with a HumanEval-infilling or SantaCoder-FIM program
# (python -m edit_engine.eval.contamination) is removed. Reproducible from this command; nothing of it enters the
# repository. Writes DIR/site-packages and DIR/contamination.json (the files removed).
#
#   benchmarks/algorithm_corpus.sh runs/extra        # then: edit-engine train ... --extra-corpus runs/extra/site-packages
#   benchmarks/algorithm_corpus.sh runs/extra2 v2    # v1 plus 30 utility and algorithm packages (the warm starts
#                                                    # on it scored worse on both benchmarks; not the default)
#   benchmarks/algorithm_corpus.sh runs/extra3 v3    # v1 plus 3 problem-solving packages (competitive
#                                                    # programming, the AtCoder library, the AIMA textbook's code)
#   benchmarks/algorithm_corpus.sh runs/heldout heldout  # never trained on: v2's additions less the two this
#                                                    # machine's own site-packages hold (more-itertools: vendored
#                                                    # by setuptools; sortedcontainers), for
#                                                    # benchmarks/sweep_commit.py --corpus DIR/site-packages
#                                                    # --all-files --holes functions
set -euo pipefail
DIR=${1:?usage: benchmarks/algorithm_corpus.sh DIR [v1|v2|v3|heldout]}
SET=${2:-v1}
V1=(
  algorithms==1.0.1 pygorithm==1.0.4 leetcode-solutions==0.1.0 python-ds==1.0.0 pydsa==0.14
  python-algorithms==0.2.2 algocraft==0.2.6 algods==0.2.0 algos-py==0.5.1 algorithms3==0.1.9 alex-solver==1.3
  cormen-lib==1.1.3 dalpy==1.0.2 algosinpy==0.1.0 algos-structs==0.1.0
)
# v2 adds utility libraries of short documented functions and more small algorithm packages
V2=(
  boltons==26.2.0 more-itertools==11.2.1 toolz==1.2.0 funcy==2.1 pydash==8.1.0 python-string-utils==1.0.0
  inflection==0.5.1 humanize==4.17.0 sortedcontainers==2.4.0 bidict==0.24.1 python-utils==4.2.0
  py-algorithms==0.26.1 dsa==13.3.0 primefac==2.0.12 euler==1.0.3 string-algorithms==0.5.0 strutils==0.1.1
  stringutils==0.3.0 pyfunctional==1.5.0 graph-algorithms==0.1.1 sorting-algorithms==0.1
  dynamic-programming==0.0.2 pythonds==1.2.1 pydatastructs==1.2.3 binarytree==6.5.1 trie==4.0.0 pygtrie==2.6.2
  heapdict==1.0.1 algorithm==1.2.0 codewars==0.0.621
)
# v3 adds only problem-solving code, v1's kind: contest algorithms and a textbook's worked functions
V3=(pyrival==0.2.0 ac-library-python==0.1.0 aima3==1.0.11)
case "$SET" in
  v1) PACKAGES=("${V1[@]}") ;;
  v2) PACKAGES=("${V1[@]}" "${V2[@]}") ;;
  v3) PACKAGES=("${V1[@]}" "${V3[@]}") ;;
  heldout) PACKAGES=()
    for p in "${V2[@]}"; do case "$p" in more-itertools==*|sortedcontainers==*) ;; *) PACKAGES+=("$p") ;; esac; done ;;
  *) echo "algorithm_corpus.sh: SET must be v1, v2, v3 or heldout, not '$SET'" >&2; exit 2 ;;
esac
mkdir -p "$DIR/site-packages"
python3 -m pip install -q --no-deps --target "$DIR/site-packages" "${PACKAGES[@]}"
find "$DIR/site-packages" -name __pycache__ -type d -prune -exec rm -rf {} +
python3 -m edit_engine.eval.contamination "$DIR/site-packages" --json "$DIR/contamination.json" || true
python3 - "$DIR/contamination.json" <<'EOF'
import json, os, sys
hits = json.load(open(sys.argv[1]))
for h in hits:
    os.remove(h["file"])
print(f"removed {len(hits)} file(s) that share a 13-word run with a benchmark program")
EOF
python3 -m edit_engine.eval.contamination "$DIR/site-packages"
