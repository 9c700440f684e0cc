#!/usr/bin/env bash
# Weir against Apache Kafka on the same machine, back to back, with the same clients and counts.
#
# Usage: bench/compare.sh [options]
#
#   --quick               short smoke run: 1M records in the produce/consume workload,
#                         5 s measured in each weir bench workload (explicit options win)
#   --work DIR            work directory (default: $WEIR_BENCH_WORK or /tmp/weir-bench); each run
#                         writes to DIR/compare-<timestamp>/ and deletes its data dirs
#   --weir PATH           weir binary (default: target/release/weir of this repo); copied first
#   --perf PATH           rdkafka_performance (default: DIR/rdkafka_performance, built with
#                         bench/build-rdkafka-perf.sh when missing)
#   --kafka-version V     Apache Kafka version, run with bench/kafka.sh (default 4.1.1); its
#                         jars are kept in DIR/kafka-<V> and reused
#   --kafka-heap SIZE     Kafka's -Xms/-Xmx (default 1g, as kafka-server-start.sh)
#   --targets "A B C"     brokers to measure, in order (default "weir-default weir-never kafka")
#   --workloads "A B C"   workloads, in order (default "produce-consume throughput latency")
#   --count N             produce-consume: records (default 20000000; --quick 1000000)
#   --size BYTES          produce-consume: record value size (default 100)
#   --acks A              produce-consume: producer acks (default -1, i.e. all)
#   --linger-ms MS        produce-consume: linger.ms (default 5)
#   --batch-bytes B       produce-consume: batch.size (default 1000000)
#   --bench-size BYTES    throughput and latency: record size (default 1024)
#   --bench-partitions N  throughput and latency: partitions (default 8)
#   --bench-acks A        throughput: acks (default 1, weir bench's default)
#   --throughput-duration S  throughput: seconds measured (default 20; --quick 5)
#   --latency-duration S  latency: seconds measured (default 30; --quick 5)
#   --latency-rate R      latency: records/s (default 50000); acks=1
#   --latency-linger-ms MS latency: the producer's linger (default 1, weir bench's default)
#   --prewarm S           before each measurement, run weir bench for S seconds at the maximum
#                         rate on a separate topic, then sync (default 0: brokers are measured
#                         from a cold start; a JVM compiles its hot paths during the first seconds)
#   --timeout S           deadline per client run (default 1800)
#   --keep-data           keep each run's data directory
#
# Targets: weir-default is `weir server` with its defaults (flush.policy=acks-all: an acks=all
# produce is answered after fsync); weir-never is the same with log.flush.policy=never (no fsync
# on the produce path, as Kafka); kafka is Apache Kafka in KRaft mode, one combined
# broker+controller node with the settings of its own config/server.properties
# (bench/kafka.sh). Every (workload, target) pair gets a freshly started broker on an empty data
# directory, after a `sync` so that writeback of the previous run's data does not overlap it.
# Topics are created up front with the workload's partition count and no topic configs
# (confluent-kafka from the repo's .venv or $BENCH_PYTHON; otherwise `weir topic create`), and
# the script waits until every partition answers ListOffsets.
#
# Workloads:
#   produce-consume  rdkafka_performance, as bench/produce-consume.sh: one producer (-P, acks,
#                    linger.ms, batch.size as above, one partition) then one assign-based
#                    consumer reading everything from the beginning (page cache).
#   throughput       weir bench at the maximum rate: one producer, one consumer, N partitions.
#   latency          weir bench at a fixed rate with acks=1: publish (send to ack) and
#                    end-to-end (send to receipt) latency percentiles.
#
# Broker CPU is utime+stime of the broker process (all threads, kernel time on their behalf
# included) from /proc/PID/stat, sampled right before and after each client run; client CPU
# comes from /usr/bin/time. "per M records" divides by the records the run wrote: for
# produce-consume the records delivered, for weir bench the sum of the partitions' end offsets
# after the run (warm-up and drain included, like the CPU figure). For weir bench the broker CPU
# covers producing and consuming together. A JVM warms up while it runs: unless --prewarm is
# given, no warm-up is given to either broker beyond weir bench's own 1 s. The "produce
# failures" in rdkafka_performance's summary line are local queue-full retries (the producer
# outran the broker), not lost records; "delivered" and "0 failed" are what count.
#
# Prints one markdown table per workload (Weir default, Weir never, Kafka, and the ratios
# Weir/Kafka) on stdout and saves it, with every client's output and the server logs, in the
# run directory.
set -euo pipefail
export LC_ALL=C

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
WORK="${WEIR_BENCH_WORK:-/tmp/weir-bench}"
WEIR_SRC="$REPO/target/release/weir"
PERF=""
KAFKA_VERSION=4.1.1
KAFKA_HEAP=1g
TARGETS="weir-default weir-never kafka"
WORKLOADS="produce-consume throughput latency"
QUICK=0
COUNT=""
SIZE=100
ACKS=-1
LINGER_MS=5
BATCH_BYTES=1000000
BENCH_SIZE=1024
BENCH_PARTITIONS=8
BENCH_ACKS=1
TPUT_DURATION=""
LAT_DURATION=""
LAT_RATE=50000
LAT_LINGER_MS=1
TIMEOUT=1800
KEEP_DATA=0
PREWARM=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) QUICK=1; shift ;;
        --work) WORK="$2"; shift 2 ;;
        --weir) WEIR_SRC="$2"; shift 2 ;;
        --perf) PERF="$2"; shift 2 ;;
        --kafka-version) KAFKA_VERSION="$2"; shift 2 ;;
        --kafka-heap) KAFKA_HEAP="$2"; shift 2 ;;
        --targets) TARGETS="$2"; shift 2 ;;
        --workloads) WORKLOADS="$2"; shift 2 ;;
        --count) COUNT="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --acks) ACKS="$2"; shift 2 ;;
        --linger-ms) LINGER_MS="$2"; shift 2 ;;
        --batch-bytes) BATCH_BYTES="$2"; shift 2 ;;
        --bench-size) BENCH_SIZE="$2"; shift 2 ;;
        --bench-partitions) BENCH_PARTITIONS="$2"; shift 2 ;;
        --bench-acks) BENCH_ACKS="$2"; shift 2 ;;
        --throughput-duration) TPUT_DURATION="$2"; shift 2 ;;
        --latency-duration) LAT_DURATION="$2"; shift 2 ;;
        --latency-rate) LAT_RATE="$2"; shift 2 ;;
        --latency-linger-ms) LAT_LINGER_MS="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        --prewarm) PREWARM="$2"; shift 2 ;;
        --keep-data) KEEP_DATA=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
