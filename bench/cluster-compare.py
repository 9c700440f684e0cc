#!/usr/bin/env python3
"""Three-node Weir beside three-node Apache Kafka, replication 3 (acks=all) against replication 1,
at the same offered load, back to back on this machine.

Usage: bench/cluster-compare.py [options]

For each system (Weir, then Kafka) and each replication factor (3, then 1) a fresh three-node
cluster is started on 127.0.0.1 on empty data directories (after a `sync`), one topic is
created, `weir bench` runs against it at a fixed rate, and the cluster is stopped again; Weir
and Kafka never run at the same time.

  Weir   `weir dev-cluster --nodes 3`: three `weir server` processes, each a broker and a
         controller of one Raft metadata quorum, every setting at its default (flush.policy
         acks-all, see README.md's durability table; --weir-flush-policy sets the topics' policy).
  Kafka  Apache Kafka 4.x in KRaft mode (bench/kafka.sh start --node-id N --voters ...): three
         combined broker+controller JVMs, a static quorum of three voters, one cluster id, each
         node its own log dir, Kafka's config/server.properties settings but Kafka's defaults for
         the internal topics (3 replicas, min ISR 2), kafka-server-start.sh's JVM options,
         --kafka-heap each. No fsync on the produce path (Kafka's default).

The topic: --partitions partitions (default 3, so each node leads one), replication factor 3
with min.insync.replicas=2, or replication factor 1; created with `weir topic create` (a
Kafka client, the same for both systems) and used once every partition has a leader and a full
ISR. The load: `weir bench --rate R --duration D --acks all --producers 1 --consumers 3
--record-size 100` (an idempotent producer; assign-based consumers reading the partitions from
their ends), which reports publish (send to acknowledgement) and end-to-end (send to receipt by
a consumer) latency percentiles over the measured seconds.

Two properties of weir bench's client shape the load; both are the same for Weir and Kafka:
  - Its producer's sticky partitioner moves to the next partition only when a batch fills
    (--batch-bytes, 1 MB): at a fixed rate with linger 1 ms no batch fills, so every record of
    a run goes to one partition, picked at start, and one leader takes the writes (the details
    show the records per partition and its leader).
  - One consumer fetches from every partition leader in a round that ends when each leader has
    answered; a leader with nothing new holds its answer for fetch.max.wait (500 ms), so with
    --consumers 1 the end-to-end latency is that wait (p50 about 0.75 s, p99 about 1 s on either
    system), not the brokers'. The default is one consumer per partition (each reads one
    partition, so one leader), which measures the brokers; --consumers 1 gives the other.

Broker resources, over the three node processes of the system (the three `weir server`
processes, or the three JVMs; not dev-cluster's supervisor, not the client):
  CPU       utime+stime from /proc/PID/stat (every thread, kernel time on their behalf
            included), summed over the nodes, sampled right before and after the `weir bench`
            run; "per record" divides by the records the run wrote (the sum of the partitions'
            high watermarks after it, warm-up and drain included, like the CPU figure). It
            covers producing, replicating and serving the consumer.
  RSS       VmRSS summed over the nodes, sampled every --sample-interval s during the run: the
            peak of the sum, and the sum when the run ends; also the sum before the run (idle,
            topic created) and the sum of each node's own peak (VmHWM) in the details.
Under the tables, each row's broker CPU during the run by thread name (digits as N, the largest
first): for Kafka it shows the share of the JIT compilers (C1/C2 "CompilerThread", CN
CompilerThre) against the request handlers and replica fetchers.

Prints two markdown tables (one row per system and replication factor; ratios Weir / Kafka at
each replication factor and replication 3 / replication 1 for each system) and the details, and
saves them with every client output, each node's log and a JSON file in the run directory
(WORK/cluster-compare-<timestamp>/). The Kafka jars come from bench/kafka.sh fetch into
WORK/kafka-<version>/libs (shared with bench/compare.sh), or --kafka-libs.

Options:
  --quick                 short smoke run: --duration 5 --rate 5000 --prewarm 5 (explicit
                          options win); checks the setup, not for figures
  --work DIR              work directory (default: $WEIR_BENCH_WORK or /tmp/weir-bench)
  --weir PATH             weir binary (default: target/release/weir of this repo); copied into
                          the run directory first
  --systems "A B"         systems to measure, in order (default "weir kafka")
  --replication "A B"     replication factors, in order (default "3 1")
  --rate R                offered load, records/s over all producers (default 20000)
  --duration S            seconds measured (default 20)
  --warmup S              seconds before measuring (default: weir bench's own, 1)
  --record-size BYTES     record value size (default 100)
  --partitions N          partitions of the topic (default 3)
  --acks A                producer acks (default all)
  --producers N           weir bench producers (default 1)
  --consumers N           weir bench consumers (default: one per partition, see above)
  --linger-ms MS          weir bench --linger-ms (default: weir bench's, 1)
  --batch-bytes B         weir bench --batch-bytes (default: weir bench's, 1000000)
  --prewarm S             before the measurement, run the same load for S seconds on a topic
                          of its own (same partitions, replication and configs), then sync
                          (default 30; 0 measures a cold start). A JVM compiles its hot paths
                          during its first seconds of load, and three JVMs sharing two cores
                          take long: on a 2-core machine a cold three-node Kafka fell seconds
                          behind 5000 records/s with acks=all and replication 3 while its JIT
                          compilers took much of its CPU (see the CPU by thread name)
  --min-insync N          min.insync.replicas of a replicated topic, capped at its replication
                          factor (default 2); a replication 1 topic keeps the default
  --weir-flush-policy P   topic config flush.policy on Weir's topics (acks-all, always, never;
                          default: none given, i.e. Weir's default acks-all)
  --kafka-version V       Apache Kafka 4.x version (default 4.1.1, as bench/kafka.sh)
  --kafka-libs DIR        use this directory of Kafka jars (it must hold kafka_2.13-V.jar)
                          instead of fetching into WORK/kafka-V/libs
  --kafka-heap SIZE       -Xms/-Xmx of each Kafka node (default 1g, as bench/kafka.sh)
  --ready-timeout S       deadline for a cluster to start, and for a topic to be ready (default 180)
  --timeout S             deadline for a `weir bench` run (default: warm-up + duration + 180)
  --sample-interval S     RSS sampling period (default 0.2)
  --keep-data             keep each cluster's data directories
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
# Starting and stopping `weir dev-cluster`: the code the compat suite, the fault harness and
# bench/failover.py use.
sys.path.insert(0, str(REPO / "compat" / "tests"))
from weir_cluster import ClusterError, DevCluster, free_base_port, process_alive  # noqa: E402

NODES = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """A step that failed; the message says which and where its log is."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    add = parser.add_argument
    add("-h", "--help", action="store_true")
    add("--quick", action="store_true")
    add("--work", default=os.environ.get("WEIR_BENCH_WORK", "/tmp/weir-bench"))
    add("--weir", default=str(REPO / "target" / "release" / "weir"))
    add("--systems", default="weir kafka")
    add("--replication", default="3 1")
    add("--rate", type=int)
    add("--duration", type=float)
    add("--warmup", type=float)
    add("--record-size", type=int, default=100)
    add("--partitions", type=int, default=3)
    add("--acks", default="all", choices=["0", "1", "all", "-1"])
    add("--producers", type=int, default=1)
    add("--consumers", type=int)
    add("--min-insync", type=int, default=2)
    add("--linger-ms", type=int)
    add("--batch-bytes", type=int)
    add("--prewarm", type=float)
    add("--weir-flush-policy", choices=["acks-all", "always", "never"])
    add("--kafka-version", default="4.1.1")
    add("--kafka-libs")
    add("--kafka-heap", default="1g")
    add("--ready-timeout", type=float, default=180)
    add("--timeout", type=float)
    add("--sample-interval", type=float, default=0.2)
    add("--keep-data", action="store_true")
    try:
        args = parser.parse_args()
    except SystemExit:
        print(__doc__, file=sys.stderr)
        raise SystemExit(2)
    if args.help:
        print(__doc__)
        raise SystemExit(0)
    if args.quick:
        args.duration = 5 if args.duration is None else args.duration
        args.rate = 5000 if args.rate is None else args.rate
        args.prewarm = 5 if args.prewarm is None else args.prewarm
    args.prewarm = 30 if args.prewarm is None else args.prewarm
    args.duration = 20 if args.duration is None else args.duration
    args.rate = 20000 if args.rate is None else args.rate
    if args.consumers is None:
        args.consumers = args.partitions
    args.systems = args.systems.split()
    args.replication = [int(r) for r in args.replication.split()]
    for s in args.systems:
        if s not in ("weir", "kafka"):
            parser.error(f"unknown system {s}")
    for r in args.replication:
        if not 1 <= r <= NODES:
            parser.error(f"replication factor {r} is not between 1 and {NODES}")
    if not args.kafka_version.startswith("4."):
        parser.error(f"only Kafka 4.x (KRaft) is supported, not {args.kafka_version}")
    if args.rate <= 0 or args.duration <= 0:
        parser.error("--rate and --duration must be positive")
    return args


