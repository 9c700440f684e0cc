#!/usr/bin/env bash
# Produce/consume throughput of a single Weir broker, measured with librdkafka's
# rdkafka_performance, for each flush policy and partition count.
#
# Usage: bench/produce-consume.sh [options]
#
#   --work DIR          work directory (default: $WEIR_BENCH_WORK or /tmp/weir-bench); each run
#                       writes to DIR/produce-consume-<timestamp>/ and deletes its data dirs
#   --weir PATH         weir binary (default: target/release/weir of this repo); copied first
#   --perf PATH         rdkafka_performance (default: DIR/rdkafka_performance, built with
#                       bench/build-rdkafka-perf.sh when missing)
#   --count N           records per run (default 20000000: ~2 GB, about 10 s per phase here;
#                       much shorter runs are dominated by start-up and noise)
#   --size BYTES        record value size (default 100)
#   --policies "A B"    flush policies (default "acks-all never"; also: always)
#   --partitions "N M"  partition counts (default "1 8")
#   --codecs "A B"      producer compression codecs (default "none"; also gzip snappy lz4 zstd);
#                       the broker decompresses and checks every record of compressed batches
#   --acks A            producer acks (default -1, i.e. all)
#   --linger-ms MS      producer linger.ms (default 5)
#   --batch-bytes B     producer batch.size (default 1000000)
#   --timeout S         deadline per client run (default 1800)
#   --keep-data         keep each run's data directory
#
# For every (policy, partitions) pair: start weir on a fresh data directory, create the topic
# (topic config flush.policy=<policy>), produce N records with one producer (no key, so
# librdkafka's sticky partitioner spreads batches over partitions), then consume them all from
# the beginning with one assign-based consumer (rdkafka_performance -C, every partition given
# with -p, no consumer group). The broker's CPU time (utime+stime from /proc/PID/stat) is
# sampled before and after each phase; client CPU comes from /usr/bin/time when present.
# Broker CPU includes kernel time spent on its threads, such as writing dirty pages back inside
# fsync; with flush.policy=never that writeback is done by kernel flusher threads instead and
# is not counted. The notes split it into user and system time.
# MB/s is 10^6 bytes of record values per second of client wall time (client start to exit,
# so it includes connection set-up and, for the producer, waiting for the last ack).
# The consumer reads right after the producer, so it is served from the page cache; its wall
# time includes about 0.5 s that librdkafka's assign-based consumer waits before its first
# ListOffsets (rdkafka_performance's own figure, kept in the notes, excludes it).
# With small records one client process needs about a core of its own: compare client CPU with
# wall time to see whether the client, not the broker, set the pace.
#
# Prints a markdown table on stdout and saves it, with every client's output and the server
# logs, in the run directory.
set -euo pipefail
export LC_ALL=C

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
WORK="${WEIR_BENCH_WORK:-/tmp/weir-bench}"
WEIR_SRC="$REPO/target/release/weir"
PERF=""
COUNT=20000000
SIZE=100
POLICIES="acks-all never"
PARTITIONS="1 8"
CODECS="none"
ACKS=-1
LINGER_MS=5
BATCH_BYTES=1000000
TIMEOUT=1800
KEEP_DATA=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --work) WORK="$2"; shift 2 ;;
        --weir) WEIR_SRC="$2"; shift 2 ;;
        --perf) PERF="$2"; shift 2 ;;
        --count) COUNT="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --policies) POLICIES="$2"; shift 2 ;;
        --partitions) PARTITIONS="$2"; shift 2 ;;
        --codecs) CODECS="$2"; shift 2 ;;
        --acks) ACKS="$2"; shift 2 ;;
        --linger-ms) LINGER_MS="$2"; shift 2 ;;
        --batch-bytes) BATCH_BYTES="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --keep-data) KEEP_DATA=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

# shellcheck source=lib.sh
source "$HERE/lib.sh"

mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
if [[ -z "$PERF" ]]; then
    PERF="$WORK/rdkafka_performance"
    [[ -x "$PERF" ]] || "$HERE/build-rdkafka-perf.sh" --work "$WORK" >&2
fi
[[ -x "$PERF" ]] || bench_die "rdkafka_performance not found at $PERF"

RUN_ROOT="$WORK/produce-consume-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN_ROOT"
bench_init "$RUN_ROOT" "$WEIR_SRC"
RESULTS="$RUN_ROOT/results.md"

