#!/usr/bin/env bash
# How long a one-line change takes to become a runnable `weir` binary.
#
#   bench/rebuild.sh [--profile iter|release] [--runs 3] [FILE...]
#
# For each FILE (default: crates/weir-broker/src/partition.rs), RUNS times: change one line of
# it (the message of its first tracing log line gains the run's number; a file without one
# gains a constant), `cargo build --profile PROFILE -p weir`, time it, and put the file back. Prints each run and the median per file. The first build brings the binary
# up to date with the tree as it is, untimed. Respects CARGO_TARGET_DIR. Run it with nothing
# else busy: it measures the machine.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PROFILE=iter
RUNS=3
FILES=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --profile) PROFILE="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) FILES+=("$1"); shift ;;
  esac
done
[[ ${#FILES[@]} -gt 0 ]] || FILES=(crates/weir-broker/src/partition.rs)
for file in "${FILES[@]}"; do
  [[ -f "$file" ]] || { echo "no such file: $file" >&2; exit 2; }
done

build() { cargo build --quiet --profile "$PROFILE" -p weir; }

echo "bringing the $PROFILE build up to date (untimed)"
build

for file in "${FILES[@]}"; do
  backup="$(mktemp)"
  cp -p "$file" "$backup"
  trap 'cp "$backup" "$file"' EXIT
  times=()
  for run in $(seq 1 "$RUNS"); do
    mark="run $run $(date +%s%N)"
    if grep -qE 'tracing::[a-z]+!\(.*"[^"]*"\);' "$file"; then
      MARK="$mark" perl -i -pe 'if (!$done && /tracing::[a-z]+!\(.*"[^"]*"\);/) { s/"([^"]*)"\);/"$1 ($ENV{MARK})");/; $done = 1 }' "$file"
    else
      printf '\n#[allow(dead_code)]\nconst REBUILD_MARK: &str = "%s";\n' "$mark" >>"$file"
    fi
    start=$(date +%s%N)
    build
    took=$(( ($(date +%s%N) - start) / 1000000 ))
    cp "$backup" "$file"
    times+=("$took")
    printf '%s run %s: %d.%03d s\n' "$file" "$run" $((took / 1000)) $((took % 1000))
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  printf '%s median of %s (%s profile): %d.%03d s\n' "$file" "$RUNS" "$PROFILE" $((median / 1000)) $((median % 1000))
  trap - EXIT
  rm -f "$backup"
done
# Leave the binary matching the tree.
build
