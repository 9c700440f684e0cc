#!/usr/bin/env python3
"""Keeps a fresh clone's unchanged Rust packages fresh for Cargo.

Cargo decides whether a path package (Weir's crates, the vendored kafka-protocol) must be
compiled again by comparing its source files' modification times with its last build's. A
clone stamps every file with the time of the clone, so each run of the suite from a fresh
clone compiled every package again in every profile (about five minutes on two cores) even
where not one byte changed. This script lets the suite skip that safely:

    scripts/file-times.py record TARGET_DIR    after the builds and tests passed
    scripts/file-times.py restore TARGET_DIR   in the next clone at the same path, before building

`record` writes, for each package directory of the workspace whose files are as committed:
the git tree id of the directory, the newest modification time of its files, and a
signature of what the target directory holds for the package (the names and times of its
`.fingerprint` entries in every profile). `restore` gives a package's files that recorded
time back only when all three still hold: the same content (tree id), a clean work tree,
and no build of the package since the record from anywhere (unchanged signature; a build of
other content, from another clone sharing the target directory, rewrites the fingerprint).
Otherwise the files keep the clone's time and Cargo compiles the package as before. Records
are kept per clone path, so clones at different paths never take each other's times. As with
Cargo's own use of file times, clones sharing a target directory must not build while
another's suite is running: a build from one after the other was cloned looks fresh to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# fuzz/ is cargo-fuzz's own workspace, built into its own target directory.
SKIPPED = ("fuzz",)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def packages() -> dict[str, str]:
    """Package directory (relative to the root) -> package name, for every committed manifest."""
    found = {}
    for manifest in git("ls-files", "--", "*Cargo.toml").split():
        directory = os.path.dirname(manifest)
        if not directory or directory.split("/")[0] in SKIPPED:
            continue
        text = (ROOT / manifest).read_text()
        package = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', text, re.M | re.S)
        if package:
            found[directory] = package.group(1)
    return found


def tree_ids(directories) -> dict[str, str]:
    ids = {}
    for line in git("ls-tree", "-d", "HEAD", "--", *directories).splitlines():
        meta, path = line.split("\t", 1)
        ids[path] = meta.split()[2]
    return ids


def dirty(directories) -> set[str]:
    """Directories with a file that differs from HEAD or is not tracked (ignored files aside)."""
    changed = set()
    for line in git("status", "--porcelain", "--untracked-files=all", "--", *directories).splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        changed.update(d for d in directories if path.startswith(d + "/"))
    return changed


def tracked_files(directory: str) -> list[Path]:
    return [ROOT / f for f in git("ls-files", "-z", "--", directory).split("\0") if f]


def signature(target: Path, name: str) -> str:
    """What the target directory holds for the package: its fingerprint entries in every profile."""
    pattern = re.compile(re.escape(name) + r"-[0-9a-f]{16}")
    entries = []
    for fingerprints in sorted(target.glob("*/.fingerprint")):
        for unit in sorted(fingerprints.iterdir()):
            if pattern.fullmatch(unit.name):
                for item in sorted(unit.iterdir()):
                    entries.append(f"{item.relative_to(target)} {item.stat().st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


def record_path(target: Path) -> Path:
    clone = hashlib.sha256(str(ROOT).encode()).hexdigest()[:16]
    return target / ".weir-file-times" / f"{clone}.json"


def record(target: Path) -> None:
    found = packages()
    ids = tree_ids(found)
    changed = dirty(found)
    entries = {}
    for directory, name in found.items():
        if directory in changed or directory not in ids:
            continue
        newest = max((f.stat().st_mtime_ns for f in tracked_files(directory)), default=0)
        entries[directory] = {"tree": ids[directory], "mtime_ns": newest, "signature": signature(target, name)}
    path = record_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps({"root": str(ROOT), "packages": entries}, indent=1))
    path.with_suffix(".tmp").replace(path)
    print(f"recorded the file times of {len(entries)} of {len(found)} packages for the next clone at {ROOT}")


def restore(target: Path) -> None:
    path = record_path(target)
    try:
        recorded = json.loads(path.read_text())["packages"]
    except (OSError, ValueError, KeyError):
        print(f"no file times recorded for {ROOT}: every package is compiled")
        return
    # A record is used once: the builds that follow record again when they pass.
    path.unlink()
    found = packages()
    ids = tree_ids(found)
    changed = dirty(found)
    kept = []
    for directory, name in sorted(found.items()):
        entry = recorded.get(directory)
        if (
            entry is None
            or directory in changed
            or ids.get(directory) != entry["tree"]
            or signature(target, name) != entry["signature"]
        ):
            continue
        times = (entry["mtime_ns"], entry["mtime_ns"])
        for file in tracked_files(directory):
            os.utime(file, ns=times)
        kept.append(name)
    compiled = sorted(set(found.values()) - set(kept))
    print("unchanged since the last run at this path whose Rust tests passed, kept fresh: " + (", ".join(kept) or "none"))
    print(f"compiled again: {', '.join(compiled) or 'none'}")


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "restore"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        print("usage: scripts/file-times.py record|restore TARGET_DIR", file=sys.stderr)
        return 2
    started = time.monotonic()
    target = Path(sys.argv[2]).resolve()
    try:
        git("rev-parse", "--is-inside-work-tree")
    except (OSError, subprocess.CalledProcessError):
        # No git tree ids to compare (an unpacked archive, or no git): nothing is kept fresh.
        print(f"{ROOT} is not a git work tree: every package is compiled as Cargo decides")
        return 0
    (record if sys.argv[1] == "record" else restore)(target)
    print(f"({time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
