/* test_mkmodel_oracle.c — llama.cpp loads and runs what `cwen mkmodel` writes.
 *
 * For tiny-moe and tiny-dense, with and without the MTP block, in the q4_k_m
 * and q8_0 mixes: generate with $CWEN_BIN, load with libllama, check the
 * shape it reports, evaluate a 32-token prompt with logits at every position,
 * require every logit finite and the next-token distributions peaked (mean
 * top-1 probability well above uniform: random weights that gave flat
 * distributions would make argmax comparisons meaningless). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"
#include "oracle.h"
#include "../test.h"

#define N_PROMPT 32

/* below this mean top-1 probability the files are too flat to be useful */
#define MIN_TOP1 0.2

static int run_model(const char *path, int n_layer, int n_embd, int n_vocab, bool mtp)
{
    struct llama_model_params mp = llama_model_default_params();
    mp.load_mtp = mtp; /* so that the MTP block's names and shapes are checked too */
    struct llama_model *m = llama_model_load_from_file(path, mp);
    ok(m != NULL, "%s: llama.cpp loads it", path);
    if (!m)
        return -1;
    ok(llama_model_n_layer_nextn(m) == (mtp ? 1 : 0), "%s: MTP layers %d", path, llama_model_n_layer_nextn(m));
    if (mtp) {
        /* an MTP context reserves the MTP graph, which builds it over the block's tensors */
        struct llama_context_params cp = llama_context_default_params();
        cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        cp.n_ctx = 256;
        cp.n_batch = cp.n_ubatch = 64;
        cp.n_threads = cp.n_threads_batch = 2;
        struct llama_context *mc = llama_init_from_model(m, cp);
        ok(mc != NULL, "%s: llama.cpp builds an MTP context", path);
        if (mc)
            llama_free(mc);
    }
    ok(llama_model_n_layer(m) == n_layer, "%s: n_layer %d (llama.cpp %d)", path, n_layer,
       llama_model_n_layer(m));
    ok(llama_model_n_embd(m) == n_embd, "%s: n_embd %d (llama.cpp %d)", path, n_embd, llama_model_n_embd(m));
    const struct llama_vocab *voc = llama_model_get_vocab(m);
    ok(llama_vocab_n_tokens(voc) == n_vocab, "%s: n_vocab %d (llama.cpp %d)", path, n_vocab,
       llama_vocab_n_tokens(voc));

    /* the think/tool tokens are USER_DEFINED: whole tokens even without parse_special */
    static const char *const sp[] = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                     "</tool_response>"};
    for (int k = 0; k < 6; k++) {
        llama_token tk[8];
        int n = llama_tokenize(voc, sp[k], (int32_t)strlen(sp[k]), tk, 8, false, false);
        ok(n == 1 && tk[0] > 151642, "%s: llama.cpp tokenizes %s as one added token (n %d, id %d)", path, sp[k], n,
           n > 0 ? tk[0] : -1);
    }

    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 64;
    cp.n_ubatch = 64;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    ok(ctx != NULL, "%s: context", path);
    if (!ctx) {
        llama_model_free(m);
        return -1;
    }
    struct llama_batch b = llama_batch_init(N_PROMPT, 0, 1);
    uint32_t s = 12345;
    for (int i = 0; i < N_PROMPT; i++) {
        s = s * 1664525u + 1013904223u;
        b.token[i] = (llama_token)((s >> 8) % 151643u); /* ordinary tokens of the fixture */
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = N_PROMPT;
    int rc = llama_decode(ctx, b);
    ok(rc == 0, "%s: llama_decode -> %d", path, rc);
    long n_bad = 0;
    double top1_sum = 0;
    float max_abs = 0;
    for (int i = 0; rc == 0 && i < N_PROMPT; i++) {
        const float *lg = llama_get_logits_ith(ctx, i);
        if (!lg) {
            n_bad++;
            continue;
        }
        float mx = -INFINITY;
        for (int t = 0; t < n_vocab; t++) {
            if (!isfinite(lg[t]))
                n_bad++;
            else if (lg[t] > mx)
                mx = lg[t];
            if (fabsf(lg[t]) > max_abs)
                max_abs = fabsf(lg[t]);
        }
        double z = 0;
        for (int t = 0; t < n_vocab; t++)
            z += exp((double)lg[t] - mx);
        top1_sum += 1.0 / z;
    }
    double top1 = top1_sum / N_PROMPT;
    ok(rc == 0 && n_bad == 0, "%s: every logit finite (%ld bad)", path, n_bad);
    note("%s: mean top-1 probability %.3f over %d positions, max |logit| %.1f", path, top1, N_PROMPT,
         (double)max_abs);
    ok(top1 > MIN_TOP1, "%s: peaked distributions: mean top-1 %.3f > %.2f (uniform: %.1e)", path, top1, MIN_TOP1,
       1.0 / n_vocab);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

int main(void)
{
    const char *bin = test_env("CWEN_BIN", "cwen");
    const char *tmp = test_env("CWEN_TMP", "/tmp");
    /* diagnostic: extra generator options, e.g. "--std 0.2" to measure peakedness */
    const char *extra = test_env("CWEN_MKMODEL_EXTRA", "");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/cpu/package/bins/linux-x64", oracle_dir());
    oracle_init();
    ggml_backend_load_all_from_path(dir);

    static const char *const presets[] = {"tiny-moe", "tiny-dense"};
    static const char *const mixes[] = {"q4_k_m", "q8_0"};
    for (int p = 0; p < 2; p++)
        for (int mtp = 0; mtp < 2; mtp++)
            for (int x = 0; x < 2; x++) {
                char path[1200], cmd[4096];
                snprintf(path, sizeof path, "%s/oracle-%s%s-%s.gguf", tmp, presets[p], mtp ? "" : "-nomtp",
                         mixes[x]);
                snprintf(cmd, sizeof cmd, "'%s' mkmodel -o '%s' --preset %s --mix %s --seed 7 %s %s >/dev/null",
                         bin, path, presets[p], mixes[x], mtp ? "" : "--no-mtp", extra);
                int rc = system(cmd);
                ok(rc == 0, "%s", cmd);
                if (rc == 0)
                    run_model(path, 4, 256, 151936, mtp);
                remove(path);
            }
    return done();
}