if [[ $QUICK -eq 1 ]]; then
    : "${COUNT:=1000000}" "${TPUT_DURATION:=5}" "${LAT_DURATION:=5}"
else
    : "${COUNT:=20000000}" "${TPUT_DURATION:=20}" "${LAT_DURATION:=30}"
fi
for t in $TARGETS; do
    case "$t" in weir-default|weir-never|kafka) ;; *) echo "unknown target $t" >&2; exit 2 ;; esac
done
for w in $WORKLOADS; do
    case "$w" in produce-consume|throughput|latency) ;; *) echo "unknown workload $w" >&2; exit 2 ;; esac
done

# shellcheck source=lib.sh
source "$HERE/lib.sh"

command -v python3 >/dev/null || bench_die "python3 is needed to read weir bench's JSON reports"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
if [[ -z "$PERF" ]]; then
    PERF="$WORK/rdkafka_performance"
    [[ -x "$PERF" ]] || "$HERE/build-rdkafka-perf.sh" --work "$WORK" >&2
fi
[[ -x "$PERF" ]] || bench_die "rdkafka_performance not found at $PERF"
KAFKA_WORK="$WORK/kafka-$KAFKA_VERSION"
KAFKA_PORT=""
KAFKA_UP=0

STARTED_S="$(date +%s)"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
RUN_ROOT="$WORK/compare-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$RUN_ROOT"
bench_init "$RUN_ROOT" "$WEIR_SRC"
RESULTS="$RUN_ROOT/results.md"
PY="$(find_python)"

kafka_sh() { "$HERE/kafka.sh" "$1" --work "$KAFKA_WORK" --version "$KAFKA_VERSION" "${@:2}"; }

