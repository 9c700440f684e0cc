#!/usr/bin/env bash
# Time-boxed fuzzing of Weir's parsers of untrusted input with cargo fuzz (libFuzzer):
# the request decoder, the batch and record validator, log recovery from arbitrary
# segment bytes, the controller port's framing, SASL logins and TLS handshakes (harnesses in
# crates/weir-fuzz).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 300 s each, every target
#
# Needs the nightly toolchain and cargo-fuzz (`rustup toolchain install nightly`,
# `cargo install cargo-fuzz`); installs cargo-fuzz when missing. Each target starts from its
# seeds (fuzz/seeds/<target>, recorded from real clients by fuzz/record_seeds.py) and its saved
# corpus (fuzz/corpus/<target>). An input that makes a harness fail is copied to
# fuzz/regressions/<target>/, which the test command replays forever after (commit it with the
# fix). At the end the corpus is minimized and a line per target reports runs and time.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${1:-300}"
shift || true
TARGETS=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=(decode_request validate_batch recover_log controller_frames sasl_exchange tls_handshake)
fi
if [[ -d "$HOME/.cargo/bin" && ":$PATH:" != *":$HOME/.cargo/bin:"* ]]; then
  PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd "$ROOT/fuzz"
cargo +nightly fuzz build -O "${TARGETS[@]:0:1}" >/dev/null 2>&1 || cargo +nightly fuzz build -O

REPORT=()
status=0
for target in "${TARGETS[@]}"; do
  corpus="corpus/$target"
  mkdir -p "$corpus" "regressions/$target"
  log="$(mktemp)"
  started=$SECONDS
  set +e
  cargo +nightly fuzz run -O "$target" "$corpus" "seeds/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 2>&1 | tee "$log" | grep -E "^#[0-9]+.*(pulse|DONE)|ERROR|panicked" || true
  code=${PIPESTATUS[0]}
  set -e
  runs="$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')"
  if [[ $code -ne 0 ]]; then
    status=1
    for crash in artifacts/"$target"/*; do
      [[ -f "$crash" ]] && cp "$crash" "regressions/$target/" && echo "saved failing input: regressions/$target/$(basename "$crash")"
    done
    REPORT+=("$target: FAILED after ${runs:-?} runs in $((SECONDS - started)) s (see regressions/$target)")
  else
    REPORT+=("$target: ${runs:-?} runs in $((SECONDS - started)) s, no failure")
  fi
  rm -f "$log"
  # Keep the saved corpus small: only inputs that add coverage.
  cargo +nightly fuzz cmin -O "$target" "$corpus" >/dev/null 2>&1 || true
done
echo
printf '%s\n' "${REPORT[@]}"
exit $status
