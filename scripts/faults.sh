#!/usr/bin/env bash
# Jepsen-style fault runs against a three-node `weir dev-cluster` (compat/faults/jepsen.py):
# producers, a consumer group and a nemesis (kill -9, SIGTERM, SIGSTOP of nodes and leaders),
# then a checker for lost, duplicated or reordered records and lost commits.
#
#   scripts/faults.sh --runs 50 --seed 7 [--duration 60] [--keep DIR]
#
# Uses $ROOT/.venv (scripts/test.sh creates it) and WEIR_BIN (default target/release/weir,
# built beforehand with `cargo build --release`). Exit code 1 if any run found an anomaly.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="$ROOT/.venv/bin/python"
export WEIR_BIN="${WEIR_BIN:-$ROOT/target/release/weir}"

if [[ ! -x "$PYTHON" ]]; then
  echo "no Python venv at $ROOT/.venv; run scripts/test.sh once to create it" >&2
  exit 2
fi
if [[ ! -x "$WEIR_BIN" ]]; then
  echo "weir binary not found at $WEIR_BIN; run cargo build --release or set WEIR_BIN" >&2
  exit 2
fi

cd "$ROOT"
exec "$PYTHON" "$ROOT/compat/faults/harness.py" "$@"