compare_cleanup() {
    bench_cleanup
    if [[ $KAFKA_UP -eq 1 ]]; then
        kafka_sh stop --stop-timeout 20 || true
    fi
}
trap compare_cleanup EXIT

# Fetch Kafka before any measurement, so a download never overlaps a run.
if [[ " $TARGETS " == *" kafka "* ]]; then
    kafka_sh fetch
fi

calc() { awk "BEGIN { printf \"%.$1f\", ($2) }"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# per_m CPU RECORDS: CPU seconds per million records.
per_m() { awk -v c="$1" -v n="$2" 'BEGIN { if (n > 0 && c == c + 0) printf "%.2f", c * 1e6 / n; else print "n/a" }'; }

# free_ports N: N distinct free loopback ports, space separated.
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# jget FILE KEY.PATH: a value from a JSON file ("n/a" when missing or null).
jget() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    v = json.load(open(sys.argv[1]))
    for k in sys.argv[2].split("."):
        v = v[k]
except Exception:
    v = None
if v is None:
    print("n/a")
elif isinstance(v, bool):
    print("yes" if v else "NO")
elif isinstance(v, float):
    print(f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}")
else:
    print(v)
EOF
}

# topic_create ADDR TOPIC PARTITIONS: create the topic without configs (so it takes the
# broker's defaults) and wait until every partition has a leader and answers ListOffsets.
topic_create() {
    local addr="$1" topic="$2" parts="$3"
    if [[ -n "$PY" ]]; then
        timeout 120 "$PY" - "$addr" "$topic" "$parts" <<'EOF'
import sys, time
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
addr, topic, parts = sys.argv[1], sys.argv[2], int(sys.argv[3])
admin = AdminClient({"bootstrap.servers": addr})
for f in admin.create_topics([NewTopic(topic, parts, 1)], operation_timeout=30).values():
    f.result(timeout=40)
consumer = Consumer({"bootstrap.servers": addr, "group.id": "bench-unused",
                     "enable.auto.commit": False, "log.connection.close": False})
deadline, last, t0 = time.time() + 60, None, time.time()
while True:
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        if md.error is None and len(md.partitions) == parts and all(
                p.leader >= 0 and p.error is None for p in md.partitions.values()):
            for p in range(parts):
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            break
        last = md.error or "partitions without a leader"
    except Exception as e:
        last = e
    if time.time() > deadline:
        sys.exit(f"topic {topic} not ready within 60 s: {last}")
    time.sleep(0.1)
consumer.close()
print(f"created {topic}: {parts} partition(s), every partition answering ListOffsets after "
      f"{time.time() - t0:.2f} s", file=sys.stderr)
EOF
    else
        local i
        timeout 60 "$WEIR_BIN" topic create "$topic" -p "$parts" --brokers "$addr" >&2
        for ((i = 0; i < 300; i++)); do
            timeout 30 "$WEIR_BIN" topic describe "$topic" --brokers "$addr" >/dev/null 2>&1 && return 0
            sleep 0.2
        done
        bench_die "topic $topic not ready within 60 s"
    fi
}

# topic_end_offsets ADDR TOPIC: sum of the partitions' end offsets (high watermarks), or n/a.
topic_end_offsets() {
    local addr="$1" topic="$2"
    if [[ -n "$PY" ]]; then
        timeout 120 "$PY" - "$addr" "$topic" <<'EOF' || echo "n/a"
import sys
from confluent_kafka import Consumer, TopicPartition
addr, topic = sys.argv[1], sys.argv[2]
consumer = Consumer({"bootstrap.servers": addr, "group.id": "bench-unused",
                     "enable.auto.commit": False, "log.connection.close": False})
md = consumer.list_topics(topic, timeout=10).topics[topic]
print(sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
          for p in md.partitions))
consumer.close()
EOF
    else
        timeout 30 "$WEIR_BIN" topic describe "$topic" --brokers "$addr" 2>/dev/null |
            awk '$1 ~ /^[0-9]+$/ && NF >= 6 { s += $6; n++ } END { if (n) print s; else print "n/a" }'
    fi
}

