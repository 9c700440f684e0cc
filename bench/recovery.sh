#!/usr/bin/env bash
# Restart time of a Weir broker after `kill -9` in the middle of a write, compared with a clean
# restart, for a given amount of data in one partition and spread over several.
#
# Usage: bench/recovery.sh [options]
#
#   --work DIR          work directory (default: $WEIR_BENCH_WORK or /tmp/weir-bench); each run
#                       writes to DIR/recovery-<timestamp>/ and deletes its data dirs
#   --weir PATH         weir binary (default: target/release/weir of this repo); copied first
#   --perf PATH         rdkafka_performance (default: DIR/rdkafka_performance, built with
#                       bench/build-rdkafka-perf.sh when missing)
#   --mib N             data to write before the crash, in MiB (default 1024)
#   --record-size B     record value size (default 1024)
#   --partitions "N M"  partition counts (default "1 8")
#   --writer-secs S     how long the second producer writes before the kill (default 2)
#   --writer-rate R     its rate limit in records/s (default 10000, i.e. ~10 MB/s of 1 KiB
#                       records, so that it adds little to the data written before the crash)
#   --checkpoint-ms MS  log.flush.offset.checkpoint.interval.ms for the broker (default: the
#                       broker's default, 60000; the fill and crash take seconds, so by default
#                       no recovery point is checkpointed and the whole log is scanned)
#   --settle-secs S     wait this long after the fill before the second producer starts
#                       (default 0; with --checkpoint-ms, lets a checkpoint happen)
#   --cold              drop the page cache (sync; echo 3 > /proc/sys/vm/drop_caches, needs
#                       root) before each restart, so recovery reads the disk
#   --no-verify         skip reading everything back after the crash restart
#   --timeout S         deadline per client run and per start (default 1800)
#   --keep-data         keep each run's data directory
#
# For each partition count: start weir (flush.policy=never, the topic created with that config,
# so the writes are fast and nothing is fsynced before the crash), produce the data with acks=1,
# start a second producer that keeps writing, kill -9 the broker after --writer-secs, stop the
# producer, restart the broker and time it: launch to the timestamp of its `weir ready` log
# line, and launch to the last `partition opened` line. The `partition opened` lines (clean,
# segments_scanned, truncated_bytes, elapsed_ms) are summed up. Then every record is read back
# (the count must be at least what the first producer had acknowledged), the broker is
# stopped with SIGTERM and restarted once more to time a clean restart.
#
# Prints a markdown table on stdout and saves it, with the logs, in the run directory.
set -euo pipefail
export LC_ALL=C

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
WORK="${WEIR_BENCH_WORK:-/tmp/weir-bench}"
WEIR_SRC="$REPO/target/release/weir"
PERF=""
MIB=1024
RECORD=1024
PARTITIONS="1 8"
WRITER_SECS=2
WRITER_RATE=10000
COLD=0
VERIFY=1
CHECKPOINT_MS=""
SETTLE_SECS=0
TIMEOUT=1800
KEEP_DATA=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --work) WORK="$2"; shift 2 ;;
        --weir) WEIR_SRC="$2"; shift 2 ;;
        --perf) PERF="$2"; shift 2 ;;
        --mib) MIB="$2"; shift 2 ;;
        --record-size) RECORD="$2"; shift 2 ;;
        --partitions) PARTITIONS="$2"; shift 2 ;;
        --writer-secs) WRITER_SECS="$2"; shift 2 ;;
        --writer-rate) WRITER_RATE="$2"; shift 2 ;;
        --cold) COLD=1; shift ;;
        --checkpoint-ms) CHECKPOINT_MS="$2"; shift 2 ;;
        --settle-secs) SETTLE_SECS="$2"; shift 2 ;;
        --no-verify) VERIFY=0; shift ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --keep-data) KEEP_DATA=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

# shellcheck source=lib.sh
source "$HERE/lib.sh"
export WEIR_READY_TIMEOUT="$TIMEOUT"

mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
if [[ -z "$PERF" ]]; then
    PERF="$WORK/rdkafka_performance"
    [[ -x "$PERF" ]] || "$HERE/build-rdkafka-perf.sh" --work "$WORK" >&2
fi
[[ -x "$PERF" ]] || bench_die "rdkafka_performance not found at $PERF"

RUN_ROOT="$WORK/recovery-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN_ROOT"
bench_init "$RUN_ROOT" "$WEIR_SRC"
RESULTS="$RUN_ROOT/results.md"
COUNT=$(( MIB * 1024 * 1024 / RECORD ))

