#!/usr/bin/env bash
# Build librdkafka's `rdkafka_performance` load generator from the librdkafka sources that ship
# inside the `rdkafka-sys` crate, statically linked, for benchmarking Weir.
#
# Usage: bench/build-rdkafka-perf.sh [--work DIR] [--version CRATE_VERSION] [--force]
#
#   --work DIR         work directory (default: $WEIR_BENCH_WORK or /tmp/weir-bench)
#   --version V        rdkafka-sys crate version (default: 4.10.0+2.12.1, i.e. librdkafka 2.12.1)
#   --force            rebuild even if $WORK/rdkafka_performance already exists
#
# Result: $WORK/rdkafka_performance. Prints the librdkafka version it was built from.
#
# Where the crate comes from, first match wins:
#   1. $RDKAFKA_SYS_CRATE (a path to a downloaded rdkafka-sys-V.crate file);
#   2. Cargo's local cache (~/.cargo/registry/cache/*/rdkafka-sys-V.crate);
#   3. the download URL of the registry Cargo is configured with, read from Cargo's cached
#      registry config (~/.cargo/registry/index/*/config.json, key "dl"), or $CRATE_DL_URL.
# The .crate file's SHA-256 is checked against the registry index checksum pinned below for
# the default version (set RDKAFKA_SYS_SHA256 for another version, or to "skip").
#
# Needs: curl, tar, gcc, make, python3 (librdkafka's build uses it). Installs zlib/zstd/lz4 headers
# with apt-get when missing (optional compression codecs; librdkafka has built-in snappy).
# SSL, SASL/GSSAPI and libcurl are disabled: the benchmarks talk plaintext to 127.0.0.1.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

WORK="${WEIR_BENCH_WORK:-/tmp/weir-bench}"
VERSION="4.10.0+2.12.1"
FORCE=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --work) WORK="$2"; shift 2 ;;
        --version) VERSION="$2"; shift 2 ;;
        --force) FORCE=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

# Registry index checksums (field "cksum") of known versions.
declare -A KNOWN_SHA256=(
    ["4.10.0+2.12.1"]="e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77"
    ["4.9.0+2.10.0"]="5230dca48bc354d718269f3e4353280e188b610f7af7e2fcf54b7a79d5802872"
    ["4.8.0+2.3.0"]="ced38182dc436b3d9df0c77976f37a67134df26b050df1f0006688e46fc4c8be"
)
EXPECTED_SHA256="${RDKAFKA_SYS_SHA256:-${KNOWN_SHA256[$VERSION]:-}}"

mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
BIN="$WORK/rdkafka_performance"
SRC_ROOT="$WORK/src/rdkafka-sys-$VERSION"
LIBSRC="$SRC_ROOT/librdkafka"

librdkafka_version() {
    # RD_KAFKA_VERSION is 0xMMmmrrxx in rdkafka.h
    local hex
    hex="$(sed -n 's/^#define RD_KAFKA_VERSION *\(0x[0-9a-fA-F]*\).*/\1/p' "$LIBSRC/src/rdkafka.h")"
    printf '%d.%d.%d\n' $(( (hex >> 24) & 0xff )) $(( (hex >> 16) & 0xff )) $(( (hex >> 8) & 0xff ))
}

if [[ -x "$BIN" && $FORCE -eq 0 && -f "$LIBSRC/src/rdkafka.h" ]]; then
    echo "already built: $BIN (librdkafka $(librdkafka_version), from rdkafka-sys $VERSION)"
    exit 0
fi

# --- 1. get the crate -------------------------------------------------------------------
CRATE="$WORK/rdkafka-sys-$VERSION.crate"
if [[ -n "${RDKAFKA_SYS_CRATE:-}" ]]; then
    cp "$RDKAFKA_SYS_CRATE" "$CRATE"
