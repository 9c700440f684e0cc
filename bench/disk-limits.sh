#!/usr/bin/env bash
# Raw limits of the disk under a Weir data directory, to read the broker's figures against:
# sequential write throughput ending in one fsync, and small synchronous writes (every write
# waits for the device, as an fsync per produce request would).
#
# Usage: bench/disk-limits.sh [--dir DIR] [--mib N] [--sync-writes N]
#
#   --dir DIR           directory on the disk to test (default: $WEIR_BENCH_WORK or
#                       /tmp/weir-bench); a file DIR/ddtest is written and deleted
#   --mib N             size of the sequential test in MiB (default 1024)
#   --sync-writes N     number of 16 KiB O_DSYNC writes (default 20000)
#
# Runs:
#   dd if=/dev/zero of=DIR/ddtest bs=1M count=N conv=fsync        (sequential, one fsync)
#   dd if=/dev/zero of=DIR/ddtest bs=16k count=N oflag=dsync      (each write synchronous)
# and prints dd's MB/s (10^6 bytes/s) plus, for the second, synchronous writes per second.
set -euo pipefail
export LC_ALL=C

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

DIR="${WEIR_BENCH_WORK:-/tmp/weir-bench}"
MIB=1024
SYNC_WRITES=20000
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dir) DIR="$2"; shift 2 ;;
        --mib) MIB="$2"; shift 2 ;;
        --sync-writes) SYNC_WRITES="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
FILE="$DIR/ddtest"
trap 'rm -f "$FILE"' EXIT

# dd_rate LOG: "<seconds> <MB/s>" from dd's summary line ("N bytes (...) copied, S s, R MB/s").
dd_rate() {
    local line bytes secs
    line="$(grep -E 'bytes .* copied' "$1" | tail -n1)"
    bytes="$(awk '{ print $1 }' <<<"$line")"
    secs="$(sed -n 's/.* copied, \([0-9.e+-]*\) s.*/\1/p' <<<"$line")"
    awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.3f %.1f\n", s, b / s / 1e6 }'
}

echo "## Disk limits of $DIR"
echo
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), filesystem: $(df -T "$DIR" | awk 'NR == 2 { print $1 " (" $2 ")" }'), free: $(df -h --output=avail "$DIR" | tail -n1 | tr -d ' ')"
echo

log="$(mktemp)"
timeout 1800 dd if=/dev/zero of="$FILE" bs=1M count="$MIB" conv=fsync 2>"$log"
read -r s1 r1 < <(dd_rate "$log")
rm -f "$FILE"

timeout 1800 dd if=/dev/zero of="$FILE" bs=16k count="$SYNC_WRITES" oflag=dsync 2>"$log"
read -r s2 r2 < <(dd_rate "$log")
rm -f "$FILE" "$log"

echo "| test | size | seconds | MB/s | writes/s |"
echo "|---|---:|---:|---:|---:|"
echo "| sequential 1 MiB writes, fsync at end (conv=fsync) | ${MIB} MiB | $s1 | $r1 | |"
echo "| 16 KiB writes, each O_DSYNC (oflag=dsync) | $SYNC_WRITES x 16 KiB | $s2 | $r2 | $(awk -v n="$SYNC_WRITES" -v s="$s2" 'BEGIN { printf "%.0f", n / s }') |"