drop_caches() {
    [[ $COLD -eq 1 ]] || return 0
    sync
    if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
        bench_log "cannot drop the page cache here; this restart is warm"
        COLD_FAILED=1
    fi
}
COLD_FAILED=0

# open_summary LOG: "opened=N unclean=N scanned=N truncated=B sum_ms=N max_ms=N"
open_summary() {
    grep 'partition opened' "$1" | awk '
        { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
          n++; if (v["clean"] == "false") u++
          s += v["segments_scanned"]; t += v["truncated_bytes"]
          sum += v["elapsed_ms"]; if (v["elapsed_ms"] > mx) mx = v["elapsed_ms"] }
        END { printf "opened=%d unclean=%d scanned=%d truncated=%d sum_ms=%d max_ms=%d",
              n, u, s, t, sum, mx }'
}
field() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$2"; }

# wait_opened LOG N: wait (at most $TIMEOUT s) until LOG has N `partition opened` lines.
wait_opened() {
    local deadline=$(( $(date +%s) + TIMEOUT ))
    while (( $(grep -c 'partition opened' "$1" || true) < $2 )); do
        if (( $(date +%s) > deadline )); then
            bench_log "only $(grep -c 'partition opened' "$1" || true) of $2 partitions opened within ${TIMEOUT}s"
            return 0
        fi
        sleep 0.05
    done
}

# last_open_seconds LOG: seconds from WEIR_LAUNCH_TS to the last `partition opened` line.
last_open_seconds() {
    local ts
    ts="$(grep 'partition opened' "$1" | tail -n1 | awk '{ print $1 }')"
    [[ -n "$ts" ]] || { echo "n/a"; return; }
    awk -v a="$WEIR_LAUNCH_TS" -v b="$(date -d "$ts" +%s.%N)" 'BEGIN { printf "%.3f", b - a }'
}

