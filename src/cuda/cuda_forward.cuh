/* cuda_forward.cuh — the CUDA backend's state, shared by cuda_backend.cu
 * (open, weights upload, sequence allocation, the ops table) and
 * cuda_forward.cu (the launch sequence and the decode graph).
 *
 * Ownership: the model owns the device weight arena and a copy of the bound
 * weights whose data pointers point into it (dw); a sequence owns one device
 * arena holding its K/V caches, DeltaNet state and work buffers (sized once
 * at seq_new, so no pointer ever moves and a captured graph stays valid),
 * its pinned staging, and its decode graph. */
#ifndef CW_CUDA_FORWARD_CUH
#define CW_CUDA_FORWARD_CUH

#include "backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/kernels.h"

struct cw_cuda_model {
    struct cw_backend base; /* first: the contract's view */
    struct cw_cuda *c;
    struct cw_qwen35_weights dw; /* device copy: .data in the arena; layers owned */
    void *arena;                 /* every weight tensor, 256-byte aligned */
    size_t arena_bytes;
    double upload_s;
    int64_t chunk;   /* most tokens one launch sequence runs (bounds the buffers) */
    int64_t lm_rows; /* most rows one LM-head launch writes */
    bool use_graph;  /* CWEN_CUDA_GRAPH=0 turns the decode graph off (diagnostic) */
    bool verbose;    /* CWEN_CUDA_VERBOSE=1: sizes, upload time, kernels per token */
    bool fold_xq;    /* CWEN_CUDA_FOLD_XQ=0: the DeltaNet core leaves ssm_out's x to it */
    bool core1;      /* CWEN_CUDA_CORE1=0: a one-token DeltaNet core in two launches */
};

/* One layer's slice of a sequence's state (device). */
struct cw_cuda_layer_state {
    cw_f16 *k, *v;  /* attention: [n_ctx_max][Hkv*hd] */
    float *conv;    /* DeltaNet: [C][d_conv-1] */
    float *delta;   /* DeltaNet: [Hv][dv][dk] */
    unsigned *count; /* DeltaNet: [Hk] the one-token core's counters (kernels.h) */
};

struct cw_bseq {
    int64_t n_past;     /* tokens in the main cache */
    int64_t mtp_n_past; /* tokens in the MTP block's cache */
    struct cw_cuda_layer_state *layers; /* [n_layer] (host array) */
    struct cw_cuda_layer_state mtp;
    void *arena; /* one device allocation for everything below and the state above */
    size_t arena_bytes;
    size_t state_bytes; /* the prefix of the arena zeroed by reset: conv, delta, count */
    /* work buffers, [chunk][width] rows */
    float *h, *x, *hn, *cat, *hprev;
    float *P, *k, *v, *ao;
    float *m, *z, *beta, *alpha, *y;
    float *rlog, *wts, *act, *sg, *su, *sgate, *fg, *fu;
    float *logits;   /* [lm_rows][V] */
    int32_t *ids;    /* [chunk][K] */
    int64_t *pos;    /* the position of row 0 of the launch, then */
    int32_t *tok;    /* [chunk] its token ids */
    unsigned *norm_count; /* the fused norms' block count (cw_k_norm_next) */
    int32_t *amax;   /* [lm_rows] */
    void *amax_scr;  /* cw_k_argmax's */
    void *scratch;
    size_t scratch_bytes;
    /* pinned host staging: h_pos and h_tok mirror pos and tok (one upload);
     * h_amax takes a decode step's argmax */
    int64_t *h_pos;
    int32_t *h_tok;
    int32_t *h_amax;
    /* the decode step (n = 1), captured at the first decode */
    cudaGraph_t graph;
    cudaGraphExec_t graph_exec;
    size_t graph_nodes;
};

/* Runs n tokens (backend.h forward): chunks of at most M->chunk tokens,
 * the decode graph when n == 1. */
int cw_cuda_forward(struct cw_cuda_model *M, struct cw_bseq *s, const int32_t *tokens,
                    int64_t n, const struct cw_fwd_out *out, struct cw_err *err);

/* The MTP block over n tokens (backend.h forward_mtp), no graph. */
int cw_cuda_forward_mtp(struct cw_cuda_model *M, struct cw_bseq *s, const int32_t *tokens,
                        const float *hidden_prev, int64_t n, const struct cw_fwd_out *out,
                        struct cw_err *err);

/* Drops the captured decode graph (seq_free). */
void cw_cuda_graph_drop(struct cw_bseq *s);

/* The device view of a bound matrix. */
static inline struct cw_k_mat cw_cuda_mat(const struct cw_wt *t)
{
    struct cw_k_mat m;
    m.type = t->type;
    m.d_w = t->data;
    m.row_bytes = t->nb1;
    m.expert_bytes = t->ne[2] > 1 ? t->nb2 : 0;
    m.n_in = t->ne[0];
    m.n_out = t->ne[1];
    return m;
}

/* The attention kernel's dimensions from the model's (used by the forward
 * and by the scratch sizing of a sequence). */
static inline struct cw_k_attn_dims cw_cuda_attn_dims(const struct cw_qwen35_hparams *hp)
{
    struct cw_k_attn_dims d = {(int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim, hp->eps,
                               (int)hp->n_rot,  hp->rope_base,      {0, 0, 0, 0}};
    for (int i = 0; i < 4; i++)
        d.sections[i] = hp->rope_sections[i];
    return d;
}

/* The DeltaNet kernel's dimensions from the model's (forward and scratch sizing). */
static inline struct cw_k_deltanet_dims cw_cuda_dn_dims(const struct cw_qwen35_hparams *hp)
{
    struct cw_k_deltanet_dims d = {(int)hp->ssm_n_k_heads, (int)hp->ssm_n_v_heads,
                                   (int)hp->ssm_d_state,   (int)hp->ssm_d_state,
                                   (int)hp->ssm_conv,      hp->eps};
    return d;
}

#endif
