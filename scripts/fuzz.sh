#!/bin/sh
# fuzz.sh — runs the libFuzzer targets of a build for a bounded time.
#   scripts/fuzz.sh BUILD_DIR SECONDS
# Runs every BUILD_DIR/fuzz_* for SECONDS each, starting from a temporary
# copy of tests/fuzz/corpus_<name>/ (the repository is never modified).
# Builds nothing (configure with -DCWEN_FUZZ=ON -DCMAKE_C_COMPILER=clang).
# Exits non-zero if a target crashes or none is found.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR SECONDS" >&2
    exit 2
fi
build=$1
secs=$2
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
found=0
status=0
for bin in "$build"/fuzz_*; do
    [ -x "$bin" ] && [ -f "$bin" ] || continue
    found=1
    name=$(basename "$bin")
    corpus="$work/corpus_${name#fuzz_}"
    mkdir -p "$corpus" "$work/artifacts_$name"
    if [ -d "$src/tests/fuzz/corpus_${name#fuzz_}" ]; then
        cp "$src/tests/fuzz/corpus_${name#fuzz_}"/* "$corpus"/ 2>/dev/null || true
    fi
    echo "fuzz.sh: $name for ${secs}s"
    if ! "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$work/artifacts_$name/" "$corpus" >"$work/$name.log" 2>&1; then
        tail -n 60 "$work/$name.log" >&2
        for a in "$work/artifacts_$name"/*; do
            [ -f "$a" ] && echo "fuzz.sh: $name crashed on $(basename "$a"): $(od -An -tx1 "$a" | head -c 600)" >&2
        done
        status=1
    else
        grep -E "^#[0-9]+.*DONE|Done [0-9]+ runs" "$work/$name.log" | tail -n 1 || true
    fi
done
if [ $found -eq 0 ]; then
    echo "fuzz.sh: no fuzz_* binaries in $build" >&2
    exit 1
fi
exit $status