# broker_start TARGET: start a fresh broker for TARGET; sets ADDR and BROKER_PID.
broker_start() {
    sync_with_deadline
    case "$1" in
        weir-default|weir-never)
            local env=()
            [[ "$1" == weir-never ]] && env=(WEIR_LOG_FLUSH_POLICY=never)
            weir_start "$RUN_DIR/data" "$RUN_DIR/server.log" "${env[@]}"
            ADDR="$WEIR_ADDR"
            BROKER_PID="$WEIR_PID"
            ;;
        kafka)
            local ports
            read -r -a ports <<<"$(free_ports 2)"
            KAFKA_PORT="${ports[0]}"
            KAFKA_UP=1
            kafka_sh start --fresh --port "${ports[0]}" --controller-port "${ports[1]}" \
                --heap "$KAFKA_HEAP" --ready-timeout 180 >/dev/null
            BROKER_PID="$(cat "$KAFKA_WORK/kafka.pid")"
            ADDR="127.0.0.1:$KAFKA_PORT"
            ;;
    esac
    bench_log "$1: pid $BROKER_PID at $ADDR"
}

# broker_stop TARGET: stop the broker, keep its log in RUN_DIR, drop its data unless --keep-data.
# Sets BROKER_EXIT and BROKER_WARN (WARN/ERROR log lines).
broker_stop() {
    BROKER_EXIT=0
    case "$1" in
        weir-*)
            weir_stop || BROKER_EXIT=$?
            BROKER_WARN="$(grep -cE ' (WARN|ERROR) ' "$RUN_DIR/server.log" || true)"
            if [[ $KEEP_DATA -eq 0 ]]; then rm -rf "$RUN_DIR/data"; fi
            ;;
        kafka)
            kafka_sh stop --stop-timeout 60 || BROKER_EXIT=$?
            KAFKA_UP=0
            cp "$KAFKA_WORK/logs/server.log" "$RUN_DIR/server.log" 2>/dev/null || true
            cp "$KAFKA_WORK/kafka.out" "$RUN_DIR/kafka.out" 2>/dev/null || true
            # The first start's controller activation is logged at WARN by design; not counted.
            BROKER_WARN="$(grep -E '^\[[^]]*\] (WARN|ERROR) ' "$RUN_DIR/server.log" |
                grep -vc 'Performing controller activation' || true)"
            if [[ $KEEP_DATA -eq 1 ]]; then
                cp -r "$KAFKA_WORK/data" "$RUN_DIR/data"
            fi
            rm -rf "$KAFKA_WORK/data"
            ;;
    esac
}

sync_with_deadline() {
    local t0=$SECONDS
    timeout 600 sync || bench_log "sync did not finish within 600 s"
    if ((SECONDS - t0 > 1)); then bench_log "sync took $((SECONDS - t0)) s"; fi
}

declare -A R=()
NOTES=()
# put WORKLOAD TARGET KEY VALUE
put() { R["$1|$2|$3"]="$4"; }