ROWS=()
NOTES=()
for parts in $PARTITIONS; do
    RUN_DIR="$RUN_ROOT/p$parts"
    mkdir -p "$RUN_DIR"
    data="$RUN_DIR/data"
    topic="recovery-p$parts"
    env_vars=(WEIR_LOG_FLUSH_POLICY=never WEIR_NUM_PARTITIONS="$parts")
    [[ -z "$CHECKPOINT_MS" ]] ||
        env_vars+=(WEIR_LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL_MS="$CHECKPOINT_MS")
    bench_log "== $parts partition(s): $COUNT x $RECORD B (${MIB} MiB), then kill -9 mid-write"

    weir_start "$data" "$RUN_DIR/server-1-fill.log" "${env_vars[@]}"
    create_topic "$WEIR_ADDR" "$topic" "$parts" never
    run_client fill "$TIMEOUT" "$PERF" -P -t "$topic" -b "$WEIR_ADDR" -s "$RECORD" -c "$COUNT" \
        -a 1 -X linger.ms=5 -X batch.size=1000000 -i 5000
    fill_line="$(grep -E 'messages produced' "$RUN_DIR/fill.out" | tail -n1 || true)"
    acked="$(sed -n 's/.* \([0-9]*\) delivered .*/\1/p' <<<"$fill_line")"
    [[ -n "$acked" ]] || acked=0
    bench_log "fill: rc=$CLIENT_RC wall=${CLIENT_WALL}s :: ${fill_line#% }"

    sleep "$SETTLE_SECS"
    # A second producer keeps writing; the broker dies under it.
    timeout --kill-after=10 "$TIMEOUT" "$PERF" -P -t "$topic" -b "$WEIR_ADDR" -s "$RECORD" \
        -a 1 -r "$WRITER_RATE" -X linger.ms=5 -X batch.size=1000000 -i 1000 \
        >"$RUN_DIR/writer.out" 2>&1 &
    writer=$!
    BENCH_PIDS+=("$writer")
    sleep "$WRITER_SECS"
    kill -0 "$writer" 2>/dev/null || bench_log "warning: the second producer had already exited"
    crashed_pid="$WEIR_PID"
    weir_kill9
    bench_log "killed weir pid $crashed_pid with SIGKILL while the second producer was writing"
    # SIGINT makes rdkafka_performance stop and print its totals; `timeout` passes it on.
    kill -INT "$writer" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do kill -0 "$writer" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$writer" 2>/dev/null || true
    wait "$writer" 2>/dev/null || true
    forget_pid "$writer"
    writer_line="$(grep -E 'messages produced' "$RUN_DIR/writer.out" | tail -n1 || true)"
    du_mb="$(du -sm "$data" | cut -f1)"
    nseg="$(find "$data/logs" -name '*.log' | wc -l)"

    # Restart after the crash.
    drop_caches
    weir_start "$data" "$RUN_DIR/server-2-after-kill9.log" "${env_vars[@]}"
    k_ready="$(weir_ready_seconds "$RUN_DIR/server-2-after-kill9.log")"
    wait_opened "$RUN_DIR/server-2-after-kill9.log" "$parts"
    k_open="$(last_open_seconds "$RUN_DIR/server-2-after-kill9.log")"
    k_sum="$(open_summary "$RUN_DIR/server-2-after-kill9.log")"
    bench_log "restart after kill -9: ready ${k_ready}s, last partition opened ${k_open}s; $k_sum"

    consumed="n/a"
    if [[ $VERIFY -eq 1 ]]; then
        pargs=()
        for ((p = 0; p < parts; p++)); do pargs+=(-p "$p"); done
        run_client verify "$TIMEOUT" "$PERF" -C -t "$topic" -b "$WEIR_ADDR" "${pargs[@]}" \
            -o beginning -e -i 5000
        v_line="$(grep -E 'messages \(.*\) consumed' "$RUN_DIR/verify.out" | tail -n1 || true)"
        consumed="$(sed -n 's/^% \([0-9]*\) messages .*/\1/p' <<<"$v_line")"
        [[ -n "$consumed" ]] || consumed=0
        bench_log "read back: rc=$CLIENT_RC wall=${CLIENT_WALL}s :: ${v_line#% }"
        if (( consumed < acked )); then
            NOTES+=("- $parts partition(s): LOST DATA: read back $consumed records, first producer had $acked acknowledged")
        fi
    fi

    # Clean restart for comparison.
    src=0
    weir_stop || src=$?
    drop_caches
    weir_start "$data" "$RUN_DIR/server-3-clean.log" "${env_vars[@]}"
    c_ready="$(weir_ready_seconds "$RUN_DIR/server-3-clean.log")"
    wait_opened "$RUN_DIR/server-3-clean.log" "$parts"
    c_open="$(last_open_seconds "$RUN_DIR/server-3-clean.log")"
    c_sum="$(open_summary "$RUN_DIR/server-3-clean.log")"
    bench_log "clean restart: ready ${c_ready}s, last partition opened ${c_open}s; $c_sum"
    src2=0
    weir_stop || src2=$?

    ROWS+=("| $parts | ${du_mb} MB / $nseg segments | $k_ready | $k_open | $(field unclean "$k_sum")/$(field opened "$k_sum") | $(field scanned "$k_sum") | $(field truncated "$k_sum") | $(field sum_ms "$k_sum") / $(field max_ms "$k_sum") | $c_ready | $c_open | $(field scanned "$c_sum") | $(field sum_ms "$c_sum") / $(field max_ms "$c_sum") | $acked | $consumed |")
    NOTES+=("- $parts partition(s): fill ${fill_line#% }; second producer: ${writer_line#% }; SIGTERM exits: $src, $src2")
    for f in "$RUN_DIR"/server-*.log; do
        n="$(grep -cE ' (WARN|ERROR) ' "$f" || true)"
        [[ "$n" == 0 ]] || NOTES+=("  - $(basename "$f"): $n WARN/ERROR lines, first: $(grep -m1 -E ' (WARN|ERROR) ' "$f" | cut -c1-300)")
    done
    [[ $KEEP_DATA -eq 1 ]] || rm -rf "$data"
done

{
    echo "## Weir restart time after kill -9 mid-write (${MIB} MiB of ${RECORD} B records, flush.policy=never${CHECKPOINT_MS:+, checkpoint interval ${CHECKPOINT_MS} ms, ${SETTLE_SECS}s settle})"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $("$WEIR_BIN" --version 2>/dev/null | head -n1 || echo '?'), page cache: $( [[ $COLD -eq 1 && $COLD_FAILED -eq 0 ]] && echo dropped before each restart || echo warm)"
    echo
    echo "Times are seconds from launch. \"scanned\" is segments validated batch by batch; \"open ms\" is the sum / max of per-partition elapsed_ms."
    echo
    echo "| partitions | data | kill -9: ready s | kill -9: all partitions open s | unclean/opened | scanned | truncated bytes | open ms sum / max | clean: ready s | clean: all open s | clean: scanned | clean: open ms sum / max | acked before crash | read back |"
    echo "|---:|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    printf '%s\n' "${NOTES[@]}"
    echo
    echo "Run directory: $RUN_ROOT"
} | tee "$RESULTS"
