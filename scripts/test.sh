#!/usr/bin/env bash
# test.sh — the README's test command: build cwen and pass every test.
#  1. the llama.cpp oracle (npm, cached outside the tree) for parity tests,
#     and the server tests' npm clients (tests/server/node_modules);
#  2. the release build (CUDA too when nvcc is present) and every CTest test,
#     parity against llama.cpp included; GPU tests skip where no GPU is;
#  3. an ASan+UBSan build (clang) of the unit tests;
#  4. a bounded run of each fuzz target under the sanitizers.
# Environment: JOBS (default nproc), FUZZ_SECONDS (default 60 per target).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
scripts/oracle-setup.sh
# the server tests' npm clients, pinned by tests/server/package-lock.json
npm ci --prefix tests/server --ignore-scripts --no-audit --no-fund

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
      -DCWEN_SANITIZE=ON -DCWEN_FUZZ=ON -DCWEN_CUDA=OFF
cmake --build build-asan -j"$jobs"
# llama.cpp's prebuilt libraries are not instrumented: parity runs in build/ only.
ctest --test-dir build-asan --output-on-failure -j"$jobs" -E '^parity_'

export CWEN_ORACLE_DIR=${CWEN_ORACLE_DIR:-$HOME/.cache/cwen-oracle}  # the tokenizer fuzzer reads the vocab fixture
scripts/fuzz.sh build-asan "${FUZZ_SECONDS:-60}"
