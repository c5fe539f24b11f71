/* pool.c — the persistent thread pool of pool.h.
 *
 * Handshake: the caller stores fn/ctx, resets n_done and bumps gen (seq_cst);
 * a worker that sees gen change runs fn and increments n_done; the caller
 * waits for n_done == n_threads - 1. Both sides spin for a short while before
 * sleeping on a Linux futex, and a sleeper announces itself (n_sleep,
 * main_sleeps) before it sleeps so that the other side issues a wake syscall
 * only when someone really sleeps: seq_cst on both sides makes the
 * announce-then-recheck race free (the futex itself rechecks the word). */
#include "base/pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Polling before sleeping: a few tens of µs (PAUSE costs 10-140 cycles
 * depending on the core), enough to bridge back-to-back kernels, short enough
 * not to starve an oversubscribed peer. */
#define SPIN_ITERS 2000

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

struct worker_arg {
    struct cw_pool *pool;
    int ith;
};

static void *worker_main(void *p)
{
    struct cw_pool *pool = ((struct worker_arg *)p)->pool;
    int ith = ((struct worker_arg *)p)->ith;
    free(p);
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = atomic_load(&pool->gen)) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&pool->n_sleep, 1);
            futex_wait(&pool->gen, seen); /* returns at once if gen moved */
            atomic_fetch_sub(&pool->n_sleep, 1);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&pool->stop))
            return NULL;
        pool->fn(pool->ctx, ith, pool->n_threads);
        uint32_t d = atomic_fetch_add(&pool->n_done, 1) + 1;
        if (d == (uint32_t)(pool->n_threads - 1) && atomic_load(&pool->main_sleeps))
            futex_wake(&pool->n_done);
    }
}

int cw_pool_size(const struct cw_pool *pool)
{
    return pool ? pool->n_threads : 1;
}

static void start_region(struct cw_pool *pool)
{
    atomic_store(&pool->n_done, 0);
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->n_sleep) > 0)
        futex_wake(&pool->gen);
}

static void wait_region(struct cw_pool *pool)
{
    uint32_t want = (uint32_t)(pool->n_threads - 1);
    int spins = 0;
    uint32_t d;
    while ((d = atomic_load(&pool->n_done)) != want) {
        if (++spins < SPIN_ITERS) {
            cpu_relax();
            continue;
        }
        atomic_store(&pool->main_sleeps, 1);
        d = atomic_load(&pool->n_done);
        if (d != want)
            futex_wait(&pool->n_done, d);
        atomic_store(&pool->main_sleeps, 0);
        spins = 0;
    }
}

int cw_pool_init(struct cw_pool *pool, int n_threads, struct cw_err *err)
{
    memset(pool, 0, sizeof(*pool));
    if (n_threads < 1 || n_threads > 1024)
        return cw_errf(err, CW_ERR_INVALID, "pool: bad thread count %d", n_threads);
    pool->n_threads = n_threads;
    if (n_threads == 1)
        return 0;
    pool->threads = calloc((size_t)n_threads - 1, sizeof(pthread_t));
    if (!pool->threads)
        return cw_errf(err, CW_ERR_NOMEM, "pool: out of memory");
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *a = malloc(sizeof(*a));
        int rc = ENOMEM;
        if (a) {
            a->pool = pool;
            a->ith = i;
            rc = pthread_create(&pool->threads[i - 1], NULL, worker_main, a);
        }
        if (rc != 0) {
            free(a);
            pool->n_threads = i; /* stop the ones already running */
            cw_pool_free(pool);
            return cw_errf(err, CW_ERR_NOMEM, "pool: pthread_create: %s", strerror(rc));
        }
    }
    return 0;
}

void cw_pool_run(struct cw_pool *pool, cw_pool_fn fn, void *ctx)
{
    if (!pool || pool->n_threads <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    start_region(pool);
    fn(ctx, 0, pool->n_threads);
    wait_region(pool);
}

void cw_pool_free(struct cw_pool *pool)
{
    if (!pool->threads) {
        pool->n_threads = 0;
        return;
    }
    atomic_store(&pool->stop, 1);
    start_region(pool);
    for (int i = 1; i < pool->n_threads; i++)
        pthread_join(pool->threads[i - 1], NULL);
    free(pool->threads);
    pool->threads = NULL;
    pool->n_threads = 0;
}
