#!/usr/bin/env bash
# Jepsen-style fault runs against a three-node Weir cluster (compat/faults/jepsen.py):
# producers, a consumer group and a nemesis (kill -9, SIGTERM, SIGSTOP of nodes and leaders;
# network partitions when the nodes run in network namespaces), then a checker for lost,
# duplicated or reordered records and lost commits. --workload txn runs transactional writers,
# a read-process-write processor and a read_committed consumer instead, checked for aborted and
# uncommitted reads, torn transactions and offsets committed without their records
# (compat/faults/txn.py).
#
#   scripts/faults.sh --runs 50 --seed 7 [--duration 60] [--keep DIR] [--rate N] [--keep-data]
#                     [--netns auto|on|off] [--faults all|process|partition]
#                     [--first-fault ACTION[:SECONDS]] [--hostile] [--workload append|txn]
#
# --netns auto (the default) runs the nodes in network namespaces of their own on a private
# bridge (10.213.0.0/24, inside the namespaces only; deleted afterwards) when it runs as root
# with iproute2's `ip`, so the nemesis can also cut links: a partition leader, the active
# controller or a node cut off from the others (the clients reaching every node, the majority
# or only the cut node), or a bridge (one node sees two that do not see each other), for less
# or more than the broker lease; otherwise a `weir dev-cluster` on 127.0.0.1 with the process
# faults only. --netns on refuses to run without namespaces, off never uses them. --faults
# picks the nemesis's actions; --first-fault forces the first one (partition-leader:14).
# `scripts/faults.sh --help` lists every option.
#
# Uses $ROOT/.venv (scripts/test.sh creates it) and WEIR_BIN (default target/release/weir,
# built beforehand with `cargo build --release`). Exit code 1 if any run found an anomaly, 2 on
# a usage error (or --netns on where namespaces cannot be made).

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="$ROOT/.venv/bin/python"
export WEIR_BIN="${WEIR_BIN:-$ROOT/target/release/weir}"

if [[ ! -x "$PYTHON" ]]; then
  echo "no Python venv at $ROOT/.venv; run scripts/test.sh once to create it" >&2
  exit 2
fi
wants_help=0
for arg in "$@"; do
  [[ "$arg" == "-h" || "$arg" == "--help" ]] && wants_help=1
done
if [[ $wants_help -eq 0 && ! -x "$WEIR_BIN" ]]; then
  echo "weir binary not found at $WEIR_BIN; run cargo build --release or set WEIR_BIN" >&2
  exit 2
fi

cd "$ROOT"
exec "$PYTHON" "$ROOT/compat/faults/harness.py" "$@"
