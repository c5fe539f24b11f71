/* llama_dump.c — llama.cpp's intermediate tensors of one prompt, written as
 * a GGUF of F32 tensors for `cwen debug-dump --ref` (tests-side tool: it
 * links llama.cpp, which the product never does).
 *
 *   llama_dump -m MODEL.gguf (-p PROMPT | -t ID,ID,...) -o DUMP.gguf [--scale NAME X]
 *
 * Runs the prompt (tokenized by llama.cpp, special tokens parsed, nothing
 * added; or the token ids given, for tokens whose text would not come back
 * as the same ids) in one batch with logits for every row, so no layer is
 * reduced to the last row, and captures every F32/I32 tensor the
 * evaluation callback (cb_eval) sees, under llama.cpp's names
 * (attn_norm-0, ...). A name seen twice (Kcur: raw, then roped) keeps its
 * first tensor. The token ids go in the key dump.tokens. --scale multiplies one tensor by X before writing: a
 * planted divergence for the tests of debug-dump. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf/gguf.h"
#include "llama.h"
#include "oracle.h"

struct cap {
    char name[GGML_MAX_NAME];
    int64_t ne[4];
    int n_dims;
    float *data;
};

struct caps {
    struct cap *v;
    int n, cap;
    int oom;
};

static int64_t nel(const int64_t *ne) { return ne[0] * ne[1] * ne[2] * ne[3]; }

static bool on_eval(struct ggml_tensor *t, bool ask, void *ud)
{
    struct caps *cs = ud;
    if (ask)
        return t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_I32;
    if (!t->buffer || !ggml_backend_buffer_is_host(t->buffer) || !t->name[0] ||
        !strncmp(t->name, "node_", 5) || strchr(t->name, ' ') || nel(t->ne) == 0)
        return true; /* unnamed nodes and views (" (reshaped)") say nothing by name */
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->v[i].name, t->name))
            return true;
    if (cs->n == cs->cap) {
        int nc = cs->cap ? 2 * cs->cap : 256;
        struct cap *v = realloc(cs->v, (size_t)nc * sizeof *v);
        if (!v) {
            cs->oom = 1;
            return false;
        }
        cs->v = v, cs->cap = nc;
    }
    struct cap *c = &cs->v[cs->n];
    snprintf(c->name, sizeof c->name, "%s", t->name);
    memcpy(c->ne, t->ne, sizeof c->ne);
    c->n_dims = ggml_n_dims(t);
    if (!(c->data = malloc((size_t)nel(t->ne) * sizeof *c->data))) {
        cs->oom = 1;
        return false;
    }
    cs->n++;
    int64_t k = 0; /* logical order, whatever the strides */
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    const char *p = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                    i2 * t->nb[2] + i3 * t->nb[3];
                    c->data[k++] = t->type == GGML_TYPE_F32 ? *(const float *)p
                                                            : (float)*(const int32_t *)p;
                }
    return true;
}

/* "ID,ID,..." into a new array of ids below n_vocab; their count, or -1 */
static int32_t ids_parse(const char *s, int32_t n_vocab, int32_t **out)
{
    int32_t n = 1, k = 0;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    int32_t *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return -1;
    for (const char *p = s;; p++) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x >= n_vocab || (*end != ',' && *end != 0)) {
            free(v);
            return -1;
        }
        v[k++] = (int32_t)x;
        if (!*end)
            break;
        p = end;
    }
    *out = v;
    return k;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: llama_dump -m MODEL.gguf (-p PROMPT | -t ID,ID,...) -o DUMP.gguf [--scale NAME X]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = NULL, *ids = NULL, *out = NULL, *scale_name = NULL;
    double scale = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            model_path = argv[++i];
        else if (!strcmp(argv[i], "-p") && i + 1 < argc)
            prompt = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            ids = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--scale") && i + 2 < argc)
            scale_name = argv[i + 1], scale = atof(argv[i + 2]), i += 2;
        else
            return usage();
    }
    if (!model_path || !prompt == !ids || !out)
        return usage();
    char libdir[1024];
    snprintf(libdir, sizeof libdir, "%s/cpu/package/bins/linux-x64", oracle_dir());
    oracle_init();
    if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU))
        ggml_backend_load_all_from_path(libdir);

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "llama_dump: llama.cpp cannot load %s\n", model_path);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int32_t n = -1, *toks = NULL;
    if (prompt) {
        int32_t len = (int32_t)strlen(prompt);
        toks = malloc(((size_t)len + 8) * sizeof *toks);
        n = toks ? llama_tokenize(vocab, prompt, len, toks, len + 8, false, true) : -1;
    } else if ((n = ids_parse(ids, llama_vocab_n_tokens(vocab), &toks)) < 0) {
        fprintf(stderr, "llama_dump: bad token ids '%s' (decimal, comma-separated, below %d)\n",
                ids, llama_vocab_n_tokens(vocab));
        return 1;
    }
    if (n <= 0) {
        fprintf(stderr, "llama_dump: cannot tokenize the prompt (%d)\n", n);
        return 1;
    }
    struct caps cs = {0};
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n < 64 ? 64 : (uint32_t)n;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.cb_eval = on_eval, cp.cb_eval_user_data = &cs;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = toks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (!ctx || llama_decode(ctx, b) || cs.oom) {
        fprintf(stderr, "llama_dump: llama_decode failed%s\n", cs.oom ? " (out of memory)" : "");
        return 1;
    }

    struct cw_gguf_writer *w = cw_gguf_writer_new(32);
    struct cw_err err = {0};
    const void **data = calloc((size_t)cs.n + 1, sizeof *data);
    int rc = !w || !data || cw_gguf_writer_set_str(w, "general.architecture", "cwen-dump") ||
             cw_gguf_writer_set_str(w, "dump.model", model_path) ||
             cw_gguf_writer_set_arr(w, "dump.tokens", CW_GGUF_I32, toks, (uint64_t)n);
    int found = scale_name == NULL;
    for (int i = 0; !rc && i < cs.n; i++) {
        struct cap *c = &cs.v[i];
        if (scale_name && !strcmp(scale_name, c->name)) {
            for (int64_t k = 0; k < nel(c->ne); k++)
                c->data[k] = (float)(c->data[k] * scale);
            found = 1;
        }
        data[i] = c->data;
        rc = cw_gguf_writer_add_tensor(w, c->name, (uint32_t)(c->n_dims ? c->n_dims : 1), c->ne,
                                       CW_TYPE_F32, &err) < 0;
    }
    if (!found) {
        fprintf(stderr, "llama_dump: no tensor named %s to scale\n", scale_name);
        rc = 1;
    }
    if (!rc && cw_gguf_writer_write_file(w, out, data, &err)) {
        fprintf(stderr, "llama_dump: %s\n", err.msg);
        rc = 1;
    }
    if (!rc)
        printf("llama_dump: %d tokens, %d tensors -> %s\n", n, cs.n, out);
    cw_gguf_writer_free(w);
    free(data);
    for (int i = 0; i < cs.n; i++)
        free(cs.v[i].data);
    free(cs.v), free(toks);
    llama_batch_free(b);
    if (ctx)
        llama_free(ctx);
    llama_model_free(model);
    return rc ? 1 : 0;
}
