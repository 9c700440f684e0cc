"""``weir consume --group`` and ``weir group list|describe|delete|reset-offsets`` against the
module's server (default group settings, so the first join of a group waits out
``group.initial.rebalance.delay.ms``): offsets committed by the CLI are where the next member
resumes, describe shows committed offset, log end and lag per partition, resets move offsets
(or only print them with --dry-run), and an active group refuses resets and deletion.
"""

from __future__ import annotations

import json
import re
import time

from clients import create_topic, unique_topic
from harness import wait_until
from weir_cli import Background, ok, runtime_error, usage_error

ROW_RE = re.compile(r"^(\S+)\s+(\d+)\s+(-|\d+)\s+(\d+)\s+(-|\d+)\s+(\S+)$")
RESET_RE = re.compile(r"^(\S+)\s+(\d+)\s+(-|\d+)\s+(\d+)$")


def produce_keyed(bootstrap: str, topic: str, count: int) -> None:
    lines = "".join(f"k{i}:v{i}\n" for i in range(count))
    ok(["produce", topic, "--key-separator", ":"], bootstrap, stdin=lines)


def describe_group(bootstrap: str, group: str) -> tuple[str, dict[int, tuple[int | None, int, int | None]]]:
    """The state line and, per partition: committed, log end offset, lag."""
    out = ok(["group", "describe", group], bootstrap).lines
    rows = {}
    for line in out:
        m = ROW_RE.match(line)
        if m and m.group(1) != "TOPIC":
            committed = None if m.group(3) == "-" else int(m.group(3))
            lag = None if m.group(5) == "-" else int(m.group(5))
            rows[int(m.group(2))] = (committed, int(m.group(4)), lag)
    return out[0], rows


def consumed(result) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in (json.loads(line) for line in result.lines)]


def test_group_consumers_resume_where_the_last_one_committed(bootstrap):
    """Two runs of `consume --group` read every record once between them; describe shows
    the committed offsets, log ends and lag after each."""
    topic = unique_topic("cli-group")
    group = unique_topic("cli-g")
    create_topic(bootstrap, topic, partitions=3)
    produce_keyed(bootstrap, topic, 90)
    first = consumed(ok(["consume", topic, "--group", group, "-n", "40", "--format", "json"], bootstrap))
    assert len(first) == 40
    state, rows = describe_group(bootstrap, group)
    assert "state Empty" in state, state
    # Only partitions with a commit are listed once the group is empty.
    assert sum(c for c, _, _ in rows.values()) == 40, rows
    assert all(lag == ends - c for c, ends, lag in rows.values()), rows
    rest = consumed(ok(["consume", topic, "--group", group, "--format", "json"], bootstrap))
    assert sorted(first + rest) == sorted(set(first + rest)), "a record was read twice"
    assert len(first) + len(rest) == 90
    _, rows = describe_group(bootstrap, group)
    assert all(c == ends and lag == 0 for c, ends, lag in rows.values()), rows
    again = ok(["consume", topic, "--group", group, "--format", "json"], bootstrap)
    assert again.lines == [], "a caught-up group reads nothing"
    groups = ok(["group", "list"], bootstrap).lines
    assert any(line.split()[0] == group and line.split()[1] == "Empty" for line in groups[1:]), groups


def test_reset_offsets_moves_or_only_prints(bootstrap):
    """--dry-run changes nothing; --to-earliest, --shift-by, --to-offset (clamped to the log
    end) and --to-timestamp commit what they print."""
    topic = unique_topic("cli-reset")
    group = unique_topic("cli-reset-g")
    create_topic(bootstrap, topic, partitions=2)
    before = int(time.time() * 1000)
    produce_keyed(bootstrap, topic, 40)
    ok(["consume", topic, "--group", group], bootstrap)
    _, rows = describe_group(bootstrap, group)
    ends = {p: end for p, (_, end, _) in rows.items()}

    def reset(*flags: str) -> dict[int, tuple[int | None, int]]:
        out = ok(["group", "reset-offsets", group, "--topic", topic, *flags], bootstrap).lines
        parsed = {}
        for line in out:
            m = RESET_RE.match(line)
            if m and m.group(1) != "TOPIC":
                parsed[int(m.group(2))] = (None if m.group(3) == "-" else int(m.group(3)), int(m.group(4)))
        return parsed

    dry = reset("--to-earliest", "--dry-run")
    assert dry == {p: (end, 0) for p, end in ends.items()}
    _, rows = describe_group(bootstrap, group)
    assert {p: c for p, (c, _, _) in rows.items()} == ends, "a dry run committed"
    assert reset("--to-earliest") == {p: (end, 0) for p, end in ends.items()}
    assert reset("--shift-by", "5") == {p: (0, min(5, end)) for p, end in ends.items()}
    assert reset("--to-offset", "1000000") == {p: (min(5, end), end) for p, end in ends.items()}
    assert reset("--to-timestamp", str(before)) == {p: (end, 0) for p, end in ends.items()}
    _, rows = describe_group(bootstrap, group)
    assert {p: lag for p, (_, _, lag) in rows.items()} == ends
    usage_error(["group", "reset-offsets", group, "--topic", topic], bootstrap)


def test_an_active_group_refuses_reset_and_delete(bootstrap):
    """While a member is consuming, reset-offsets and delete fail with one clear line; once
    it left, the group is deleted with its offsets."""
    topic = unique_topic("cli-active")
    group = unique_topic("cli-active-g")
    create_topic(bootstrap, topic, partitions=1)
    produce_keyed(bootstrap, topic, 5)
    member = Background(["consume", topic, "--group", group, "--follow"], bootstrap)
    try:
        lines = member.wait_for_lines(5, timeout=30)
        assert len(lines) == 5, member.describe()
        wait_until(lambda: "state Stable" in ok(["group", "describe", group], bootstrap).lines[0], 30, what="a Stable group")
        refused = runtime_error(["group", "reset-offsets", group, "--topic", topic, "--to-earliest"], bootstrap)
        assert "active member" in refused.stderr, refused.describe()
        refused = runtime_error(["group", "delete", group], bootstrap)
        assert "NonEmptyGroup" in refused.stderr, refused.describe()
    finally:
        member.stop()
    other = unique_topic("cli-gone-g")
    ok(["consume", topic, "--group", other], bootstrap)
    assert ok(["group", "delete", other], bootstrap).stdout == f"deleted group {other}\n"
    gone = runtime_error(["group", "describe", other], bootstrap)
    assert gone.stderr == f"error: group {other} does not exist\n"
    missing = runtime_error(["group", "delete", other], bootstrap)
    assert "GroupIdNotFound" in missing.stderr, missing.describe()
    usage_error(["consume", topic, "--group", other, "-p", "0"], bootstrap)
