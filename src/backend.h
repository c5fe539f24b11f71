/* backend.h — the backend contract: what engine/ (and the bench / debug
 * tools) call to run the model, implemented by cpu/ and cuda/.
 *
 * A backend is opened over bound weights (model/qwen35_weights.h, borrowed:
 * the GGUF mapping must outlive it) and owns whatever copies it makes (device
 * weights, repacked layouts). A sequence is the per-request state: the
 * hybrid cache (K/V rows of the attention layers, conv + delta state of the
 * DeltaNet layers, the MTP block's K/V) and the work buffers of a call.
 * Every entry returns 0 or -1 with err set; nothing aborts.
 *
 * Threads: one thread at a time per backend (the engine's worker). */
#ifndef CW_BACKEND_H
#define CW_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "model/qwen35_weights.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cw_pool; /* base/pool.h */
struct cw_backend;
struct cw_bseq; /* one sequence of a backend */

/* What a forward call hands back; any pointer may be NULL (not wanted).
 *   logits  [n][V] when all_logits, else [V] for the last token (host memory)
 *   hidden  [n][E] final-normed hidden states (the MTP input)
 *   argmax  [n] when all_logits, else [1]: the greedy token of each row, the
 *           lowest index winning a tie (on the GPU: computed there, so that
 *           greedy decode reads back one id instead of V logits) */
struct cw_fwd_out {
    float *logits;
    bool all_logits;
    float *hidden;
    int32_t *argmax;
};

struct cw_backend_ops {
    const char *name; /* "cpu", "cuda" */
    void (*close)(struct cw_backend *b);
    int (*seq_new)(struct cw_backend *b, struct cw_bseq **out, struct cw_err *err);
    void (*seq_free)(struct cw_backend *b, struct cw_bseq *s);
    /* forget everything: position 0, zero state; keeps the allocations */
    void (*seq_reset)(struct cw_backend *b, struct cw_bseq *s);
    /* tokens already in the main cache */
    int64_t (*seq_pos)(struct cw_backend *b, const struct cw_bseq *s);
    /* Runs n tokens from seq_pos and appends them to the cache. Errors: a
     * token outside the vocabulary or the context ceiling (the sequence is
     * unchanged), out of memory, a device failure. */
    int (*forward)(struct cw_backend *b, struct cw_bseq *s, const int32_t *tokens, int64_t n,
                   const struct cw_fwd_out *out, struct cw_err *err);
    /* The MTP block over n tokens (tokens[i] with hidden_prev[i] [E]); out's
     * hidden is the block's shared_head_norm output. -1 without an MTP block. */
    int (*forward_mtp)(struct cw_backend *b, struct cw_bseq *s, const int32_t *tokens,
                       const float *hidden_prev, int64_t n, const struct cw_fwd_out *out,
                       struct cw_err *err);
};

struct cw_backend {
    const struct cw_backend_ops *ops;
    const struct cw_qwen35_weights *w; /* borrowed */
    int64_t n_ctx_max;                 /* positions a sequence may reach */
};

struct cw_backend_opts {
    int64_t n_ctx_max;     /* 0: the training context */
    struct cw_pool *pool;  /* cpu: threads (borrowed; NULL: the calling thread) */
    int device;            /* cuda: device ordinal */
};

/* Opens the CPU backend: checks every tensor type has a CPU kernel. */
int cw_backend_open_cpu(struct cw_backend **out, const struct cw_qwen35_weights *w,
                        const struct cw_backend_opts *o, struct cw_err *err);

/* Opens the CUDA backend: uploads the weights to o->device. CW_ERR_UNSUPPORTED
 * when the build has no CUDA or the machine no GPU (the message says which). */
int cw_backend_open_cuda(struct cw_backend **out, const struct cw_qwen35_weights *w,
                         const struct cw_backend_opts *o, struct cw_err *err);

/* Opens by name: "cpu", "cuda", or "auto" (cuda when a GPU is present). */
int cw_backend_open(struct cw_backend **out, const char *name, const struct cw_qwen35_weights *w,
                    const struct cw_backend_opts *o, struct cw_err *err);

static inline void cw_backend_close(struct cw_backend *b)
{
    if (b)
        b->ops->close(b);
}

#ifdef __cplusplus
}
#endif

#endif
