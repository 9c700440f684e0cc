# shellcheck shell=bash disable=SC2034
# Shared functions for the bench/ scripts: start and stop a Weir server, sample process CPU,
# create topics. Source it; it does not run anything by itself.
#
# Every wait here has a deadline, and every process started is recorded in BENCH_PIDS so that
# bench_cleanup (installed as an EXIT trap by bench_init) ends exactly those processes.

BENCH_PIDS=()
WEIR_PID=""
WEIR_ADDR=""
WEIR_LAUNCH_TS=""

bench_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bench_die() { bench_log "error: $*"; exit 1; }

# bench_init WORK WEIR_SOURCE: makes WORK, copies the weir binary into it (so a rebuild of the
# original does not change a running benchmark) and installs the cleanup trap.
bench_init() {
    local work="$1" src="$2"
    mkdir -p "$work"
    [[ -x "$src" ]] || bench_die "weir binary not found at $src (use --weir PATH)"
    cp "$src" "$work/weir.bin.part"
    mv "$work/weir.bin.part" "$work/weir"
    WEIR_BIN="$work/weir"
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

bench_cleanup() {
    local pid i alive
    for pid in "${BENCH_PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for ((i = 0; i < 50; i++)); do
        alive=0
        for pid in "${BENCH_PIDS[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        [[ $alive -eq 1 ]] || break
        sleep 0.1
    done
    for pid in "${BENCH_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

# run_client NAME TIMEOUT_S CMD...: run a load-generating client under `timeout` (which ends
# the client's whole process group at the deadline), with its output in $RUN_DIR/NAME.out and,
# when /usr/bin/time exists, its CPU time in $RUN_DIR/NAME.time ("user sys maxrss_kb").
# Sets CLIENT_WALL (seconds) and CLIENT_RC.
run_client() {
    local name="$1" limit="$2" t0 t1 pid
    shift 2
    local timer=()
    if [[ -x /usr/bin/time ]]; then
        timer=(/usr/bin/time -f '%U %S %M' -o "$RUN_DIR/$name.time")
    fi
    t0="$(now_s)"
    timeout --kill-after=10 "$limit" "${timer[@]}" "$@" >"$RUN_DIR/$name.out" 2>&1 &
    pid=$!
    BENCH_PIDS+=("$pid")
    CLIENT_RC=0
    wait "$pid" || CLIENT_RC=$?
    t1="$(now_s)"
    forget_pid "$pid"
    CLIENT_WALL="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
    if [[ $CLIENT_RC -eq 124 || $CLIENT_RC -eq 137 ]]; then
        bench_log "$name hit its ${limit}s deadline"
    fi
}

# client_cpu NAME: user+sys CPU seconds of the last run_client NAME, or n/a.
client_cpu() {
    if [[ -s "$RUN_DIR/$1.time" ]]; then
        tail -n1 "$RUN_DIR/$1.time" | awk '{ printf "%.2f", $1 + $2 }'
    else
        echo "n/a"
    fi
}

# proc_cpu PID: user+system CPU seconds the process has used so far (threads included).
proc_cpu() {
    local stat rest ticks
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo "nan"; return; }
    rest="${stat##*) }"                      # fields from 3 (state) on; comm may hold spaces
    # shellcheck disable=SC2086
    set -- $rest
    ticks="$(getconf CLK_TCK)"
    awk -v u="${12}" -v s="${13}" -v t="$ticks" 'BEGIN { printf "%.2f", (u + s) / t }'
}

# proc_cpu_split PID: "USER SYS" CPU seconds so far. System time includes the kernel's work
# done on the process's behalf, e.g. writing dirty pages back inside fsync.
proc_cpu_split() {
    local stat rest ticks
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || { echo "nan nan"; return; }
    rest="${stat##*) }"
    # shellcheck disable=SC2086
    set -- $rest
    ticks="$(getconf CLK_TCK)"
    awk -v u="${12}" -v s="${13}" -v t="$ticks" 'BEGIN { printf "%.2f %.2f", u / t, s / t }'
}

# proc_hwm_mib PID: peak resident set size in MiB.
proc_hwm_mib() {
    awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo "nan"
}

now_s() { date +%s.%N; }

# forget_pid PID: drop a reaped process from BENCH_PIDS.
forget_pid() {
    local keep=() p
    for p in "${BENCH_PIDS[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
    BENCH_PIDS=("${keep[@]}")
}

# weir_start DATA_DIR LOG_FILE [VAR=VALUE...]: start a server on a free loopback port with the
# given environment, wait (at most $WEIR_READY_TIMEOUT s, default 600) for its `weir ready` line
# and set WEIR_PID, WEIR_ADDR and WEIR_LAUNCH_TS (epoch seconds just before exec).
weir_start() {
    local data="$1" log="$2"
    shift 2
    local deadline=$(( $(date +%s) + ${WEIR_READY_TIMEOUT:-600} ))
    : >"$log"
    WEIR_LAUNCH_TS="$(now_s)"
    env "$@" "$WEIR_BIN" server --data-dir "$data" --listen 127.0.0.1:0 2>"$log" &
    WEIR_PID=$!
    BENCH_PIDS+=("$WEIR_PID")
    while ! grep -q 'weir ready' "$log"; do
        if ! kill -0 "$WEIR_PID" 2>/dev/null; then
            tail -n 20 "$log" >&2
            bench_die "weir exited before it was ready (log: $log)"
        fi
        if (( $(date +%s) > deadline )); then
            tail -n 20 "$log" >&2
            bench_die "weir not ready within ${WEIR_READY_TIMEOUT:-600}s (log: $log)"
        fi
        sleep 0.02
    done
    WEIR_ADDR="$(sed -n 's/.*weir ready.* advertised=\([^ ]*\).*/\1/p' "$log" | head -n1)"
    [[ -n "$WEIR_ADDR" ]] || bench_die "no advertised address in the ready line of $log"
}

# weir_ready_seconds LOG_FILE: seconds from WEIR_LAUNCH_TS to the timestamp of the ready line.
weir_ready_seconds() {
    local ts
    ts="$(grep -m1 'weir ready' "$1" | awk '{ print $1 }')"
    awk -v a="$WEIR_LAUNCH_TS" -v b="$(date -d "$ts" +%s.%N)" 'BEGIN { printf "%.3f", b - a }'
}

# weir_stop: SIGTERM, wait up to 20 s for a clean exit, then SIGKILL. Returns the exit code.
weir_stop() {
    [[ -n "$WEIR_PID" ]] || return 0
    local rc=0 i
    kill -TERM "$WEIR_PID" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        kill -0 "$WEIR_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$WEIR_PID" 2>/dev/null; then
        bench_log "weir pid $WEIR_PID did not stop within 20 s of SIGTERM; killing it"
        kill -KILL "$WEIR_PID" 2>/dev/null || true
    fi
    wait "$WEIR_PID" 2>/dev/null || rc=$?
    forget_pid "$WEIR_PID"
    WEIR_PID=""
    return "$rc"
}

# weir_kill9: SIGKILL the server and reap it.
weir_kill9() {
    [[ -n "$WEIR_PID" ]] || return 0
    kill -KILL "$WEIR_PID" 2>/dev/null || true
    wait "$WEIR_PID" 2>/dev/null || true
    forget_pid "$WEIR_PID"
    WEIR_PID=""
}

# find_python: a python3 that has confluent_kafka, or nothing.
find_python() {
    local here candidate
    here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    for candidate in "${BENCH_PYTHON:-}" "$here/.venv/bin/python" python3; do
        [[ -n "$candidate" ]] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import confluent_kafka' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 0
}

# create_topic ADDR TOPIC PARTITIONS FLUSH_POLICY: explicit CreateTopics (with the topic config
# flush.policy) when a Python with confluent_kafka is available; otherwise the topic is left to
# auto-creation, which takes num.partitions and log.flush.policy from the server's environment.
create_topic() {
    local addr="$1" topic="$2" parts="$3" policy="$4" py
    py="$(find_python)"
    if [[ -z "$py" ]]; then
        bench_log "no confluent_kafka Python: topic $topic will be auto-created from server defaults"
        return 0
    fi
    timeout 60 "$py" - "$addr" "$topic" "$parts" "$policy" <<'EOF'
import sys
from confluent_kafka.admin import AdminClient, NewTopic, ConfigResource
addr, topic, parts, policy = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
admin = AdminClient({"bootstrap.servers": addr})
for t, f in admin.create_topics(
        [NewTopic(topic, parts, 1, config={"flush.policy": policy})],
        operation_timeout=30).items():
    f.result(timeout=40)
res = ConfigResource(ConfigResource.Type.TOPIC, topic)
cfg = admin.describe_configs([res])[res].result(timeout=30)
print(f"created {topic}: partitions={parts} flush.policy={cfg['flush.policy'].value}",
      file=sys.stderr)
EOF
}