run_produce_consume() {
    local target="$1" topic="pc"
    topic_create "$ADDR" "$topic" 1
    local c0 c1 c2 c3
    c0="$(proc_cpu "$BROKER_PID")"
    run_client produce "$TIMEOUT" "$PERF" -P -t "$topic" -b "$ADDR" \
        -s "$SIZE" -c "$COUNT" -a "$ACKS" \
        -X "linger.ms=$LINGER_MS" -X "batch.size=$BATCH_BYTES" -i 5000
    c1="$(proc_cpu "$BROKER_PID")"
    local p_wall="$CLIENT_WALL" p_rc="$CLIENT_RC" p_ccpu p_line p_delivered
    p_ccpu="$(client_cpu produce)"
    p_line="$(grep -E 'messages produced' "$RUN_DIR/produce.out" | tail -n1 || true)"
    p_delivered="$(sed -n 's/.* \([0-9]*\) delivered .*/\1/p' <<<"$p_line")"
    [[ -n "$p_delivered" ]] || p_delivered=0
    bench_log "produce: rc=$p_rc wall=${p_wall}s :: ${p_line#% }"

    c2="$(proc_cpu "$BROKER_PID")"
    run_client consume "$TIMEOUT" "$PERF" -C -t "$topic" -b "$ADDR" \
        -p 0 -o beginning -c "$p_delivered" -e -i 5000
    c3="$(proc_cpu "$BROKER_PID")"
    local c_wall="$CLIENT_WALL" c_rc="$CLIENT_RC" c_ccpu c_line c_msgs
    c_ccpu="$(client_cpu consume)"
    c_line="$(grep -E 'messages \(.*\) consumed' "$RUN_DIR/consume.out" | tail -n1 || true)"
    c_msgs="$(sed -n 's/^% \([0-9]*\) messages .*/\1/p' <<<"$c_line")"
    [[ -n "$c_msgs" ]] || c_msgs=0
    bench_log "consume: rc=$c_rc wall=${c_wall}s :: ${c_line#% }"

    local w=produce-consume p_cpu k_cpu
    p_cpu="$(sub "$c0" "$c1")"
    k_cpu="$(sub "$c2" "$c3")"
    put $w "$target" records "$p_delivered"
    put $w "$target" p_rate "$(calc 0 "$p_delivered / $p_wall")"
    put $w "$target" p_mb "$(calc 1 "$p_delivered * $SIZE / $p_wall / 1e6")"
    put $w "$target" p_bcpu "$p_cpu"
    put $w "$target" p_bcpu_m "$(per_m "$p_cpu" "$p_delivered")"
    put $w "$target" p_ccpu "$p_ccpu"
    put $w "$target" p_ccpu_m "$(per_m "$p_ccpu" "$p_delivered")"
    put $w "$target" c_rate "$(calc 0 "$c_msgs / $c_wall")"
    put $w "$target" c_mb "$(calc 1 "$c_msgs * $SIZE / $c_wall / 1e6")"
    put $w "$target" c_bcpu "$k_cpu"
    put $w "$target" c_bcpu_m "$(per_m "$k_cpu" "$c_msgs")"
    put $w "$target" c_ccpu "$c_ccpu"
    put $w "$target" c_ccpu_m "$(per_m "$c_ccpu" "$c_msgs")"
    NOTES+=("- produce-consume, $target: produce ${p_wall}s wall (rc $p_rc), consume ${c_wall}s wall (rc $c_rc); rdkafka_performance: ${p_line#% } / ${c_line#% }")
    if [[ "$c_msgs" != "$p_delivered" || "$p_delivered" != "$COUNT" ]]; then
        NOTES+=("  - MISMATCH: asked $COUNT, delivered $p_delivered, consumed $c_msgs")
    fi
}

# run_weir_bench WORKLOAD TARGET DURATION EXTRA_ARGS...
run_weir_bench() {
    local w="$1" target="$2" duration="$3" topic="bench-$1"
    shift 3
    topic_create "$ADDR" "$topic" "$BENCH_PARTITIONS"
    local c0 c1 json="$RUN_DIR/bench.json" limit
    limit="$(calc 0 "$duration + 180")"
    c0="$(proc_cpu "$BROKER_PID")"
    run_client bench "$limit" "$WEIR_BIN" bench --brokers "$ADDR" --topic "$topic" \
        --partitions "$BENCH_PARTITIONS" --record-size "$BENCH_SIZE" --duration "$duration" \
        --json "$json" "$@"
    c1="$(proc_cpu "$BROKER_PID")"
    local wall="$CLIENT_WALL" rc="$CLIENT_RC" written b_cpu ccpu
    written="$(topic_end_offsets "$ADDR" "$topic")"
    b_cpu="$(sub "$c0" "$c1")"
    ccpu="$(client_cpu bench)"
    bench_log "weir bench: rc=$rc wall=${wall}s, $written records written"
    if [[ $rc -ne 0 || ! -s "$json" ]]; then
        NOTES+=("- $w, $target: weir bench FAILED (rc $rc): $(grep -m3 -iE 'error|panic' "$RUN_DIR/bench.out" | tr '\n' ' ')")
    fi
    put "$w" "$target" held "$(jget "$json" rate_held)"
    put "$w" "$target" p_rate "$(jget "$json" produce.records_per_s)"
    put "$w" "$target" p_mb "$(jget "$json" produce.mb_per_s)"
    put "$w" "$target" c_rate "$(jget "$json" consume.records_per_s)"
    put "$w" "$target" c_mb "$(jget "$json" consume.mb_per_s)"
    local k q
    for k in publish_latency end_to_end_latency; do
        for q in p50 p90 p99 p999 max; do
            put "$w" "$target" "$k.$q" "$(jget "$json" "$k.${q}_ms")"
        done
    done
    put "$w" "$target" written "$written"
    put "$w" "$target" b_cpu "$b_cpu"
    put "$w" "$target" b_cpu_m "$(per_m "$b_cpu" "$written")"
    put "$w" "$target" ccpu "$ccpu"
    put "$w" "$target" ccpu_m "$(per_m "$ccpu" "$written")"
    NOTES+=("- $w, $target: weir bench ${wall}s wall (rc $rc), $written records written over warm-up, measurement and drain")
}

