#!/usr/bin/env bash
# oracle-setup.sh — fetch the pinned llama.cpp reference (npm packages named in
# shared/reference/ORACLE.md) into a cache folder outside the source tree.
# Idempotent: does nothing when the cache is complete. Tests and benchmarks
# load these prebuilt libraries; the cwen product never links them.
#   CWEN_ORACLE_DIR  where to put it (default ~/.cache/cwen-oracle)
set -euo pipefail
dir=${CWEN_ORACLE_DIR:-$HOME/.cache/cwen-oracle}
ver=3.22.1
stamp=$dir/.complete-$ver
if [ -f "$stamp" ]; then
  echo "oracle: ready in $dir"
  exit 0
fi
command -v npm >/dev/null || { echo "oracle-setup: npm not found" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
rm -rf llama.cpp cpu package
npm pack --silent "node-llama-cpp@$ver" "@node-llama-cpp/linux-x64@$ver" >/dev/null
tar xzf "node-llama-cpp-$ver.tgz" package/llama/gitRelease.bundle
git -c advice.detachedHead=false clone -q package/llama/gitRelease.bundle llama.cpp
mkdir -p cpu
tar xzf "node-llama-cpp-linux-x64-$ver.tgz" -C cpu
rm -rf package "node-llama-cpp-$ver.tgz" "node-llama-cpp-linux-x64-$ver.tgz"
lib=cpu/package/bins/linux-x64
for f in "$lib/libllama.v0.5.0.so" "$lib/libggml-base.so" llama.cpp/include/llama.h \
         llama.cpp/models/ggml-vocab-qwen35.gguf llama.cpp/models/templates/Qwen3.5-4B.jinja; do
  [ -e "$f" ] || { echo "oracle-setup: $f missing after unpack" >&2; exit 1; }
done
touch "$stamp"
echo "oracle: installed in $dir"