# calc DIGITS EXPR: evaluate an arithmetic expression with awk.
calc() { awk "BEGIN { printf \"%.$1f\", ($2) }"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
pct() { awk -v c="$1" -v w="$2" 'BEGIN { printf "%.0f", 100 * c / w }'; }

ROWS=()
NOTES=()
for codec in $CODECS; do
for policy in $POLICIES; do
    for parts in $PARTITIONS; do
        RUN_DIR="$RUN_ROOT/$policy-p$parts-$codec"
        mkdir -p "$RUN_DIR"
        data="$RUN_DIR/data"
        topic="bench-$policy-p$parts"
        zargs=()
        [[ "$codec" == none ]] || zargs=(-z "$codec")
        bench_log "== flush.policy=$policy partitions=$parts codec=$codec: $COUNT x $SIZE B"
        weir_start "$data" "$RUN_DIR/server.log" \
            WEIR_LOG_FLUSH_POLICY="$policy" WEIR_NUM_PARTITIONS="$parts"
        bench_log "weir pid $WEIR_PID at $WEIR_ADDR"
        create_topic "$WEIR_ADDR" "$topic" "$parts" "$policy"

        # --- produce ---
        c0="$(proc_cpu "$WEIR_PID")"
        read -r u0 s0 < <(proc_cpu_split "$WEIR_PID"; echo)
        run_client produce "$TIMEOUT" "$PERF" -P -t "$topic" -b "$WEIR_ADDR" \
            -s "$SIZE" -c "$COUNT" -a "$ACKS" "${zargs[@]}" \
            -X "linger.ms=$LINGER_MS" -X "batch.size=$BATCH_BYTES" -i 5000
        c1="$(proc_cpu "$WEIR_PID")"
        read -r u1 s1 < <(proc_cpu_split "$WEIR_PID"; echo)
        p_wall="$CLIENT_WALL"
        p_rc="$CLIENT_RC"
        p_ccpu="$(client_cpu produce)"
        p_line="$(grep -E 'messages produced' "$RUN_DIR/produce.out" | tail -n1 || true)"
        p_delivered="$(sed -n 's/.* \([0-9]*\) delivered .*/\1/p' <<<"$p_line")"
        [[ -n "$p_delivered" ]] || p_delivered=0
        bench_log "produce: rc=$p_rc wall=${p_wall}s :: ${p_line#% }"
        du_mb="$(du -sm "$data" | cut -f1)"

        # --- consume ---
        pargs=()
        for ((p = 0; p < parts; p++)); do pargs+=(-p "$p"); done
        c2="$(proc_cpu "$WEIR_PID")"
        read -r u2 s2 < <(proc_cpu_split "$WEIR_PID"; echo)
        run_client consume "$TIMEOUT" "$PERF" -C -t "$topic" -b "$WEIR_ADDR" \
            "${pargs[@]}" -o beginning -c "$p_delivered" -e -i 5000
        c3="$(proc_cpu "$WEIR_PID")"
        read -r u3 s3 < <(proc_cpu_split "$WEIR_PID"; echo)
        c_wall="$CLIENT_WALL"
        c_rc="$CLIENT_RC"
        c_ccpu="$(client_cpu consume)"
        c_line="$(grep -E 'messages \(.*\) consumed' "$RUN_DIR/consume.out" | tail -n1 || true)"
        c_msgs="$(sed -n 's/^% \([0-9]*\) messages .*/\1/p' <<<"$c_line")"
        [[ -n "$c_msgs" ]] || c_msgs=0
        bench_log "consume: rc=$c_rc wall=${c_wall}s :: ${c_line#% }"
        psizes=""
        for ((p = 0; p < parts; p++)); do
            psizes+="p$p=$(du -sm "$data/logs/$topic-$p" 2>/dev/null | cut -f1) "
        done
        hwm="$(proc_hwm_mib "$WEIR_PID")"

        src=0
        weir_stop || src=$?
        errs="$(grep -cE ' (WARN|ERROR) ' "$RUN_DIR/server.log" || true)"

        p_cpu="$(sub "$c0" "$c1")"
        k_cpu="$(sub "$c2" "$c3")"
        ROWS+=("| $codec | $policy | $parts | $p_delivered | $(calc 0 "$p_delivered / $p_wall") | $(calc 1 "$p_delivered * $SIZE / $p_wall / 1e6") | $p_cpu | $(pct "$p_cpu" "$p_wall")% | $p_ccpu | $c_msgs | $(calc 0 "$c_msgs / $c_wall") | $(calc 1 "$c_msgs * $SIZE / $c_wall / 1e6") | $k_cpu | $(pct "$k_cpu" "$c_wall")% | $c_ccpu |")
        NOTES+=("- $codec, $policy, $parts partition(s): produce ${p_wall}s wall (rc $p_rc), consume ${c_wall}s wall (rc $c_rc); data dir ${du_mb} MB; broker peak RSS ${hwm} MiB; broker user/sys CPU s: produce $(sub "$u0" "$u1")/$(sub "$s0" "$s1"), consume $(sub "$u2" "$u3")/$(sub "$s2" "$s3"); server exit $src; WARN/ERROR log lines: $errs; partition sizes (MB): ${psizes% }")
        NOTES+=("  - rdkafka_performance: ${p_line#% } / ${c_line#% }")
        if [[ "$c_msgs" != "$p_delivered" || "$p_delivered" != "$COUNT" ]]; then
            NOTES+=("  - MISMATCH: asked $COUNT, delivered $p_delivered, consumed $c_msgs")
        fi
        [[ $KEEP_DATA -eq 1 ]] || rm -rf "$data"
    done
done
done

{
    echo "## Weir produce/consume ($COUNT records of $SIZE B, acks=$ACKS, linger.ms=$LINGER_MS, batch.size=$BATCH_BYTES)"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $("$PERF" -h 2>&1 | grep -m1 -o 'librdkafka version [0-9.]*'), $("$WEIR_BIN" --version 2>/dev/null | head -n1 || echo '?')"
    echo
    echo "| codec | policy | partitions | records | produce rec/s | produce MB/s | broker CPU s (produce) | broker % of a core | producer CPU s | consumed | consume rec/s | consume MB/s | broker CPU s (consume) | broker % of a core | consumer CPU s |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    printf '%s\n' "${NOTES[@]}"
    echo
    echo "Run directory: $RUN_ROOT"
} | tee "$RESULTS"
