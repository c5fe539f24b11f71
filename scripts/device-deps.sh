#!/usr/bin/env bash
# device-deps.sh — one folder that makes scripts/bench-gpu.sh work on a GPU
# machine whose image has CUDA and CMake but neither Debian's jansson nor
# libmicrohttpd, and no network (the H200 machine): their .deb files with
# the run-time libraries they pull in, and the tokenizer and chat template
# that `cwen mkmodel` reads. Run it where apt reaches Debian's archive (a
# development machine); carry the folder over and run there
#   BENCH_DEPS=.device-deps scripts/bench-gpu.sh
# which unpacks the packages into a private prefix for the build and the
# runs (nothing is installed).
#   usage: scripts/device-deps.sh [DIR]   (default .device-deps, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.device-deps}
# the headers and link names, then the run-time closure of the two
# libraries, less what every program already runs on (libc, libgcc)
pkgs=(libjansson-dev libmicrohttpd-dev)
while read -r p; do
    case $p in libc6 | libgcc-s1 | gcc-*-base) ;; *) pkgs+=("$p") ;; esac
done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances libjansson4 libmicrohttpd12 | grep '^[a-z]' | sort -u)
mkdir -p "$dir"
rm -f "$dir"/*.deb
(cd "$dir" && apt-get download "${pkgs[@]}") || { echo "device-deps: apt-get download failed" >&2; exit 1; }
models=${CWEN_ORACLE_DIR:-$HOME/.cache/cwen-oracle}/llama.cpp/models
[ -f "$models/ggml-vocab-qwen35.gguf" ] || scripts/oracle-setup.sh
cp "$models/ggml-vocab-qwen35.gguf" "$models/templates/Qwen3.5-4B.jinja" "$dir/"
echo "device-deps: ${#pkgs[@]} packages and the tokenizer in $dir ($(du -sh "$dir" | cut -f1))"