# prewarm: load the broker for PREWARM seconds on its own topic, then write everything back.
prewarm() {
    topic_create "$ADDR" prewarm 1
    run_client prewarm "$(calc 0 "$PREWARM + 120")" "$WEIR_BIN" bench --brokers "$ADDR" \
        --topic prewarm --partitions 1 --record-size 512 --duration "$PREWARM" --warmup 0 \
        --acks 1 --rate max
    [[ $CLIENT_RC -eq 0 ]] || bench_log "prewarm: weir bench rc $CLIENT_RC (see $RUN_DIR/prewarm.out)"
    sync_with_deadline
    bench_log "prewarm: ${CLIENT_WALL}s of load, then sync"
}

for w in $WORKLOADS; do
    for target in $TARGETS; do
        RUN_DIR="$RUN_ROOT/$w-$target"
        mkdir -p "$RUN_DIR"
        bench_log "== $w on $target"
        broker_start "$target"
        if [[ "$PREWARM" != 0 ]]; then prewarm; fi
        case "$w" in
            produce-consume) run_produce_consume "$target" ;;
            throughput)
                run_weir_bench throughput "$target" "$TPUT_DURATION" \
                    --acks "$BENCH_ACKS" --rate max ;;
            latency)
                run_weir_bench latency "$target" "$LAT_DURATION" \
                    --acks 1 --rate "$LAT_RATE" --linger-ms "$LAT_LINGER_MS" ;;
        esac
        put "$w" "$target" hwm "$(proc_hwm_mib "$BROKER_PID")"
        broker_stop "$target"
        put "$w" "$target" warn "$BROKER_WARN"
        NOTES+=("  - $target broker: exit $BROKER_EXIT, WARN/ERROR log lines $BROKER_WARN, log $RUN_DIR/server.log")
    done
done

# ratio A B: A/B to two decimals, or n/a.
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == a + 0 && b == b + 0 && b != 0) printf "%.2f", a / b; else print "n/a" }'
}

# table WORKLOAD then "KEY|LABEL" rows.
table() {
    local w="$1" row key label t cells head sep
    shift
    head="| | "
    sep="|---|"
    for t in $TARGETS; do
        case "$t" in
            weir-default) head+="Weir (default) | " ;;
            weir-never) head+="Weir (flush.policy=never) | " ;;
            kafka) head+="Kafka $KAFKA_VERSION | " ;;
        esac
        sep+="---:|"
    done
    local ratios=()
    if [[ " $TARGETS " == *" kafka "* ]]; then
        for t in $TARGETS; do
            case "$t" in
                weir-default) ratios+=(weir-default); head+="default / Kafka | "; sep+="---:|" ;;
                weir-never) ratios+=(weir-never); head+="never / Kafka | "; sep+="---:|" ;;
            esac
        done
    fi
    echo "${head% }"
    echo "$sep"
    for row in "$@"; do
        key="${row%%|*}"
        label="${row#*|}"
        cells="| $label |"
        for t in $TARGETS; do
            cells+=" ${R["$w|$t|$key"]:-n/a} |"
        done
        for t in "${ratios[@]}"; do
            cells+=" $(ratio "${R["$w|$t|$key"]:-}" "${R["$w|kafka|$key"]:-}") |"
        done
        echo "$cells"
    done
}

