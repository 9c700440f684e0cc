#!/usr/bin/env bash
# The one test command: checks formatting, import circles and lints, builds Weir, runs the Rust
# tests (including the saved fuzz corpus) in the iter profile, then runs the compatibility suite
# (compat/) against the built binary with real Kafka clients.
#
#   scripts/test.sh [extra pytest arguments]
#   scripts/test.sh --quick [pytest arguments]    e.g. --quick -k reconnect_storm,
#                                                 --quick compat/tests/test_attacks.py
#
# --quick is the inner loop (docs/developing.md): no fmt, clippy or cargo test; the weir
# and weir-diff binaries alone in the `iter` profile (incremental, Weir's crates at opt-level 1), then
# the compatibility tests the pytest arguments select, against that binary.
#
# On a fresh Debian machine it installs what it needs (kcat, python3-venv,
# nodejs/npm, Debian's chromium for the console tests, a JDK and Maven when missing,
# the Python venv in .venv, KafkaJS and playwright-core from compat/package-lock.json, the Kafka Java client, tools and Streams from compat/java/pom.xml
# into .cache/kafka-jars, Kafka Connect 4.3.1 (compat/connect/pom.xml) into .cache/connect-jars,
# Apache Kafka's server (the differential suite's reference) into
# .cache/kafka-reference-4.4.0, the franz-go program of compat/go (go.mod, go.sum) into
# .cache/franz-go), all kept outside the work tree (WEIR_CACHE_DIR, below); when everything
# is already there it only checks. Respects CARGO_TARGET_DIR.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export DEBIAN_FRONTEND=noninteractive
# The suite must test the binary built here, never a broker given from outside.
unset COMPAT_BOOTSTRAP
if [[ -d "$HOME/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
  PATH="$HOME/.cargo/bin:$PATH"
fi

QUICK=0
if [[ "${1:-}" == "--quick" ]]; then
  QUICK=1
  shift
fi

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
[[ "$TARGET_DIR" = /* ]] || TARGET_DIR="$ROOT/$TARGET_DIR"
if [[ $QUICK -eq 1 ]]; then
  WEIR_BIN_PATH="$TARGET_DIR/iter/weir"
else
  WEIR_BIN_PATH="$TARGET_DIR/release/weir"
fi
PYTHON="${PYTHON:-python3}"

# The compatibility suite's clients (the Python venv, node_modules, the Java jars, Kafka's
# server, the franz-go program) live outside the work tree, in WEIR_CACHE_DIR (default
# ~/.cache/weir-compat): a fresh clone links them in and reuses what an earlier clone on this
# machine installed, each still checked against its lock file. A work tree that already has
# its own .venv, .cache or compat/node_modules directory keeps it.
CACHE_DIR="${WEIR_CACHE_DIR:-$HOME/.cache/weir-compat}"
# link_cache PATH NAME: unless the work tree has PATH, make it a link to NAME in the cache.
link_cache() {
  local path="$ROOT/$1" target="$CACHE_DIR/$2"
  if [[ ! -e "$path" && ! -L "$path" ]]; then
    mkdir -p "$target"
    ln -s "$target" "$path"
  fi
}
link_cache .venv venv
link_cache .cache files
# Its real path, so the scripts pip installs name an interpreter that outlives this clone.
VENV="$(cd "$ROOT/.venv" && pwd -P)"

STAGES=()
CURRENT=""
STAGE_START=0

say() { printf '\n==> %s\n' "$*"; }

begin() {
  CURRENT="$1"
  STAGE_START=$SECONDS
  say "$1"
}

end() {
  STAGES+=("ok      $CURRENT ($((SECONDS - STAGE_START))s)")
  CURRENT=""
}

summary() {
  local code=$?
  echo
  echo "==================== scripts/test.sh summary ===================="
  local line
  for line in "${STAGES[@]+"${STAGES[@]}"}"; do
    echo "  $line"
  done
  if [[ -n "$CURRENT" ]]; then
    echo "  FAILED  $CURRENT ($((SECONDS - STAGE_START))s)"
  fi
  if [[ $code -eq 0 ]]; then
    echo "RESULT: all stages passed in ${SECONDS}s"
  else
    echo "RESULT: FAILED (exit code $code) after ${SECONDS}s"
  fi
  echo "================================================================="
}
trap summary EXIT

APT_UPDATED=0
apt_install() {
  local runner=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "need root (or sudo) to install: $*" >&2; return 1; }
    runner=(sudo -E)
  fi
  if [[ $APT_UPDATED -eq 0 ]]; then
    "${runner[@]}" apt-get update -qq
    APT_UPDATED=1
  fi
  "${runner[@]}" apt-get install -y -qq --no-install-recommends "$@"
}

# sha256 of the given files, to skip reinstalling what has not changed.
fingerprint() { cat "$@" | sha256sum | cut -d' ' -f1; }

# ------------------------------------------------------------------------------
begin "system tools"
command -v cargo >/dev/null || { echo "cargo not found: install a Rust toolchain (see rust-version in Cargo.toml)" >&2; exit 1; }
if ! command -v kcat >/dev/null; then
  apt_install kcat
fi
if ! command -v "$PYTHON" >/dev/null; then
  apt_install python3 python3-venv
fi
if [[ ! -x "$VENV/bin/python" ]] && ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  apt_install python3-venv
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install nodejs npm
fi
# The console's end-to-end tests drive Debian's chromium through playwright-core.
if [[ -z "${CHROMIUM:-}" ]]; then
  CHROMIUM="$(command -v chromium || true)"
  if [[ -z "$CHROMIUM" ]]; then
    apt_install chromium
    CHROMIUM="$(command -v chromium)"
  fi
fi
export CHROMIUM
echo "cargo:  $(cargo --version)"
echo "kcat:   $(kcat -V 2>&1 | grep -m1 -o 'Version.*' || true)"
echo "python: $("$PYTHON" --version 2>&1)"
echo "node:   $(node --version), npm $(npm --version)"
echo "chromium: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
end

# ------------------------------------------------------------------------------
if [[ $QUICK -eq 1 ]]; then
  begin "cargo build --profile iter -p weir -p weir-diff (--quick)"
  cargo build --profile iter -p weir -p weir-diff
  [[ -x "$WEIR_BIN_PATH" ]] || { echo "build did not produce $WEIR_BIN_PATH" >&2; exit 1; }
  end
else
  # A fresh clone's files all carry the time of the clone, which makes Cargo compile every
  # package again; packages whose content, work tree and build are those of the last run at
  # this path whose Rust tests passed get that run's file times back (scripts/file-times.py
  # says which).
  begin "file times of unchanged packages (scripts/file-times.py restore)"
  "$PYTHON" scripts/file-times.py restore "$TARGET_DIR"
  end

  begin "cargo fmt --all --check"
  cargo fmt --all --check
  end

  begin "no file imports in a circle within a crate (scripts/import-cycles.py)"
  "$PYTHON" scripts/import-cycles.py crates
  end

  begin "cargo clippy --workspace --all-targets -- -D warnings"
  cargo clippy --workspace --all-targets -- -D warnings
  end

  # ------------------------------------------------------------------------------
  # What the compatibility suite runs: the binaries, built as users build them.
  begin "cargo build --release --workspace --bins"
  cargo build --release --workspace --bins
  [[ -x "$WEIR_BIN_PATH" ]] || { echo "build did not produce $WEIR_BIN_PATH" >&2; exit 1; }
  end

  # The Rust tests in the iter profile (docs/developing.md): incremental, so what did not
  # change since the last run on this machine is not compiled again, and its dependencies
  # are the ones --quick builds.
  begin "cargo test --profile iter --workspace"
  cargo test --profile iter --workspace
  "$PYTHON" scripts/file-times.py record "$TARGET_DIR"
  end
fi

# ------------------------------------------------------------------------------
begin "python venv (.venv) from compat/requirements.txt"
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
want="$(fingerprint compat/requirements.txt)"
if [[ "$(cat "$VENV/.compat-requirements" 2>/dev/null || true)" != "$want" ]]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r compat/requirements.txt
  echo "$want" > "$VENV/.compat-requirements"
else
  echo "requirements unchanged; already installed"
fi
end

begin "npm ci (compat/package-lock.json)"
# Installed in the cache beside a copy of the lock file, and linked in as compat/node_modules.
NPM_DIR="$ROOT/compat"
if [[ ! -e compat/node_modules || -L compat/node_modules ]]; then
  NPM_DIR="$CACHE_DIR/npm"
  mkdir -p "$NPM_DIR"
  ln -sfn "$NPM_DIR/node_modules" compat/node_modules
fi
want="$(fingerprint compat/package.json compat/package-lock.json)"
if [[ "$(cat "$NPM_DIR/node_modules/.compat-lock" 2>/dev/null || true)" != "$want" ]]; then
  [[ "$NPM_DIR" == "$ROOT/compat" ]] || cp compat/package.json compat/package-lock.json "$NPM_DIR/"
  npm ci --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error
  echo "$want" > "$NPM_DIR/node_modules/.compat-lock"
else
  echo "lockfile unchanged; already installed"
fi
end

begin "kafka java client, tools and streams (compat/java/pom.xml) into .cache/kafka-jars"
if ! command -v java >/dev/null || ! command -v javac >/dev/null; then
  apt_install openjdk-17-jdk-headless
fi
if ! command -v mvn >/dev/null; then
  apt_install maven
fi
echo "java:   $(java -version 2>&1 | head -1)"

# fetch_jars POM DIR PROPERTY: the jars POM names (and what they need at run time) into DIR
# (passed to Maven as -DPROPERTY=DIR), again only when POM changed.
fetch_jars() {
  local pom="$1" dir="$2" property="$3" want mvn_log
  want="$(fingerprint "$pom")"
  if [[ "$(cat "$dir/.compat-pom" 2>/dev/null || true)" == "$want" ]]; then
    echo "pom unchanged; already fetched"
    return
  fi
  rm -rf "$dir"
  # Quiet unless it fails (Debian's Maven 3.8 prints stray colour codes even with -q -B).
  mvn_log="$(mktemp)"
  if ! mvn -q -B -f "$pom" dependency:copy-dependencies "-D$property=$dir" >"$mvn_log" 2>&1; then
    sed 's/\x1b\[[0-9;]*m//g' "$mvn_log" >&2
    rm -f "$mvn_log"
    echo "could not fetch the jars named in $pom from Maven Central (mvn output above)" >&2
    exit 1
  fi
  rm -f "$mvn_log"
  echo "$want" > "$dir/.compat-pom"
  echo "fetched $(ls "$dir" | grep -c '\.jar$') jars"
}
fetch_jars compat/java/pom.xml "$ROOT/.cache/kafka-jars" kafka.jars
end

begin "Kafka Connect 4.3.1 (compat/connect/pom.xml) into .cache/connect-jars"
fetch_jars compat/connect/pom.xml "$ROOT/.cache/connect-jars" connect.jars
end

begin "Apache Kafka 4.4.0 server (the differential suite's reference) into .cache/kafka-reference-4.4.0"
KAFKA_REFERENCE="$ROOT/.cache/kafka-reference-4.4.0"
bench/kafka.sh fetch --version 4.4.0 --work "$KAFKA_REFERENCE"
export WEIR_KAFKA_REFERENCE_WORK="$KAFKA_REFERENCE"
end

begin "franz-go program (compat/go, go.sum) into .cache/franz-go"
command -v go >/dev/null || { echo "go not found: install Go 1.26 or newer (franz-go needs it; Debian's golang-go is older)" >&2; exit 1; }
echo "go:     $(go version)"
compat/go/install.sh
echo "built .cache/franz-go/weir-franz-go"
end

# ------------------------------------------------------------------------------
# Test modules run in parallel, each module on one worker (its tests share the module's
# server); every server and cluster binds its own free ports and data directories, and fault
# tests make their own network namespaces. The slowest modules start first
# (compat/tests/conftest.py, SLOWEST_MODULES; --no-loadscope-reorder keeps that order).
# WEIR_COMPAT_WORKERS sets how many (default two per core; --quick: 0, in-process); 0 runs
# them one at a time. Two per core halve the suite's time against one, since most of a
# test's time is waiting (docs/developing.md).
if [[ $QUICK -eq 1 ]]; then
  WORKERS="${WEIR_COMPAT_WORKERS:-0}"
else
  WORKERS="${WEIR_COMPAT_WORKERS:-$(($(nproc 2>/dev/null || echo 2) * 2))}"
fi
# Every module unless the arguments name modules or tests (compat/tests/test_x.py[::name]).
SELECTION=(compat/tests)
for arg in "$@"; do
  [[ "$arg" == compat/* ]] && SELECTION=()
done
begin "compatibility suite (${SELECTION[*]:-selected}, $WORKERS workers) against $WEIR_BIN_PATH"
# The slowest tests are listed at the end: where the suite's minutes go.
WEIR_BIN="$WEIR_BIN_PATH" "$VENV/bin/python" -m pytest "${SELECTION[@]+"${SELECTION[@]}"}" -q --timeout=300 \
  -n "$WORKERS" --dist loadfile --no-loadscope-reorder --durations=20 --durations-min=5 "$@"
end