elif [[ ! -s "$CRATE" ]]; then
    cached="$(ls "$HOME"/.cargo/registry/cache/*/"rdkafka-sys-$VERSION.crate" 2>/dev/null | head -n1 || true)"
    if [[ -n "$cached" ]]; then
        echo "using Cargo's cached crate: $cached"
        cp "$cached" "$CRATE"
    else
        dl="${CRATE_DL_URL:-}"
        if [[ -z "$dl" ]]; then
            cfg="$(ls "$HOME"/.cargo/registry/index/*/config.json 2>/dev/null | head -n1 || true)"
            if [[ -z "$cfg" ]]; then
                echo "no crate source: set RDKAFKA_SYS_CRATE=path/to/rdkafka-sys-$VERSION.crate" >&2
                echo "or CRATE_DL_URL=<registry download base>, or let Cargo fetch once" >&2
                exit 1
            fi
            dl="$(sed -n 's/.*"dl" *: *"\([^"]*\)".*/\1/p' "$cfg")"
        fi
        if [[ "$dl" == *"{crate}"* || "$dl" == *"{version}"* ]]; then
            url="${dl//\{crate\}/rdkafka-sys}"
            url="${url//\{version\}/$VERSION}"
        else
            url="$dl/rdkafka-sys/$VERSION/download"
        fi
        echo "downloading rdkafka-sys $VERSION from the configured Cargo registry"
        curl -fsSL --retry 3 --max-time 300 -o "$CRATE.part" "$url"
        mv "$CRATE.part" "$CRATE"
    fi
fi

if [[ "$EXPECTED_SHA256" != "skip" ]]; then
    if [[ -z "$EXPECTED_SHA256" ]]; then
        echo "no pinned checksum for rdkafka-sys $VERSION: set RDKAFKA_SYS_SHA256 (or 'skip')" >&2
        exit 1
    fi
    got="$(sha256sum "$CRATE" | cut -d' ' -f1)"
    if [[ "$got" != "$EXPECTED_SHA256" ]]; then
        echo "checksum mismatch for $CRATE: got $got, expected $EXPECTED_SHA256" >&2
        rm -f "$CRATE"
        exit 1
    fi
fi

rm -rf "$SRC_ROOT"
mkdir -p "$WORK/src"
tar xzf "$CRATE" -C "$WORK/src"
[[ -f "$LIBSRC/configure" ]] || { echo "no librdkafka/configure inside the crate" >&2; exit 1; }

# --- 2. optional codec headers ------------------------------------------------------------
missing=()
[[ -f /usr/include/zlib.h ]] || missing+=(zlib1g-dev)
[[ -f /usr/include/zstd.h ]] || missing+=(libzstd-dev)
[[ -f /usr/include/lz4.h ]] || missing+=(liblz4-dev)
if [[ ${#missing[@]} -gt 0 ]]; then
    if command -v apt-get >/dev/null && [[ $(id -u) -eq 0 ]]; then
        echo "installing ${missing[*]}"
        timeout 600 apt-get update -qq || true
        timeout 600 apt-get install -y -qq "${missing[@]}" >/dev/null || \
            echo "warning: could not install ${missing[*]}; building without them" >&2
    else
        echo "warning: ${missing[*]} missing; building without them" >&2
    fi
fi

# --- 3. build ------------------------------------------------------------------------------
cd "$LIBSRC"
chmod +x configure lds-gen.py 2>/dev/null || true
opts=(--disable-ssl --disable-gssapi --disable-curl --enable-static)
[[ -f /usr/include/lz4.h ]] || opts+=(--disable-lz4-ext)
echo "configuring librdkafka $(librdkafka_version): ${opts[*]}"
./configure "${opts[@]}" >"$WORK/rdkafka-configure.log" 2>&1 || {
    tail -n 40 "$WORK/rdkafka-configure.log" >&2; exit 1; }
JOBS="${JOBS:-$(nproc)}"
echo "building librdkafka.a with $JOBS jobs (log: $WORK/rdkafka-build.log)"
make -C src -j"$JOBS" librdkafka.a >"$WORK/rdkafka-build.log" 2>&1 || {
    tail -n 40 "$WORK/rdkafka-build.log" >&2; exit 1; }

# Link the example against the static library plus whatever libraries configure chose.
LIBS="$(sed -n 's/^LIBS+= *//p; s/^LIBS= *//p' Makefile.config | tr '\n' ' ')"
CFLAGS_CFG="$(sed -n 's/^CFLAGS+= *//p' Makefile.config | tr '\n' ' ')"
# shellcheck disable=SC2086
gcc -O2 -g $CFLAGS_CFG -I src examples/rdkafka_performance.c -o "$BIN.part" src/librdkafka.a $LIBS \
    >>"$WORK/rdkafka-build.log" 2>&1 || { tail -n 40 "$WORK/rdkafka-build.log" >&2; exit 1; }
mv "$BIN.part" "$BIN"

echo "built $BIN"
echo "librdkafka $(librdkafka_version) (rdkafka-sys $VERSION)"
"$BIN" -h 2>&1 | grep -m1 'librdkafka version' || true