LAT_ROWS=()
for k in publish_latency end_to_end_latency; do
    name="publish (send→ack)"
    [[ $k == end_to_end_latency ]] && name="end-to-end (send→receipt)"
    for q in p50 p90 p99 p999 max; do
        qn="$q"
        [[ $q == p999 ]] && qn="p99.9"
        LAT_ROWS+=("$k.$q|$name $qn, ms (lower is better)")
    done
done
BENCH_ROWS_TAIL=(
    "written|records written (whole run)"
    "b_cpu|broker CPU s (whole run)"
    "b_cpu_m|broker CPU s per M records (lower is better)"
    "ccpu|weir bench CPU s"
    "ccpu_m|weir bench CPU s per M records"
    "hwm|broker peak RSS, MiB"
    "warn|broker WARN/ERROR log lines"
)

ELAPSED=$(($(date +%s) - STARTED_S))
{
    echo "## Weir and Apache Kafka $KAFKA_VERSION, one node each, back to back"
    echo
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(uname -r), $("$PERF" -h 2>&1 | grep -m1 -o 'librdkafka version [0-9.]*'), $("$WEIR_BIN" --version 2>/dev/null | head -n1 || echo '?'), $(java -version 2>&1 | head -n1), Kafka heap $KAFKA_HEAP, prewarm ${PREWARM} s$([[ $QUICK -eq 1 ]] && echo ', QUICK smoke run')"
    echo
    echo "Load average before the run: $LOAD_BEFORE (anything else running on the machine shows here)."
    echo
    echo "Ratios are Weir / Kafka: above 1 means more for Weir (better for rates, worse for CPU and latency)."
    for w in $WORKLOADS; do
        echo
        case "$w" in
            produce-consume)
                echo "### produce then consume: rdkafka_performance, $COUNT x $SIZE B, 1 partition, acks=$ACKS, linger.ms=$LINGER_MS, batch.size=$BATCH_BYTES"
                echo
                table "$w" \
                    "records|records delivered" \
                    "p_rate|produce records/s" \
                    "p_mb|produce MB/s" \
                    "p_bcpu|broker CPU s (produce)" \
                    "p_bcpu_m|broker CPU s per M records (produce)" \
                    "p_ccpu|producer CPU s" \
                    "p_ccpu_m|producer CPU s per M records" \
                    "c_rate|consume records/s" \
                    "c_mb|consume MB/s" \
                    "c_bcpu|broker CPU s (consume)" \
                    "c_bcpu_m|broker CPU s per M records (consume)" \
                    "c_ccpu|consumer CPU s" \
                    "c_ccpu_m|consumer CPU s per M records" \
                    "hwm|broker peak RSS, MiB" \
                    "warn|broker WARN/ERROR log lines"
                ;;
            throughput)
                echo "### throughput: weir bench, maximum rate, $BENCH_SIZE B records, $BENCH_PARTITIONS partitions, acks=$BENCH_ACKS, 1 producer + 1 consumer, ${TPUT_DURATION} s measured"
                echo
                table "$w" \
                    "p_rate|produce records/s" \
                    "p_mb|produce MB/s" \
                    "c_rate|consume records/s" \
                    "c_mb|consume MB/s" \
                    "publish_latency.p50|publish p50, ms" \
                    "publish_latency.p99|publish p99, ms" \
                    "end_to_end_latency.p50|end-to-end p50, ms" \
                    "end_to_end_latency.p99|end-to-end p99, ms" \
                    "${BENCH_ROWS_TAIL[@]}"
                ;;
            latency)
                echo "### latency: weir bench at $LAT_RATE records/s, $BENCH_SIZE B records, $BENCH_PARTITIONS partitions, acks=1, 1 producer + 1 consumer, ${LAT_DURATION} s measured"
                echo
                table "$w" \
                    "held|target rate held (≥95%)" \
                    "p_rate|produce records/s" \
                    "c_rate|consume records/s" \
                    "${LAT_ROWS[@]}" \
                    "${BENCH_ROWS_TAIL[@]}"
                ;;
        esac
    done
    echo
    printf '%s\n' "${NOTES[@]}"
    echo
    echo "Total wall time ${ELAPSED} s. Run directory: $RUN_ROOT"
} | tee "$RESULTS"
