#!/usr/bin/env bash
# Run Apache Kafka (KRaft, one combined broker+controller node) on 127.0.0.1 as the reference
# broker for bench/compare.sh, or one node of a local multi-node KRaft cluster
# (bench/cluster-compare.sh).
#
# Usage: bench/kafka.sh start|stop|status|fetch [options]
#
#   start               fetch the jars when missing, format the storage when it is not yet
#                       formatted, start the server and wait until it is ready; a server already
#                       running from the same work directory is left as it is
#   stop                SIGTERM, wait for a clean exit (at most --stop-timeout), then SIGKILL;
#                       nothing to do when it is not running
#   status              print "running pid P 127.0.0.1:PORT" (exit 0) or "stopped" (exit 3)
#   fetch               only download the jars
#
#   --port P            client listener port (default 19092); the controller listens on P+1
#   --controller-port C controller listener port (default P+1)
#   --work DIR          directory for jars, config, data, logs and pid file
#                       (default: $WEIR_BENCH_WORK/kafka-<version>, i.e. /tmp/weir-bench/kafka-<version>)
#   --version V         Kafka version from Maven Central (default 4.1.1; 4.x only: KRaft)
#   --log4j-version V   log4j2 version for the SLF4J binding (default 2.24.3, as Kafka 4.1 uses)
#   --heap SIZE         -Xms and -Xmx (default 1g, as kafka-server-start.sh)
#   --fresh             (start) delete the data and logs first, so the server starts empty
#   --ready-timeout S   deadline for the server to become ready (default 180)
#   --stop-timeout S    deadline for a clean exit before SIGKILL (default 60)
#   --set KEY=VALUE     (start) extra or overriding server property; repeatable
#   --bare              (start) only what a one-node KRaft server needs (listeners, quorum,
#                       log.dirs, replication factors of 1 for the internal topics): every other
#                       setting at Kafka's default, so that DescribeConfigs reports Kafka's
#                       defaults as such (the differential suite's reference)
#   --libs DIR          jar directory (default DIR/libs of --work); lets the nodes of a cluster,
#                       each with its own --work, share one download
#
# One node of a multi-node cluster (every node a broker and a controller, static quorum):
#   --node-id N         node.id (default 1)
#   --voters LIST       controller.quorum.voters, the same on every node, e.g.
#                       1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194 (default: this node
#                       alone, N@127.0.0.1:C); the internal topics (consumer offsets, transaction
#                       and share-group state) get min(3, voters) replicas and a min ISR of
#                       min(2, voters), Kafka's own defaults for three or more nodes
#   --cluster-id ID     cluster id to format the storage with, the same on every node (default:
#                       a new random one; a cluster needs one given: StorageTool random-uuid,
#                       or any 16 bytes in URL-safe base64 without padding, not starting with -)
# Each node has its own --work (config, data, logs, pid file) and ports. `start` returns once
# its node is ready, which needs a majority of the voters running: start the nodes of a
# cluster concurrently (one `start` per node, in the background) and wait for all of them.
#
# The jars come from Maven Central through `mvn dependency:copy-dependencies` on a generated
# pom (kafka_2.13, kafka-tools without Connect, and log4j-slf4j-impl), into DIR/libs. The
# server properties are those of Kafka's own config/server.properties for a combined KRaft
# node, with listeners on 127.0.0.1 and log.dirs in DIR/data; flushing is left at Kafka's
# defaults (no fsync on the produce path). JVM options are those of kafka-server-start.sh
# (G1, MaxGCPauseMillis=20, 1 GiB heap). Logs: DIR/logs/server.log (INFO) and DIR/kafka.out.
set -euo pipefail
export LC_ALL=C

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

ACTION="${1:-}"
case "$ACTION" in
    start|stop|status|fetch) shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
esac

VERSION=4.1.1
LOG4J_VERSION=2.24.3
PORT=19092
CPORT=""
WORK=""
HEAP=1g
FRESH=0
BARE=0
READY_TIMEOUT=180
STOP_TIMEOUT=60
EXTRA=()
LIBS=""
NODE_ID=1
VOTERS=""
CLUSTER_ID=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --port) PORT="$2"; shift 2 ;;
        --controller-port) CPORT="$2"; shift 2 ;;
        --work) WORK="$2"; shift 2 ;;
        --version) VERSION="$2"; shift 2 ;;
        --log4j-version) LOG4J_VERSION="$2"; shift 2 ;;
        --heap) HEAP="$2"; shift 2 ;;
        --fresh) FRESH=1; shift ;;
        --bare) BARE=1; shift ;;
        --ready-timeout) READY_TIMEOUT="$2"; shift 2 ;;
        --stop-timeout) STOP_TIMEOUT="$2"; shift 2 ;;
        --set) EXTRA+=("$2"); shift 2 ;;
        --libs) LIBS="$2"; shift 2 ;;
        --node-id) NODE_ID="$2"; shift 2 ;;
        --voters) VOTERS="$2"; shift 2 ;;
        --cluster-id) CLUSTER_ID="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ "$VERSION" == 4.* ]] || { echo "only Kafka 4.x (KRaft) is supported, not $VERSION" >&2; exit 2; }
