#!/usr/bin/env bash
# bench-gpu.sh — cwen on one H200 against llama.cpp's reference numbers
# (BENCHMARKS.md), for the device machine.
#
# Builds cwen for sm_90 (Release), generates the 35B-A3B and 27B Q4_K_M files
# into /dev/shm (timed), runs `cwen bench --backend cuda` on each (pp512,
# pp2048, tg128 at depth 0 and 16384; 3 timed runs after a warm-up) and prints
# one table: metric | cwen | llama.cpp | ratio, plus the device copy bandwidth
# and the achieved decode bandwidth. A model or a test that fails is reported
# and the rest still runs; the exit code is 1 when anything failed.
#
# Environment (defaults in brackets):
#   CWEN_VOCAB, CWEN_TEMPLATE  tokenizer GGUF and chat template for mkmodel
#                              (needed where the llama.cpp oracle is absent)
#   BENCH_MODELS ["35b-a3b 27b"]  BENCH_DIR [/dev/shm]  BENCH_BUILD [build-gpu]
#   BENCH_CWEN  a cwen binary built elsewhere (for sm_90): no build here, which
#               saves the device's minutes of nvcc (the deps still serve its runs)
#   BENCH_ARGS ["-p 512,2048 -n 128 -d 0,16384 -r 3"]  BENCH_REGEN=1 rewrites files
#   BENCH_DEPS  a folder from scripts/device-deps.sh, for a machine without
#               Debian's jansson and libmicrohttpd (the H200 machine): its
#               packages are unpacked into a private prefix for the build and
#               the runs, and its tokenizer and template feed mkmodel
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MODELS=${BENCH_MODELS:-"35b-a3b 27b"}
DIR=${BENCH_DIR:-/dev/shm}
BUILD=${BENCH_BUILD:-build-gpu}
ARGS=${BENCH_ARGS:-"-p 512,2048 -n 128 -d 0,16384 -r 3"}
JOBS=$(nproc)
status=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cmake_deps=()
run_env=()
if [ -n "${BENCH_DEPS:-}" ]; then
    # a fixed place beside the build, which keeps the paths CMake cached
    root=$BUILD/deps
    rm -rf "$root" && mkdir -p "$root"
    debs=("$BENCH_DEPS"/*.deb)
    if [ ! -e "${debs[0]}" ]; then
        echo "bench-gpu: BENCH_DEPS=$BENCH_DEPS holds no .deb files (scripts/device-deps.sh makes them)" >&2
        exit 1
    fi
    for d in "${debs[@]}"; do
        dpkg-deb -x "$d" "$root" || { echo "bench-gpu: cannot unpack $d" >&2; exit 1; }
    done
    lib=$root/usr/lib/x86_64-linux-gnu
    # the prefix for find_library/find_path; -rpath-link lets the linker
    # resolve libmicrohttpd's own libraries (gnutls) from there too
    cmake_deps=(-DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$lib")
    # only cwen runs with them, not the tools of this script
    run_env=(env LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    [ -f "$BENCH_DEPS/ggml-vocab-qwen35.gguf" ] && : "${CWEN_VOCAB:=$BENCH_DEPS/ggml-vocab-qwen35.gguf}"
    [ -f "$BENCH_DEPS/Qwen3.5-4B.jinja" ] && : "${CWEN_TEMPLATE:=$BENCH_DEPS/Qwen3.5-4B.jinja}"
fi

if [ -n "${BENCH_CWEN:-}" ]; then
    [ -x "$BENCH_CWEN" ] || { echo "bench-gpu: BENCH_CWEN=$BENCH_CWEN is not an executable" >&2; exit 1; }
    echo "== cwen given: $BENCH_CWEN (not built here)"
else
    echo "== building cwen (Release, sm_90) in $BUILD"
    if ! { cmake -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
               "${cmake_deps[@]}" >"$out/cmake.log" 2>&1 &&
           cmake --build "$BUILD" -j"$JOBS" --target cwen >>"$out/cmake.log" 2>&1; }; then
        echo "bench-gpu: build failed; its last lines:" >&2
        tail -n 20 "$out/cmake.log" >&2
        exit 1
    fi
fi
CWEN=${BENCH_CWEN:-$BUILD/cwen}

gen_args=()
[ -n "${CWEN_VOCAB:-}" ] && gen_args+=(--vocab "$CWEN_VOCAB")
[ -n "${CWEN_TEMPLATE:-}" ] && gen_args+=(--template "$CWEN_TEMPLATE")

for m in $MODELS; do
    f=$DIR/bench-$m-q4_k_m.gguf
    if [ ! -f "$f" ] || [ "${BENCH_REGEN:-0}" = 1 ]; then
        echo "== generating $f"
        t0=$(date +%s.%N)
        if ! "${run_env[@]}" "$CWEN" mkmodel --preset "$m" --mix q4_k_m --threads "$JOBS" "${gen_args[@]}" -o "$f"; then
            echo "bench-gpu: generating $m failed" >&2
            rm -f "$f"
            echo "{\"test\": \"(model)\", \"error\": \"generation failed\"}" >"$out/$m.jsonl"
            status=1
            continue
        fi
        t1=$(date +%s.%N)
        echo "generation of $m: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
    fi
    echo "== $CWEN bench -m $f --backend cuda $ARGS --json"
    # shellcheck disable=SC2086 # ARGS is a list of options
    if ! "${run_env[@]}" "$CWEN" bench -m "$f" --backend cuda $ARGS --json >"$out/$m.jsonl" 2>"$out/$m.err"; then
        echo "bench-gpu: cwen bench on $m reported a failure:" >&2
        grep -v ' \.\.\.$' "$out/$m.err" >&2
        status=1
        # a failure before any test leaves no JSON: keep its message for the table
        if [ ! -s "$out/$m.jsonl" ]; then
            msg=$(tail -n 1 "$out/$m.err" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')
            echo "{\"test\": \"(model)\", \"error\": $msg}" >"$out/$m.jsonl"
        fi
    fi
done

python3 - "$out" $MODELS <<'EOF'
import json, os, sys

out, models = sys.argv[1], sys.argv[2:]
# The llama.cpp column: the peer measured on the same machine kind (one H200,
# llama.cpp v0.5.0, sm_90a, flash attention and CUDA graphs on), copied from
# BENCHMARKS.md ("The peer"). Not re-measured by this script.
PEER = {
    "35b-a3b": {"pp512": 5460, "pp2048": 9540, "tg128": 232, "tg128@d16384": 232},
    "27b": {"pp512": 2480, "pp2048": 2620, "tg128": 82, "tg128@d16384": 79},
}

def load(m):
    rows = {}
    p = os.path.join(out, m + ".jsonl")
    if os.path.exists(p):
        for line in open(p):
            line = line.strip()
            if line.startswith("{"):
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                rows[j.get("test", "?")] = j
    return rows

print()
print(f"| {'metric':<26} | {'cwen t/s (median [min-max])':>34} | {'llama.cpp':>9} | {'ratio':>6} |")
print(f"| {'-'*26} | {'-'*33}: | {'-'*8}: | {'-'*5}: |")
notes = []
for m in models:
    rows, peer = load(m), PEER.get(m, {})
    if "(model)" in rows:
        print(f"| {m + ' (all)':<26} | {'error: ' + rows['(model)']['error'][:27]:>34} | {'-':>9} | {'-':>6} |")
        continue
    for t in list(peer) + [t for t in rows if t not in peer]:
        j, ref = rows.get(t), peer.get(t)
        if j is None:
            cell, ratio = "not run", "-"
        elif "error" in j:
            cell, ratio = "error: " + j["error"][:27], "-"
        else:
            cell = f"{j['tps_median']:.1f} [{j['tps_min']:.1f}-{j['tps_max']:.1f}]"
            ratio = f"{j['tps_median'] / ref:.2f}x" if ref else "-"
        print(f"| {m + ' ' + t:<26} | {cell:>34} | {ref if ref else '-':>9} | {ratio:>6} |")
        if j and "bytes_per_token" in j:
            line = (f"{m} {t}: {j['bytes_per_token'] / 1e9:.3f} GB/token (weights "
                    f"{j['bytes_weights'] / 1e9:.3f}, DeltaNet state r+w {j['bytes_state'] / 1e9:.3f}, "
                    f"K/V {j['bytes_kv'] / 1e9:.3f}) -> achieved {j['decode_gbps']:.0f} GB/s")
            if "copy_gbps" in j:
                line += (f" = {j['copy_pct']:.1f}% of the copy bandwidth {j['copy_gbps']:.0f} GB/s"
                         f" (limit {j['copy_gbps'] * 1e9 / j['bytes_per_token']:.0f} tok/s)")
            line += f"; logits fnv1a64 {j['logits_fnv1a64']}, ids {j['ids_fnv1a64']}"
            if not j.get("ids_same_all_runs", True):
                line += " (ids DIFFER between runs)"
            notes.append(line)
print()
for n in notes:
    print(n)
EOF
exit $status
