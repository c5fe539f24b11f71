#!/usr/bin/env bash
# profile-gpu.sh — where one decode token's time goes, kernel by kernel, on
# the device machine: Nsight Compute times every launch of a few decode
# steps (graph and programmatic launch off, so each kernel is timed alone)
# and scripts/ncu-table.py folds one token's launches (argmax to argmax)
# into a table: count, total and mean µs, DRAM MB read and GB/s, grid,
# registers per thread, by kernel.
#
# ncu's durations carry a fixed cost of a few µs per launch that the decode
# graph does not pay: compare kernels with each other, and the sum with
# `cwen bench`'s tg time, not the sum with it directly.
#
# Usage: scripts/profile-gpu.sh MODEL.gguf [OUT.csv]
#   BENCH_BUILD [build-gpu]: a build dir holding cwen (scripts/bench-gpu.sh makes one)
#   PROFILE_PREFILL=N: instead, the first PROFILE_COUNT [1400] launches of an
#     N-token prefill (programmatic launch off), every launch in the table
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: scripts/profile-gpu.sh MODEL.gguf [OUT.csv]}
CSV=${2:-$(mktemp --suffix=.csv)}
CWEN=${BENCH_BUILD:-build-gpu}/cwen
command -v ncu >/dev/null || { echo "profile-gpu: ncu (Nsight Compute) not found" >&2; exit 1; }
[ -x "$CWEN" ] || { echo "profile-gpu: no $CWEN (set BENCH_BUILD)" >&2; exit 1; }
METRICS=gpu__time_duration.sum,launch__registers_per_thread,dram__bytes_read.sum
if [ -n "${PROFILE_PREFILL:-}" ]; then
    CWEN_CUDA_PDL=0 ncu --cache-control none --clock-control none \
        --launch-count "${PROFILE_COUNT:-1400}" --metrics "$METRICS" \
        --csv "$CWEN" bench -m "$MODEL" -p "$PROFILE_PREFILL" -n 0 -r 1 --backend cuda > "$CSV"
    python3 scripts/ncu-table.py --all "$CSV"
    exit
fi
# skip the first launches (weights upload, prefill, the first decode steps),
# then enough launches to hold two argmax kernels, i.e. one whole token
CWEN_CUDA_GRAPH=0 CWEN_CUDA_PDL=0 ncu --cache-control none --clock-control none \
    --launch-skip "${PROFILE_SKIP:-1500}" --launch-count "${PROFILE_COUNT:-1400}" \
    --metrics "$METRICS" \
    --csv "$CWEN" bench -m "$MODEL" -p 0 -n 12 -r 1 --backend cuda > "$CSV"
python3 scripts/ncu-table.py "$CSV"
