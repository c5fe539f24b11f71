/* bench_common.h — what `cwen bench` and its llama.cpp peer must share so
 * that their tables compare: the clock, the fingerprint of ids and logits,
 * and the prompt token stream. Header-only: the peer links no cwen code. */
#ifndef CW_BENCH_COMMON_H
#define CW_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* FNV-1a, 64 bits: a short, stable fingerprint of bytes */
#define FNV_INIT 0xcbf29ce484222325ull
static inline uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The prompt stream: n pseudo-random ordinary token ids (below the special
 * ones at 151643) from a fixed LCG seed, the same in every run and engine. */
#define BENCH_N_ORDINARY_IDS 151643u
static inline void bench_tokens(int32_t *toks, int64_t n, uint32_t n_vocab)
{
    const uint32_t n_ids = n_vocab < BENCH_N_ORDINARY_IDS ? n_vocab : BENCH_N_ORDINARY_IDS;
    uint32_t seed = 12345u;
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        toks[i] = (int32_t)((seed >> 8) % n_ids);
    }
}

#endif
