#!/usr/bin/env bash
# Side by side: `graphcost analyze M --format json -o /dev/null` at two commits, alternating, in one run.
#
#   bash bench/compare_commits.sh BASE NEW [RUNS] [MODEL ...]
#
# Each commit is checked out into a worktree under ${TMPDIR:-/tmp}; the project's venv runs it from there
# (PYTHONPATH, with graphcost.passes/.hardware/.models linked to the top-level folders, as pyproject's
# package-dir maps them). Prints "model commit wall_s peak_rss_kib" per run, then medians. GNU time needed.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$1 new=$2 runs=${3:-3}
shift $(( $# >= 3 ? 3 : $# ))
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(models/tiny_cnn.onnx bench/data/gpt2-medium.onnx bench/data/synthetic-10k.onnx \
                                   bench/data/synthetic-100k.onnx)
py=${PYTHON:-$PWD/.venv/bin/python}  # the project venv (PYTHON= to use another)
tree() {  # a worktree of commit $1 with the package-dir links; prints its path
  local dir="${TMPDIR:-/tmp}/graphcost-bench-$1"
  [ -d "$dir" ] || git worktree add -q --detach "$dir" "$1"
  for sub in passes hardware models; do [ -e "$dir/graphcost/$sub" ] || ln -s "$dir/$sub" "$dir/graphcost/$sub"; done
  echo "$dir"
}
declare -A dirs=([$base]=$(tree "$base") [$new]=$(tree "$new"))
out=$(mktemp)
for m in "${models[@]}"; do
  cat "$m" > /dev/null  # page cache warm for both
  for _ in $(seq "$runs"); do
    for rev in "$base" "$new"; do
      t=$( { PYTHONPATH=${dirs[$rev]} /usr/bin/time -f "%e %M" "$py" -m graphcost analyze "$m" --format json \
             -o /dev/null > /dev/null; } 2>&1 | tail -1)
      echo "$(basename "$m") $rev $t" | tee -a "$out"
    done
  done
done
"$py" - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    model, rev, wall, rss = line.split()
    runs[model, rev].append((float(wall), int(rss)))
for (model, rev), v in runs.items():
    print(f"median {model:<24} {rev:<12} {statistics.median(w for w, _ in v):7.2f} s "
          f"{statistics.median(r for _, r in v) / 1024:7.0f} MiB")
PY
