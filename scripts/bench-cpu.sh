#!/usr/bin/env bash
# bench-cpu.sh — cwen vs llama.cpp on the CPU, same file, same run, one table.
#
# Builds cwen (Release) and the llama.cpp peer (bench/llama_peer.c, linked to
# the oracle's prebuilt CPU libs) if needed, generates a model cut to a few
# layers with the 35B-A3B's widths (2048 embd, 256 experts; 3 DeltaNet : 1
# attention) or, with BENCH_PRESET=27b, the dense 27B's (5120 embd, 17408 FFN),
# runs `cwen bench --backend cpu` and the peer with the same tests, threads
# and prompt stream, and prints both with the ratio cwen / llama.cpp.
#
# Environment (defaults in brackets):
#   BENCH_PRESET [35b-a3b]  BENCH_LAYERS [8]  BENCH_PP [128,512]  BENCH_TG [64]
#   BENCH_DEPTH [0]  BENCH_REPS [3]  BENCH_THREADS [2]
#   BENCH_MODEL [/tmp/bench-<35b|27b><layers>.gguf]
#   BENCH_BUILD [build-bench-cpu]  BENCH_REGEN=1 writes the model again
set -euo pipefail
cd "$(dirname "$0")/.."

PRESET=${BENCH_PRESET:-35b-a3b}
LAYERS=${BENCH_LAYERS:-8}
PP=${BENCH_PP:-128,512}
TG=${BENCH_TG:-64}
DEPTH=${BENCH_DEPTH:-0}
REPS=${BENCH_REPS:-3}
THREADS=${BENCH_THREADS:-2}
MODEL=${BENCH_MODEL:-/tmp/bench-${PRESET%-a3b}${LAYERS}.gguf}
BUILD=${BENCH_BUILD:-build-bench-cpu}
export CWEN_ORACLE_DIR=${CWEN_ORACLE_DIR:-$HOME/.cache/cwen-oracle}

if [ ! -x "$BUILD/cwen" ] || [ ! -x "$BUILD/llama_peer" ]; then
    echo "== building cwen (Release) in $BUILD"
    cmake -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCWEN_CUDA=OFF >/dev/null
fi
cmake --build "$BUILD" -j"$(nproc)" --target cwen llama_peer >/dev/null
if [ ! -x "$BUILD/llama_peer" ]; then
    echo "bench-cpu: no llama_peer: the llama.cpp oracle is missing (scripts/oracle-setup.sh)" >&2
    exit 1
fi

if [ ! -f "$MODEL" ] || [ "${BENCH_REGEN:-0}" = 1 ]; then
    echo "== generating $MODEL ($PRESET widths, $LAYERS layers, q4_k_m)"
    t0=$(date +%s.%N)
    "$BUILD/cwen" mkmodel --preset "$PRESET" --layers "$LAYERS" --mix q4_k_m \
        --threads "$(nproc)" -o "$MODEL"
    t1=$(date +%s.%N)
    echo "generation: $(python3 -c "print(f'{$t1-$t0:.1f}')") s"
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "== cwen bench -m $MODEL --backend cpu -t $THREADS -p $PP -n $TG -d $DEPTH -r $REPS"
"$BUILD/cwen" bench -m "$MODEL" --backend cpu -t "$THREADS" -p "$PP" -n "$TG" -d "$DEPTH" \
    -r "$REPS" --json >"$out/cwen.jsonl" || echo "cwen bench failed (exit $?)" >&2
echo "== llama_peer -m $MODEL -t $THREADS -p $PP -n $TG -d $DEPTH -r $REPS"
"$BUILD/llama_peer" -m "$MODEL" -t "$THREADS" -p "$PP" -n "$TG" -d "$DEPTH" -r "$REPS" \
    >"$out/peer.jsonl" 2>"$out/peer.err" || { echo "llama_peer failed (exit $?)" >&2; cat "$out/peer.err" >&2; }

python3 - "$out/cwen.jsonl" "$out/peer.jsonl" "$MODEL" "$THREADS" "$REPS" <<'EOF'
import json, sys

def load(p):
    rows = {}
    for line in open(p):
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            rows[j["test"]] = j
    return rows

cw, ll = load(sys.argv[1]), load(sys.argv[2])
model, threads, reps = sys.argv[3], sys.argv[4], sys.argv[5]

def cell(j):
    if not j:
        return "-"
    if "error" in j:
        return "error: " + j["error"][:40]
    return f"{j['tps_median']:.2f} [{j['tps_min']:.2f}-{j['tps_max']:.2f}]"

print(f"\nmodel {model}, CPU, {threads} threads, {reps} timed runs after 1 warm-up (median [min-max] tok/s)\n")
print(f"| {'test':<12} | {'cwen t/s':>28} | {'llama.cpp t/s':>28} | {'cwen/llama':>10} | same ids |")
print(f"| {'-'*12} | {'-'*27}: | {'-'*27}: | {'-'*9}: | -------- |")
for t in list(cw) + [t for t in ll if t not in cw]:
    a, b = cw.get(t), ll.get(t)
    ratio = "-"
    if a and b and "tps_median" in a and "tps_median" in b:
        ratio = f"{a['tps_median'] / b['tps_median']:.2f}x"
    same = "-"
    if a and b and "ids_fnv1a64" in a and "ids_fnv1a64" in b:
        same = "yes" if a["ids_fnv1a64"] == b["ids_fnv1a64"] else "no"
    print(f"| {t:<12} | {cell(a):>28} | {cell(b):>28} | {ratio:>10} | {same:>8} |")
for t, a in cw.items():
    if "bytes_per_token" in a:
        print(f"\ncwen {t}: {a['bytes_per_token']/1e9:.3f} GB read per token "
              f"(weights {a['bytes_weights']/1e9:.3f}, DeltaNet state {a['bytes_state']/1e9:.4f}, "
              f"K/V {a['bytes_kv']/1e9:.4f}) -> {a['decode_gbps']:.2f} GB/s achieved; "
              f"final logits fnv1a64 {a['logits_fnv1a64']}")
EOF