[[ "$NODE_ID" =~ ^[0-9]+$ ]] || { echo "--node-id wants a number, not $NODE_ID" >&2; exit 2; }
[[ -z "$CLUSTER_ID" || "$CLUSTER_ID" =~ ^[A-Za-z0-9_][A-Za-z0-9_-]{21}$ ]] ||
    { echo "--cluster-id wants 22 URL-safe base64 characters not starting with -, not $CLUSTER_ID" >&2; exit 2; }
[[ -n "$CPORT" ]] || CPORT=$((PORT + 1))
[[ -n "$VOTERS" ]] || VOTERS="$NODE_ID@127.0.0.1:$CPORT"
[[ ",$VOTERS," == *",$NODE_ID@"* ]] ||
    { echo "--voters $VOTERS does not name node $NODE_ID" >&2; exit 2; }
# Replication of the internal topics: 1 for one node (config/server.properties), else Kafka's
# defaults (3 replicas, min ISR 2) capped by the number of nodes.
VOTER_COUNT="$(tr ',' '\n' <<<"$VOTERS" | grep -c .)"
INTERNAL_RF=$((VOTER_COUNT < 3 ? VOTER_COUNT : 3))
INTERNAL_MIN_ISR=$((INTERNAL_RF < 2 ? INTERNAL_RF : 2))
[[ -n "$WORK" ]] || WORK="${WEIR_BENCH_WORK:-/tmp/weir-bench}/kafka-$VERSION"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
[[ -n "$LIBS" ]] || LIBS="$WORK/libs"
mkdir -p "$(dirname "$LIBS")"
LIBS="$(cd "$(dirname "$LIBS")" && pwd)/$(basename "$LIBS")"
DATA="$WORK/data"
LOGS="$WORK/logs"
PIDFILE="$WORK/kafka.pid"
PROPS="$WORK/server.properties"
LOG4J="$WORK/log4j2.properties"

