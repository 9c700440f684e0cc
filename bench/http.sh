#!/usr/bin/env bash
# HTTP publish (POST /topics/T/publish) beside the Kafka protocol at the same load: WORKERS
# senders each with one request outstanding, one record or a batch of 100 per request, acks=all,
# 100-byte values, one Weir server. Prints a markdown table: records/s and request p50/p99 for
# each, and the ratio HTTP/Kafka. The load generator is bench/http-load (Go; net/http for HTTP,
# franz-go for Kafka), built here.
#
#   bench/http.sh [--weir PATH] [--workers N] [--duration SECONDS] [--quick]
#
# Work files go to $WEIR_BENCH_WORK (default /tmp/weir-bench)/http.

set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

WEIR_SRC="$ROOT/target/release/weir"
WORKERS=16
DURATION=20
while [[ $# -gt 0 ]]; do
    case "$1" in
        --weir) WEIR_SRC="$2"; shift 2 ;;
        --workers) WORKERS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --quick) DURATION=3; shift ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) bench_die "unknown argument $1 (see --help)" ;;
    esac
done

WORK="${WEIR_BENCH_WORK:-/tmp/weir-bench}/http"
rm -rf "$WORK/data"
bench_init "$WORK" "$WEIR_SRC"
command -v go >/dev/null || bench_die "go is not on PATH (the load generator is a Go program)"
bench_log "building bench/http-load"
(cd "$HERE/http-load" && go build -o "$WORK/http-load" .)

weir_start "$WORK/data" "$WORK/weir.log" WEIR_HTTP_LISTEN=127.0.0.1:0
HTTP="$(sed -n 's/.*weir ready.* http=\([^ ]*\).*/\1/p' "$WORK/weir.log" | head -n1)"
[[ -n "$HTTP" ]] || bench_die "no http= address in the ready line of $WORK/weir.log"
bench_log "weir at $WEIR_ADDR, HTTP at $HTTP"
create_topic "$WEIR_ADDR" http-load 3 acks-all

declare -A RESULT
for batch in 1 100; do
    for mode in http kafka; do
        bench_log "batch $batch over $mode: $WORKERS workers, ${DURATION}s"
        RESULT[$mode-$batch]="$("$WORK/http-load" -mode "$mode" -http "http://$HTTP" -brokers "$WEIR_ADDR" \
            -topic http-load -batch "$batch" -workers "$WORKERS" -duration "${DURATION}s")"
        echo "${RESULT[$mode-$batch]}" >&2
    done
done
weir_stop || bench_log "weir exited with $?"

field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<<"${RESULT[$1]}"; }
echo
echo "| batch | protocol | records/s | requests/s | p50 ms | p99 ms | errors |"
echo "|---|---|---:|---:|---:|---:|---:|"
for batch in 1 100; do
    for mode in http kafka; do
        printf '| %s | %s | %.0f | %.0f | %.2f | %.2f | %s |\n' "$batch" "$mode" \
            "$(field "$mode-$batch" records_per_s)" "$(field "$mode-$batch" requests_per_s)" \
            "$(field "$mode-$batch" p50_ms)" "$(field "$mode-$batch" p99_ms)" "$(field "$mode-$batch" errors)"
    done
    awk -v h="$(field "http-$batch" records_per_s)" -v k="$(field "kafka-$batch" records_per_s)" \
        -v hp="$(field "http-$batch" p99_ms)" -v kp="$(field "kafka-$batch" p99_ms)" \
        -v b="$batch" 'BEGIN { printf "| %s | HTTP/Kafka | %.2f× | | | %.2f× | |\n", b, h / k, hp / kp }'
done
for key in "${!RESULT[@]}"; do
    first="$(sed -n 's/.*"first_error":"\(.*\)"}$/\1/p' <<<"${RESULT[$key]}")"
    [[ -z "$first" ]] || echo "first error of $key: $first"
done