# Processes: CPU and memory from /proc.


def proc_cpu(pid: int) -> float:
    """utime+stime of the process (all threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu(pids: list[int]) -> dict:
    """{(pid, tid): (thread name, CPU seconds)} of every thread of the processes."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rsplit(")", 1)[1].split()
            out[(pid, tid)] = (name, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


def cpu_by_thread_name(before: dict, after: dict, top: int = 6) -> str:
    """The CPU used between two thread_cpu snapshots, by thread name (digits as N), largest first."""
    by: dict[str, float] = {}
    for key, (name, cpu) in after.items():
        name = re.sub(r"\d+", "N", name)
        by[name] = by.get(name, 0.0) + cpu - (before[key][1] if key in before else 0.0)
    total = sum(by.values())
    parts = [f"{name} {cpu:.2f} s" for name, cpu in sorted(by.items(), key=lambda kv: -kv[1])[:top] if cpu >= 0.005]
    return f"{total:.2f} s in threads still running at the end: " + ", ".join(parts)


def proc_status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise BenchError(f"no {key} for pid {pid}")


def rss_mib(pids: list[int]) -> float:
    return sum(proc_status_kib(p, "VmRSS") for p in pids) / 1024


def hwm_mib(pids: list[int]) -> float:
    return sum(proc_status_kib(p, "VmHWM") for p in pids) / 1024


class RssSampler:
    """Samples the summed VmRSS of the node processes every `interval` seconds in a thread."""

    def __init__(self, pids: list[int], interval: float):
        self.pids, self.interval = pids, interval
        self.peak = 0.0
        self.samples = 0
        self.errors: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while True:
            try:
                self.peak = max(self.peak, rss_mib(self.pids))
                self.samples += 1
            except (OSError, BenchError) as e:  # a node gone: noted, the run goes on
                if len(self.errors) < 5:
                    self.errors.append(str(e))
            if self.done.wait(self.interval):
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(10)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list, timeout: float, out: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command with a deadline; its output goes to `out` (appended) and is returned."""
    try:
        done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{' '.join(map(str, cmd[:3]))} ... did not finish within {timeout:.0f} s") from e
    if out is not None:
        with open(out, "a") as f:
            f.write(f"$ {' '.join(map(str, cmd))}\n{done.stdout}{done.stderr}(exit {done.returncode})\n")
    if check and done.returncode != 0:
        raise BenchError(f"{' '.join(map(str, cmd[:3]))} ... failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}")
    return done


def sync_disks():
    t0 = time.monotonic()
    try:
        subprocess.run(["sync"], timeout=600)
    except subprocess.TimeoutExpired:
        log("sync did not finish within 600 s")
    if time.monotonic() - t0 > 1:
        log(f"sync took {time.monotonic() - t0:.0f} s")


# Clusters: start, the node pids, stop.


class WeirCluster:
    name = "Weir"

    def __init__(self, args, weir: Path, run_dir: Path):
        self.args, self.weir, self.run_dir = args, weir, run_dir
        self.data = run_dir / "data"
        self.cluster = DevCluster(self.data, free_base_port(NODES), nodes=NODES, binary=weir, output=run_dir / "dev-cluster.out", new_session=True)
        self.bootstrap = self.cluster.bootstrap

    def start(self):
        try:
            self.cluster.start(timeout=self.args.ready_timeout)
        except ClusterError as e:
            raise BenchError(f"weir dev-cluster did not start: {str(e)[:3000]}") from e
        self.pids = [self.cluster.pid(n) for n in self.cluster.node_ids()]
        log(f"Weir: dev-cluster ready, nodes {self.pids} at {self.bootstrap}")

    def stop(self) -> str:
        status = "stopped"
        try:
            code = self.cluster.stop()
            status = f"dev-cluster exit {code}"
        except Exception as e:  # noqa: BLE001 - killed below
            status = f"stop failed ({e}); killed"
        self.cluster.kill()
        return status

    def logs(self) -> list[Path]:
        return [self.cluster.node_dir(n) / "server.log" for n in self.cluster.node_ids()]

    def warn_lines(self) -> int:
        count = 0
        for path in self.logs():
            if path.exists():
                count += sum(1 for line in path.read_text(errors="replace").splitlines() if re.search(r" (WARN|ERROR) ", line))
        return count

    def drop_data(self):
        for n in self.cluster.node_ids():
            node = self.cluster.node_dir(n)
            if node.exists():
                for child in node.iterdir():
                    if child.name != "server.log":
                        shutil.rmtree(child) if child.is_dir() else child.unlink()


class KafkaCluster:
    name = "Kafka"

    def __init__(self, args, libs: Path, run_dir: Path):
        self.args, self.libs, self.run_dir = args, libs, run_dir
        self.base = free_base_port(NODES)
        self.node_ids = list(range(1, NODES + 1))
        self.bootstrap = ",".join(f"127.0.0.1:{self.base + n - 1}" for n in self.node_ids)
        self.voters = ",".join(f"{n}@127.0.0.1:{self.base + 100 + n - 1}" for n in self.node_ids)
        # A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with
        # "-" (which command lines would take for an option; Kafka's Uuid.randomUuid avoids it too).
        self.cluster_id = "-"
        while self.cluster_id.startswith("-"):
            self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.started = False
        self.starting: list[subprocess.Popen] = []

    def node_dir(self, n: int) -> Path:
        return self.run_dir / f"node-{n}"

    def kafka_sh(self, action: str, n: int, *extra) -> list:
        return [HERE / "kafka.sh", action, "--work", self.node_dir(n), "--libs", self.libs, "--version", self.args.kafka_version, *extra]

    def start(self):
        self.started = True
        processes = {}
        for n in self.node_ids:
            self.node_dir(n).mkdir(parents=True, exist_ok=True)
            cmd = self.kafka_sh(
                "start", n,
                "--fresh",
                "--port", self.base + n - 1,
                "--controller-port", self.base + 100 + n - 1,
                "--node-id", n,
                "--voters", self.voters,
                "--cluster-id", self.cluster_id,
                "--heap", self.args.kafka_heap,
                "--ready-timeout", int(self.args.ready_timeout),
            )
            out = open(self.node_dir(n) / "start.out", "w")
            processes[n] = (subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT), out)
            self.starting.append(processes[n][0])
        deadline = time.monotonic() + self.args.ready_timeout + 120
        failed = []
        for n, (process, out) in processes.items():
            try:
                process.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
            out.close()
            if process.returncode != 0:
                failed.append(f"node {n} (exit {process.returncode}): " + (self.node_dir(n) / "start.out").read_text(errors="replace")[-1500:])
        if failed:
            raise BenchError("Kafka did not start:\n" + "\n".join(failed))
        self.pids = [self.pid(n) for n in self.node_ids]
        log(f"Kafka: three nodes ready, JVMs {self.pids} at {self.bootstrap} (cluster id {self.cluster_id})")

    def pid(self, n: int) -> int:
        return int((self.node_dir(n) / "kafka.pid").read_text())

    def stop(self) -> str:
        if not self.started:
            return "not started"
        # Interrupted while starting: no kafka.sh start may launch a JVM after the stop below.
        for process in self.starting:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        self.starting = []
        # All three at once: a node stopping alone waits on the others' controller quorum.
        processes = []
        for n in self.node_ids:
            cmd = self.kafka_sh("stop", n, "--stop-timeout", 60)
            out = open(self.node_dir(n) / "stop.out", "w")
            processes.append((n, subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT), out))
        codes = []
        for n, process, out in processes:
            try:
                process.wait(90)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
            out.close()
            codes.append(process.returncode)
            killed = "killing it" in (self.node_dir(n) / "stop.out").read_text(errors="replace")
            if killed:
                codes[-1] = "SIGKILL"
        # A JVM that kafka.sh could not see (started but not yet exec'd when interrupted).
        for n in self.node_ids:
            try:
                pid = self.pid(n)
            except (OSError, ValueError):
                continue
            try:
                if process_alive(pid) and str(self.node_dir(n)).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.started = False
        return "kafka.sh stop: " + ", ".join(str(c) for c in codes)

    def logs(self) -> list[Path]:
        return [self.node_dir(n) / "logs" / "server.log" for n in self.node_ids]

    def warn_lines(self) -> int:
        count = 0
        for path in self.logs():
            if path.exists():
                for line in path.read_text(errors="replace").splitlines():
                    if re.match(r"^\[[^]]*\] (WARN|ERROR) ", line) and "Performing controller activation" not in line:
                        count += 1
        return count

    def drop_data(self):
        for n in self.node_ids:
            shutil.rmtree(self.node_dir(n) / "data", ignore_errors=True)


# Talking to a cluster with the weir command line (a Kafka client for either system).


def cluster_brokers(weir: Path, bootstrap: str, out: Path) -> int:
    done = run([weir, "cluster", "status", "--brokers", bootstrap, "--timeout", 5], 30, out, check=False)
    found = re.search(r"^brokers:\s+(\d+)", done.stdout, re.M)
    return int(found.group(1)) if found and done.returncode == 0 else 0


def describe(weir: Path, bootstrap: str, topic: str, out: Path | None = None) -> dict:
    """Partitions (leader, replicas, isr, start, end) and configs of a topic."""
    done = run([weir, "topic", "describe", topic, "--brokers", bootstrap, "--timeout", 10], 60, out)
    partitions, configs, in_configs = {}, {}, False
    for line in done.stdout.splitlines():
        if line.startswith("configs:"):
            in_configs = True
            continue
        fields = line.split()
        if in_configs:
            found = re.match(r"^\s+(\S+) = (\S*)", line)
            if found:
                configs[found.group(1)] = found.group(2)
        elif len(fields) == 6 and fields[0].isdigit():
            ids = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
            partitions[int(fields[0])] = {"leader": int(fields[1]), "replicas": ids(fields[2]), "isr": ids(fields[3]), "start": int(fields[4]), "end": int(fields[5])}
    return {"partitions": partitions, "configs": configs}


def create_topic(args, weir: Path, bootstrap: str, topic: str, rf: int, configs: dict, out: Path) -> dict:
    """Create the topic (retried while the cluster is not ready to place it) and wait until
    every partition has a leader and all its replicas in sync."""
    deadline = time.monotonic() + args.ready_timeout
    cmd = [weir, "topic", "create", topic, "-p", args.partitions, "-r", rf, "--brokers", bootstrap, "--timeout", 30]
    for k, v in configs.items():
        cmd += ["-c", f"{k}={v}"]
    while True:
        done = run(cmd, 120, out, check=False)
        if done.returncode == 0 or "already exists" in (done.stdout + done.stderr).lower():
            break
        if time.monotonic() > deadline:
            raise BenchError(f"topic {topic} not created within {args.ready_timeout:.0f} s: {done.stderr.strip()[-500:]}")
        time.sleep(1)
    last = None
    while True:
        try:
            d = describe(weir, bootstrap, topic)
            parts = d["partitions"]
            if len(parts) == args.partitions and all(p["leader"] >= 0 and len(p["isr"]) == rf == len(p["replicas"]) for p in parts.values()):
                describe(weir, bootstrap, topic, out)
                return d
            last = parts
        except BenchError as e:
            last = e
        if time.monotonic() > deadline:
            raise BenchError(f"topic {topic} not ready (leaders, full ISRs) within {args.ready_timeout:.0f} s: {last}")
        time.sleep(0.3)


# One measurement.


def bench_command(args, weir: Path, bootstrap: str, topic: str, duration: float, warmup: float | None) -> list:
    cmd = [weir, "bench", "--brokers", bootstrap, "--topic", topic, "--partitions", args.partitions,
           "--record-size", args.record_size, "--rate", args.rate, "--duration", duration, "--acks", args.acks,
           "--producers", args.producers, "--consumers", args.consumers]
    if warmup is not None:
        cmd += ["--warmup", warmup]
    if args.linger_ms is not None:
        cmd += ["--linger-ms", args.linger_ms]
    if args.batch_bytes is not None:
        cmd += ["--batch-bytes", args.batch_bytes]
    return cmd


def prewarm(args, weir: Path, cluster, rf: int, configs: dict, run_dir: Path):
    """The same load for --prewarm seconds on a topic of its own (same partitions, replication
    and configs), then sync: a JVM compiles its hot paths during its first seconds of load."""
    topic = f"prewarm-rf{rf}"
    create_topic(args, weir, cluster.bootstrap, topic, rf, configs, run_dir / "admin.out")
    log(f"{cluster.name}, replication {rf}: prewarm, {args.prewarm:g} s on {topic}")
    cmd = bench_command(args, weir, cluster.bootstrap, topic, args.prewarm, 0)
    try:
        with open(run_dir / "prewarm.out", "w") as out:
            rc = subprocess.run([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=args.prewarm + 180).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    if rc != 0:
        log(f"prewarm: weir bench {rc} (see {run_dir / 'prewarm.out'})")
    sync_disks()


def measure(args, weir: Path, system: str, rf: int, run_dir: Path, notes: list[str]) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    admin_out = run_dir / "admin.out"
    cluster = WeirCluster(args, weir, run_dir) if system == "weir" else KafkaCluster(args, LIBS, run_dir)
    result: dict = {"system": system, "rf": rf}
    sync_disks()
    log(f"== {cluster.name}, replication {rf}: starting three nodes")
    t_start = time.monotonic()
    try:
        cluster.start()
        result["start_s"] = round(time.monotonic() - t_start, 1)
        deadline = time.monotonic() + args.ready_timeout
        while (brokers := cluster_brokers(weir, cluster.bootstrap, admin_out)) != NODES:
            if time.monotonic() > deadline:
                raise BenchError(f"{cluster.name}: {brokers} brokers registered, not {NODES}, after {args.ready_timeout:.0f} s")
            time.sleep(0.5)
        topic = f"bench-rf{rf}"
        configs = {}
        if rf > 1:
            configs["min.insync.replicas"] = str(min(args.min_insync, rf))
        if system == "weir" and args.weir_flush_policy:
            configs["flush.policy"] = args.weir_flush_policy
        d = create_topic(args, weir, cluster.bootstrap, topic, rf, configs, admin_out)
        if args.prewarm > 0:
            prewarm(args, weir, cluster, rf, configs, run_dir)
        result["leaders"] = ",".join(str(p["leader"]) for _, p in sorted(d["partitions"].items()))
        result["min_isr"] = d["configs"].get("min.insync.replicas", "?")
        result["flush_policy"] = d["configs"].get("flush.policy", "")
        pids = cluster.pids
        result["rss_idle"] = rss_mib(pids)
        json_path = run_dir / "bench.json"
        cmd = bench_command(args, weir, cluster.bootstrap, topic, args.duration, args.warmup) + ["--json", json_path]
        limit = args.timeout or (args.warmup or 1) + args.duration + 180
        log(f"{cluster.name}, replication {rf}: weir bench at {args.rate} records/s for {args.duration:g} s")
        threads0 = thread_cpu(pids)
        cpu0 = sum(proc_cpu(p) for p in pids)
        client0 = children_cpu()
        t0 = time.monotonic()
        with RssSampler(pids, args.sample_interval) as sampler:
            try:
                with open(run_dir / "bench.out", "w") as bench_out:
                    rc = subprocess.run([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=bench_out, stderr=subprocess.STDOUT, timeout=limit).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            cpu1 = sum(proc_cpu(p) for p in pids)
            threads1 = thread_cpu(pids)
            rss_end = rss_mib(pids)
        result["cpu_by_thread"] = cpu_by_thread_name(threads0, threads1)
        wall = time.monotonic() - t0
        result.update(
            bench_rc=rc, wall_s=round(wall, 2), broker_cpu_s=cpu1 - cpu0, client_cpu_s=children_cpu() - client0,
            rss_peak=max(sampler.peak, rss_end), rss_end=rss_end, rss_samples=sampler.samples, hwm_sum=hwm_mib(pids),
        )
        if sampler.errors:
            notes.append(f"- {cluster.name} rf {rf}: RSS sampling errors: {'; '.join(sampler.errors)}")
        after = describe(weir, cluster.bootstrap, topic, admin_out)
        result["written"] = sum(p["end"] for p in after["partitions"].values())
        result["per_partition"] = " ".join(f"{i}@{p['leader']}:{p['end']}" for i, p in sorted(after["partitions"].items()))
        result["isr_after"] = " ".join(f"{i}:[{','.join(map(str, p['isr']))}]" for i, p in sorted(after["partitions"].items()))
        if rc != 0 or not json_path.exists():
            tail = (run_dir / "bench.out").read_text(errors="replace").strip().splitlines()[-5:]
            notes.append(f"- {cluster.name} rf {rf}: weir bench FAILED ({rc}): {' / '.join(tail)}")
        else:
            result["bench"] = json.loads(json_path.read_text())
        log(f"{cluster.name}, replication {rf}: rc {rc}, {wall:.1f} s, {result['written']} records written, broker CPU {result['broker_cpu_s']:.2f} s")
    finally:
        result["stop"] = cluster.stop()
        result["warn"] = cluster.warn_lines()
        if not args.keep_data:
            cluster.drop_data()
    return result


# The report.


def fmt(v, digits=2) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def get(r: dict, path: str):
    v = r
    for k in path.split("."):
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return v


def per_record_us(r: dict):
    if r.get("written") and r.get("broker_cpu_s") is not None:
        return r["broker_cpu_s"] * 1e6 / r["written"]
    return None


# (label, getter, digits) of the main table's metric columns.
METRICS = [
    ("produce records/s", lambda r: get(r, "bench.produce.records_per_s"), 0),
    ("publish p50 ms", lambda r: get(r, "bench.publish_latency.p50_ms"), 2),
    ("publish p99 ms", lambda r: get(r, "bench.publish_latency.p99_ms"), 2),
    ("end-to-end p50 ms", lambda r: get(r, "bench.end_to_end_latency.p50_ms"), 2),
    ("end-to-end p99 ms", lambda r: get(r, "bench.end_to_end_latency.p99_ms"), 2),
    ("broker CPU µs/record", per_record_us, 2),
    ("RSS peak MiB", lambda r: r.get("rss_peak"), 0),
    ("RSS end MiB", lambda r: r.get("rss_end"), 0),
]

DETAILS = [
    ("rate held (≥95%)", lambda r: get(r, "bench.rate_held"), 0),
    ("consume records/s", lambda r: get(r, "bench.consume.records_per_s"), 0),
    ("publish p99.9 ms", lambda r: get(r, "bench.publish_latency.p999_ms"), 2),
    ("publish max ms", lambda r: get(r, "bench.publish_latency.max_ms"), 2),
    ("end-to-end p99.9 ms", lambda r: get(r, "bench.end_to_end_latency.p999_ms"), 2),
    ("end-to-end max ms", lambda r: get(r, "bench.end_to_end_latency.max_ms"), 2),
    ("records written (whole run)", lambda r: r.get("written"), 0),
    ("records per partition (partition@leader:records)", lambda r: r.get("per_partition"), 0),
    ("broker CPU s (3 nodes, whole run)", lambda r: r.get("broker_cpu_s"), 2),
    ("weir bench CPU s", lambda r: r.get("client_cpu_s"), 2),
    ("weir bench wall s", lambda r: r.get("wall_s"), 1),
    ("RSS before the run MiB", lambda r: r.get("rss_idle"), 0),
    ("sum of the nodes' VmHWM MiB", lambda r: r.get("hwm_sum"), 0),
    ("partition leaders", lambda r: r.get("leaders"), 0),
    ("min.insync.replicas", lambda r: r.get("min_isr"), 0),
    ("ISRs after the run", lambda r: r.get("isr_after"), 0),
    ("cluster start s", lambda r: r.get("start_s"), 1),
    ("WARN/ERROR log lines (3 nodes)", lambda r: r.get("warn"), 0),
    ("stop", lambda r: r.get("stop"), 0),
]


def ratio(a, b) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and b:
        return f"{a / b:.2f}"
    return "n/a"


def report(args, results: list[dict], header: list[str], notes: list[str]) -> str:
    name = {"weir": "Weir", "kafka": f"Kafka {args.kafka_version}"}
    lines = list(header)
    lines += ["", "| system | replication | offered records/s | " + " | ".join(m[0] for m in METRICS) + " |",
              "|---|---:|---:|" + "---:|" * len(METRICS)]
    by = {(r["system"], r["rf"]): r for r in results}
    for r in results:
        cells = [fmt(m[1](r), m[2]) for m in METRICS]
        lines.append(f"| {name[r['system']]} | {r['rf']} | {args.rate} | " + " | ".join(cells) + " |")
    rows = []
    if "weir" in args.systems and "kafka" in args.systems:
        for rf in args.replication:
            if ("weir", rf) in by and ("kafka", rf) in by:
                rows.append((f"Weir / Kafka, replication {rf}", by["weir", rf], by["kafka", rf]))
    if 3 in args.replication and 1 in args.replication:
        for s in args.systems:
            if (s, 3) in by and (s, 1) in by:
                rows.append((f"replication 3 / 1, {name[s]}", by[s, 3], by[s, 1]))
    if rows:
        lines += ["", "| ratio | " + " | ".join(m[0] for m in METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
        for label, a, b in rows:
            lines.append(f"| {label} | " + " | ".join(ratio(m[1](a), m[1](b)) for m in METRICS) + " |")
    lines += ["", "Details:", "", "| | " + " | ".join(f"{name[r['system']]} rf {r['rf']}" for r in results) + " |",
              "|---|" + "---:|" * len(results)]
    for label, getter, digits in DETAILS:
        lines.append(f"| {label} | " + " | ".join(fmt(getter(r), digits) for r in results) + " |")
    lines += ["", "Broker CPU during the run by thread name, over the three nodes (the largest):", ""]
    for r in results:
        if r.get("cpu_by_thread"):
            lines.append(f"- {name[r['system']]} rf {r['rf']}: {r['cpu_by_thread']}")
    if notes:
        lines += [""] + notes
    return "\n".join(lines)


LIBS: Path = Path()


def main() -> int:
    global LIBS
    args = parse_args()

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    if work == REPO or REPO in work.parents:
        raise SystemExit(f"--work {work} is inside the repository; use a directory outside it")
    source = Path(args.weir)
    if not os.access(source, os.X_OK):
        raise SystemExit(f"weir binary not found at {source} (use --weir PATH)")
    started = time.time()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    run_root = work / f"cluster-compare-{time.strftime('%Y%m%d-%H%M%S')}"
    run_root.mkdir(parents=True)
    weir = run_root / "weir"
    shutil.copy2(source, run_root / "weir.part")
    os.replace(run_root / "weir.part", weir)
    log(f"run directory {run_root}")

    if "kafka" in args.systems:
        if args.kafka_libs:
            LIBS = Path(args.kafka_libs).resolve()
        else:
            kafka_work = work / f"kafka-{args.kafka_version}"
            LIBS = kafka_work / "libs"
            # Fetched before any measurement, so a download never overlaps a run.
            run([HERE / "kafka.sh", "fetch", "--work", kafka_work, "--version", args.kafka_version], 1500, run_root / "fetch.out")
        if not (LIBS / f"kafka_2.13-{args.kafka_version}.jar").exists():
            raise SystemExit(f"{LIBS} holds no kafka_2.13-{args.kafka_version}.jar (--kafka-libs and --kafka-version must agree)")

    results: list[dict] = []
    notes: list[str] = []
    failed = False
    try:
        for system in args.systems:
            for rf in args.replication:
                try:
                    results.append(measure(args, weir, system, rf, run_root / f"{system}-rf{rf}", notes))
                except BenchError as e:
                    failed = True
                    log(f"error: {system} replication {rf}: {e}")
                    notes.append(f"- {system} rf {rf}: FAILED: {str(e).splitlines()[0][:500]} (see {run_root / f'{system}-rf{rf}'})")
                    results.append({"system": system, "rf": rf})
    except KeyboardInterrupt:
        log("interrupted; the clusters have been stopped")
        return 130

    weir_version = run([weir, "--version"], 30, check=False).stdout.strip() or "?"
    java = "no java"
    if "kafka" in args.systems:
        java = (run(["java", "-version"], 60, check=False).stderr.strip().splitlines() or ["?"])[0]
    quick = ", QUICK SMOKE RUN: checks the setup, not figures" if args.quick else ""
    warmup = f"{args.warmup:g} s" if args.warmup is not None else "weir bench's default (1 s)"
    header = [
        f"## Three-node clusters: Weir and Apache Kafka {args.kafka_version}, replication " + " and ".join(map(str, args.replication)) + f", acks={args.acks}, the same offered load{quick}",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}, {os.cpu_count()} cores, {os.uname().release}, "
        f"{weir_version}, {java}, Kafka heap {args.kafka_heap} per node",
        "",
        f"Load: `weir bench --rate {args.rate} --duration {args.duration:g} --acks {args.acks} --producers {args.producers} --consumers {args.consumers} "
        f"--record-size {args.record_size} --partitions {args.partitions}"
        + (f" --linger-ms {args.linger_ms}" if args.linger_ms is not None else "")
        + (f" --batch-bytes {args.batch_bytes}" if args.batch_bytes is not None else "")
        + f"`, warm-up {warmup}, prewarm {args.prewarm:g} s; replicated topics with "
        f"min.insync.replicas={args.min_insync}; Weir flush.policy {args.weir_flush_policy or 'default (acks-all)'}, "
        "Kafka at its defaults (no fsync on the produce path). Each row is a fresh three-node cluster on 127.0.0.1; "
        "clients, brokers and every node share this machine's cores.",
        "",
        f"Load average before the run: {load_before} (anything else running on the machine shows here).",
        "",
        "Broker CPU and RSS are summed over the three node processes; CPU per record divides the CPU over the whole "
        "`weir bench` run by the records it wrote. Ratios above 1 mean more for the first (better for rates, worse for "
        "latency, CPU and memory).",
    ]
    text = report(args, results, header, notes)
    text += f"\n\nTotal wall time {time.time() - started:.0f} s. Run directory: {run_root}\n"
    print(text)
    (run_root / "results.md").write_text(text)
    (run_root / "results.json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items()}, "results": results}, indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