log() { printf '[%s] kafka: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# running_pid: the pid of the server started from this work directory, or nothing. The pid
# file is trusted only when that process is a Kafka JVM using this work directory.
running_pid() {
    local pid
    [[ -s "$PIDFILE" ]] || return 0
    pid="$(cat "$PIDFILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    if kill -0 "$pid" 2>/dev/null &&
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "kafka.Kafka $PROPS"; then
        echo "$pid"
    fi
}

# port_open PORT: something accepts connections on 127.0.0.1:PORT.
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

fetch() {
    if [[ -f "$LIBS/.complete" ]]; then
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    command -v java >/dev/null || die "java not found (Kafka $VERSION needs Java 17 or later)"
    local pom="$WORK/fetch/pom.xml"
    mkdir -p "$WORK/fetch"
    cat >"$pom" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by bench/kafka.sh: the runtime class path of a Kafka $VERSION server. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.bench</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$VERSION</version>
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
        <exclusion><groupId>com.fasterxml.jackson.jakarta.rs</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
    log "fetching Kafka $VERSION jars from Maven Central into $LIBS"
    rm -rf "$LIBS.part"
    timeout 1200 mvn -B -q -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$LIBS.part" >"$WORK/fetch/mvn.log" 2>&1 ||
        { tail -n 30 "$WORK/fetch/mvn.log" >&2; die "mvn failed (log: $WORK/fetch/mvn.log)"; }
    [[ -f "$LIBS.part/kafka_2.13-$VERSION.jar" ]] || die "kafka_2.13-$VERSION.jar missing after mvn"
    touch "$LIBS.part/.complete"
    rm -rf "$LIBS"
    mv "$LIBS.part" "$LIBS"
    log "$(find "$LIBS" -name '*.jar' | wc -l) jars, $(du -sm "$LIBS" | cut -f1) MB"
}

write_config() {
    # Kafka's config/server.properties for a combined KRaft node, on loopback, static quorum.
    cat >"$PROPS.part" <<EOF
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$VOTERS
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA
offsets.topic.replication.factor=$INTERNAL_RF
share.coordinator.state.topic.replication.factor=$INTERNAL_RF
share.coordinator.state.topic.min.isr=$INTERNAL_MIN_ISR
transaction.state.log.replication.factor=$INTERNAL_RF
transaction.state.log.min.isr=$INTERNAL_MIN_ISR
EOF
    if [[ $BARE -eq 0 ]]; then
        cat >>"$PROPS.part" <<EOF
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
num.partitions=1
num.recovery.threads.per.data.dir=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
EOF
    fi
    local kv
    for kv in "${EXTRA[@]}"; do
        [[ "$kv" == *=* ]] || die "--set wants KEY=VALUE, got $kv"
        grep -v "^${kv%%=*}=" "$PROPS.part" >"$PROPS.tmp" || true
        echo "$kv" >>"$PROPS.tmp"
        mv "$PROPS.tmp" "$PROPS.part"
    done
    mv "$PROPS.part" "$PROPS"
    cat >"$LOG4J" <<EOF
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $LOGS/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = INFO
EOF
}

java_opts() {
    JAVA_OPTS=(-Xms"$HEAP" -Xmx"$HEAP" -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
        -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
        -Djava.awt.headless=true -Dkafka.logs.dir="$LOGS"
        -Dlog4j2.configurationFile="$LOG4J" -cp "$LIBS/*")
}

start() {
    local pid
    pid="$(running_pid)"
    if [[ -n "$pid" ]]; then
        local running_port
        running_port="$(sed -n 's/^advertised.listeners=PLAINTEXT:\/\/127.0.0.1:\([0-9]*\)$/\1/p' "$PROPS")"
        [[ "$running_port" == "$PORT" ]] ||
            die "already running (pid $pid) on port $running_port, not $PORT; stop it first"
        [[ $FRESH -eq 0 ]] || die "already running (pid $pid); --fresh needs it stopped"
        log "already running: pid $pid at 127.0.0.1:$PORT"
        echo "running pid $pid 127.0.0.1:$PORT"
        return 0
    fi
    fetch
    port_open "$PORT" && die "port $PORT is already in use"
    port_open "$CPORT" && die "controller port $CPORT is already in use"
    if [[ $FRESH -eq 1 ]]; then
        rm -rf "$DATA" "$LOGS"
    fi
    mkdir -p "$DATA" "$LOGS"
    write_config
    java_opts
    if [[ ! -f "$DATA/meta.properties" ]]; then
        local cluster_id="$CLUSTER_ID"
        [[ -n "$cluster_id" ]] ||
            cluster_id="$(timeout 120 java -Xmx256m -cp "$LIBS/*" -Dlog4j2.configurationFile="$LOG4J" \
                kafka.tools.StorageTool random-uuid 2>>"$WORK/format.log" | tail -n1)"
        [[ -n "$cluster_id" ]] || die "StorageTool random-uuid failed (log: $WORK/format.log)"
        timeout 120 java -Xmx256m -cp "$LIBS/*" -Dlog4j2.configurationFile="$LOG4J" \
            kafka.tools.StorageTool format -t "$cluster_id" -c "$PROPS" \
            >>"$WORK/format.log" 2>&1 ||
            { tail -n 20 "$WORK/format.log" >&2; die "StorageTool format failed"; }
        log "formatted $DATA (cluster id $cluster_id)"
    fi
    : >"$WORK/kafka.out"
    local marker
    marker="$(wc -l <"$LOGS/server.log" 2>/dev/null || echo 0)"
    # The pid file is written by the process that then becomes the JVM, so it is the JVM's pid.
    # shellcheck disable=SC2016
    nohup setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PIDFILE" \
        java "${JAVA_OPTS[@]}" kafka.Kafka "$PROPS" >"$WORK/kafka.out" 2>&1 </dev/null &
    local deadline=$(($(date +%s) + READY_TIMEOUT))
    while :; do
        pid="$(running_pid)"
        if [[ -n "$pid" ]] &&
            tail -n +"$((marker + 1))" "$LOGS/server.log" 2>/dev/null | grep -q 'Kafka Server started' &&
            port_open "$PORT"; then
            break
        fi
        if [[ -s "$PIDFILE" && -z "$pid" ]] && ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            tail -n 20 "$WORK/kafka.out" "$LOGS/server.log" >&2 2>/dev/null || true
            rm -f "$PIDFILE"
            die "the server exited before it was ready"
        fi
        if (($(date +%s) > deadline)); then
            tail -n 20 "$LOGS/server.log" >&2 2>/dev/null || true
            stop
            die "not ready within ${READY_TIMEOUT}s"
        fi
        sleep 0.2
    done
    log "ready: pid $pid at 127.0.0.1:$PORT (data $DATA, log $LOGS/server.log)"
    echo "running pid $pid 127.0.0.1:$PORT"
}

stop() {
    local pid i
    pid="$(running_pid)"
    if [[ -z "$pid" ]]; then
        rm -f "$PIDFILE"
        log "not running"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid still running ${STOP_TIMEOUT}s after SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$PIDFILE"
    log "stopped pid $pid"
}

status() {
    local pid
    pid="$(running_pid)"
    if [[ -n "$pid" ]]; then
        echo "running pid $pid 127.0.0.1:$(sed -n 's/^advertised.listeners=PLAINTEXT:\/\/127.0.0.1:\([0-9]*\)$/\1/p' "$PROPS")"
    else
        echo "stopped"
        exit 3
    fi
}

case "$ACTION" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    fetch) fetch ;;
esac
