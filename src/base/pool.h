/* pool.h — a small persistent pthread pool for data-parallel kernels.
 *
 * Owns the worker threads and the start/finish handshake of one parallel
 * region: cw_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once for every
 * ith in [0, nth) — the calling thread runs ith = 0 — and returns when all have
 * returned. Workers spin briefly after each region (regions come back to back
 * in a forward pass), then sleep on a futex. How work is split is left to fn.
 * One pool is driven by one thread at a time; there are no globals. */
#ifndef CW_POOL_H
#define CW_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/err.h"

typedef void (*cw_pool_fn)(void *ctx, int ith, int nth);

struct cw_pool {
    int n_threads;       /* including the caller */
    pthread_t *threads;  /* n_threads - 1 workers */
    cw_pool_fn fn;       /* the current region, published by gen */
    void *ctx;
    _Atomic uint32_t gen;      /* bumped to start a region (futex word) */
    _Atomic uint32_t n_done;   /* workers finished in this region (futex word) */
    _Atomic int n_sleep;       /* workers asleep on gen */
    _Atomic int main_sleeps;   /* the caller is asleep on n_done */
    _Atomic int stop;
};

/* Starts n_threads - 1 workers (n_threads >= 1). Returns 0, or -1 with err
 * set; on failure nothing is left running. */
int cw_pool_init(struct cw_pool *pool, int n_threads, struct cw_err *err);

/* Runs fn(ctx, ith, n_threads) on every thread and waits for all. A NULL pool
 * runs fn(ctx, 0, 1) inline. */
void cw_pool_run(struct cw_pool *pool, cw_pool_fn fn, void *ctx);

/* Threads in the pool (1 for NULL). */
int cw_pool_size(const struct cw_pool *pool);

/* Stops and joins the workers; safe on a zeroed or already freed pool. */
void cw_pool_free(struct cw_pool *pool);

#endif
