#!/usr/bin/env bash
# Builds the franz-go program of compat/go (go.mod, go.sum, *.go) into
# .cache/franz-go/weir-franz-go at the repository root, for compat/tests/test_franz_go.py.
# Modules and compiled packages go to Go's own caches (`go env GOMODCACHE GOCACHE`), which
# outlive a fresh clone; from empty caches the build takes about a minute on 2 cores.
#
#   compat/go/install.sh
#
# Idempotent: when the sources, go.sum and the Go version are those of the last build it
# does nothing. Quiet unless it fails; exits non-zero when `go` is missing or the build
# fails. Modules come from the Go module proxy, checked against the committed go.sum.

set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$SRC/../.." && pwd)"
CACHE="$ROOT/.cache/franz-go"
BIN="$CACHE/weir-franz-go"
STAMP="$CACHE/.stamp"

die() { echo "compat/go/install.sh: $*" >&2; exit 1; }

command -v go >/dev/null || die "go is not on PATH: install Go 1.26 or newer (franz-go $(
  sed -n 's/^\tgithub.com\/twmb\/franz-go \(v[^ ]*\)$/\1/p' "$SRC/go.mod") needs it)"

want="$(cd "$SRC" && { go env GOVERSION; cat go.mod go.sum ./*.go; } | sha256sum | cut -d' ' -f1)"
if [[ -x "$BIN" && "$(cat "$STAMP" 2>/dev/null || true)" == "$want" ]]; then
  exit 0
fi

mkdir -p "$CACHE"
# The installed toolchain only (never a downloaded one); go.sum as committed; no git needed.
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly -buildvcs=false"
log="$(mktemp)"
trap 'rm -f "$log" "$BIN.tmp"' EXIT
if ! (cd "$SRC" && go build -trimpath -o "$BIN.tmp" .) >"$log" 2>&1; then
  cat "$log" >&2
  die "could not build compat/go with $(go version) (output above); franz-go needs Go 1.26 or newer and the Go module proxy for its modules"
fi
mv -f "$BIN.tmp" "$BIN"
echo "$want" > "$STAMP"
