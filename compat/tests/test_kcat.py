"""kcat (librdkafka's command-line client): metadata listing, producing lines
to an auto-created topic and consuming them back identically.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from clients import create_topic, topic_partition_counts, unique_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture
def kcat():
    # A missing tool is a failure, not a skip: scripts/test.sh installs it.
    assert KCAT is not None, "kcat is not on PATH (scripts/test.sh installs the Debian package 'kcat')"
    return KCAT


def run(args: list[str], stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def test_kcat_lists_topics(bootstrap, kcat):
    topic = unique_topic("kcat-list")
    create_topic(bootstrap, topic, partitions=3)
    out = run([kcat, "-b", bootstrap, "-L", "-t", topic]).stdout
    assert f'topic "{topic}" with 3 partitions:' in out, out
    for p in range(3):
        assert f"partition {p}, leader" in out, out
    everything = run([kcat, "-b", bootstrap, "-L"]).stdout
    assert "1 brokers:" in everything, everything
    assert f'topic "{topic}"' in everything


@pytest.mark.parametrize("codec", ["none", "snappy", "zstd"])
def test_kcat_produce_and_consume(bootstrap, kcat, codec):
    topic = unique_topic(f"kcat-{codec}")  # created on first use (auto-create, 1 partition)
    lines = [f"key{i}:value {i} with: colons and spaces" for i in range(300)]
    lines += ["emptyvalue:", "k:v"]
    run([kcat, "-P", "-b", bootstrap, "-t", topic, "-K:", "-z", codec], stdin="\n".join(lines) + "\n")

    assert topic_partition_counts(bootstrap).get(topic) == 1, "auto-created topics get num.partitions=1"
    out = run([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k:%s\\n"]).stdout
    assert out.splitlines() == lines


def test_kcat_offsets_and_headers(bootstrap, kcat):
    topic = unique_topic("kcat-hdr")
    create_topic(bootstrap, topic, partitions=1)
    run([kcat, "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-H", "trace=abc", "-H", "n=1", "-K:"], stdin="a:1\nb:2\nc:3\n")
    out = run([kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "1", "-e", "-q", "-f", "%p/%o %k=%s [%h]\\n"]).stdout
    assert out.splitlines() == ["0/1 b=2 [trace=abc,n=1]", "0/2 c=3 [trace=abc,n=1]"]
