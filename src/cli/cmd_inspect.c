/* cmd_inspect.c — `cwen inspect FILE`: what a GGUF holds and what serving it
 * costs. Prints the metadata, the tensor table, what cwen recognises the file
 * as, and a budget: weight bytes, bytes read per decoded token, K/V bytes per
 * token, recurrent state per sequence and the memory needed at a context
 * length and number of sequences. Reading and binding live in gguf/ and
 * model/; this file only formats. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"

struct inspect_opts {
    const char *path;
    uint64_t ctx, seqs;
    int show_meta, show_tensors;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: cwen inspect FILE.gguf [--ctx N] [--seqs N] [--no-metadata] [--no-tensors]\n"
               "  Prints a GGUF's metadata and tensor table, what cwen recognises it as, and a\n"
               "  memory budget at --ctx tokens per sequence (default: the model's training\n"
               "  context) for --seqs sequences (default 1).\n");
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static void print_scalar(const struct cw_gguf_value *v)
{
    switch (v->type) {
    case CW_GGUF_U8: case CW_GGUF_U16: case CW_GGUF_U32: case CW_GGUF_U64:
        printf("%" PRIu64, v->u64);
        break;
    case CW_GGUF_I8: case CW_GGUF_I16: case CW_GGUF_I32: case CW_GGUF_I64:
        printf("%" PRId64, v->i64);
        break;
    case CW_GGUF_F32: case CW_GGUF_F64:
        printf("%g", v->f64);
        break;
    case CW_GGUF_BOOL:
        printf("%s", v->u64 ? "true" : "false");
        break;
    default:
        break;
    }
}

/* Prints a string, escaped and cut at max bytes. */
static void print_str(struct cw_gguf_str s, size_t max)
{
    putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (s.len > max)
        printf("... (%" PRIu64 " bytes)", s.len);
}

static void print_value(const struct cw_gguf_value *v)
{
    if (v->type == CW_GGUF_STRING) {
        print_str(v->str, 60);
        return;
    }
    if (v->type != CW_GGUF_ARRAY) {
        print_scalar(v);
        return;
    }
    printf("[%s × %" PRIu64 "] ", cw_gguf_type_name(v->arr.type), v->arr.n);
    uint64_t show = v->arr.n < 6 ? v->arr.n : 6;
    for (uint64_t i = 0; i < show; i++) {
        if (i)
            fputs(", ", stdout);
        if (v->arr.type == CW_GGUF_STRING)
            print_str(v->arr.strs[i], 24);
        else if (v->arr.type == CW_GGUF_ARRAY)
            printf("[%" PRIu64 "]", v->arr.items[i].arr.n);
        else if (v->arr.type == CW_GGUF_F32 || v->arr.type == CW_GGUF_F64)
            printf("%g", cw_gguf_arr_f64(v, i));
        else
            printf("%" PRId64, cw_gguf_arr_i64(v, i));
    }
    if (show < v->arr.n)
        fputs(", ...", stdout);
}

static void print_bytes_line(const char *what, double bytes)
{
    printf("  %-40s %18.0f B  %10.2f MiB  %8.3f GB\n", what, bytes, bytes / 1048576.0, bytes / 1e9);
}

static int inspect(const struct inspect_opts *o)
{
    struct cw_gguf g;
    struct cw_err err = {0};
    if (cw_gguf_open(&g, o->path, &err)) {
        fprintf(stderr, "cwen inspect: %s\n", err.msg);
        return 1;
    }
    printf("file: %s\n  %" PRIu64 " bytes, GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64
           " tensors, alignment %" PRIu64 ", data at offset %" PRIu64 "\n",
           o->path, g.size, g.version, g.n_kv, g.n_tensors, g.alignment, g.data_offset);

    if (o->show_meta) {
        printf("\nmetadata:\n");
        for (uint64_t i = 0; i < g.n_kv; i++) {
            const struct cw_gguf_kv *kv = &g.kv[i];
            printf("  %-48.*s %-7s ", (int)kv->key.len, kv->key.ptr, cw_gguf_type_name(kv->value.type));
            print_value(&kv->value);
            putchar('\n');
        }
    }

    /* per-type totals, always; the full table on request */
    uint64_t type_n[CW_TYPE_COUNT] = {0}, type_bytes[CW_TYPE_COUNT] = {0}, total = 0;
    if (o->show_tensors)
        printf("\ntensors:\n  %-40s %-8s %-26s %14s %14s\n", "name", "type", "shape", "bytes", "offset");
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const struct cw_gguf_tensor *t = &g.tensors[i];
        type_n[t->type]++;
        type_bytes[t->type] += t->nbytes;
        total += t->nbytes;
        if (!o->show_tensors)
            continue;
        char shape[64];
        int len = snprintf(shape, sizeof shape, "{");
        for (uint32_t d = 0; d < t->n_dims; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        snprintf(shape + len, sizeof shape - (size_t)len, "}");
        printf("  %-40s %-8s %-26s %14" PRIu64 " %14" PRIu64 "\n", t->name, cw_qtype_name(t->type), shape,
               t->nbytes, t->offset);
    }
    printf("\ntensor types:\n");
    for (int ty = 0; ty < CW_TYPE_COUNT; ty++)
        if (type_n[ty])
            printf("  %-8s %5" PRIu64 " tensors %16" PRIu64 " B (%.2f%%)\n", cw_qtype_name((uint32_t)ty),
                   type_n[ty], type_bytes[ty], 100.0 * (double)type_bytes[ty] / (double)(total ? total : 1));

    struct cw_qwen35_hparams hp;
    if (cw_qwen35_hparams_load(&g, &hp, &err)) {
        printf("\nmodel: not a Qwen3.6 model cwen can run: %s\n", err.msg);
        cw_gguf_close(&g);
        return 0; /* inspect still did its job: the file itself is valid */
    }
    char gname[128] = "";
    struct cw_gguf_str gs;
    if (cw_gguf_find_kv(&g, "general.name") && !cw_gguf_get_str(&g, "general.name", &gs, NULL))
        cw_gguf_str_copy(gs, gname, sizeof gname);
    const char *ident = cw_qwen35_identify(&hp, gname[0] ? gname : NULL);
    int n_attn = 0;
    for (uint32_t il = 0; il < hp.n_layer; il++)
        n_attn += hp.layer_kind[il] == CW_LAYER_ATTENTION;
    printf("\nmodel: %s, %s\n", cw_qwen35_arch_name(hp.arch), ident ? ident : "custom shape (not an official checkpoint)");
    printf("  %u layers (%d gated attention, %u Gated DeltaNet)%s, width %u, vocab %u, context %u\n",
           hp.n_layer, n_attn, hp.n_layer - (uint32_t)n_attn, hp.n_nextn ? " + MTP block" : "", hp.n_embd,
           hp.n_vocab, hp.n_ctx_train);
    printf("  attention: %u q / %u kv heads × %u, rope %u dims, base %g\n", hp.n_head, hp.n_head_kv,
           hp.head_dim, hp.n_rot, hp.rope_base);
    printf("  DeltaNet: %u k / %u v heads × %u, conv %u\n", hp.ssm_n_k_heads, hp.ssm_n_v_heads,
           hp.ssm_d_state, hp.ssm_conv);
    if (hp.arch == CW_ARCH_QWEN35MOE)
        printf("  MoE: %u experts, %u used, width %u, shared expert %u\n", hp.n_expert, hp.n_expert_used,
               hp.n_ff_exp, hp.n_ff_shexp);
    else
        printf("  FFN: width %u\n", hp.n_ff);

    /* budget */
    /* classify the file's tensors by the expected list of this shape */
    uint64_t read_per_tok = 0, mtp_bytes = 0;
    size_t n_exp = cw_qwen35_tensors(&hp, NULL, 0);
    struct cw_qwen35_tensor *exp = calloc(n_exp ? n_exp : 1, sizeof *exp);
    if (!exp) {
        cw_gguf_close(&g);
        fprintf(stderr, "cwen inspect: out of memory\n");
        return 1;
    }
    cw_qwen35_tensors(&hp, exp, n_exp);
    for (size_t i = 0; i < n_exp; i++) {
        const struct cw_gguf_tensor *t = cw_gguf_find_tensor(&g, exp[i].name);
        if (!t)
            continue;
        read_per_tok += cw_qwen35_decode_bytes(&hp, &exp[i], t->nbytes);
        if (exp[i].is_mtp)
            mtp_bytes += t->nbytes;
    }
    free(exp);
    uint64_t ctx = o->ctx ? o->ctx : hp.n_ctx_train, seqs = o->seqs ? o->seqs : 1;
    uint64_t kv_tok = cw_qwen35_kv_bytes_per_token(&hp), state = cw_qwen35_state_bytes_per_seq(&hp);
    double kv_total = (double)kv_tok * (double)ctx * (double)seqs, state_total = (double)state * (double)seqs;
    printf("\nbudget (context %" PRIu64 " tokens × %" PRIu64 " sequence%s; K/V in f16, state in f32):\n", ctx,
           seqs, seqs == 1 ? "" : "s");
    print_bytes_line("weights (all tensors)", (double)total);
    print_bytes_line("  of which the MTP block", (double)mtp_bytes);
    print_bytes_line("weights read per decoded token", (double)read_per_tok);
    print_bytes_line("K/V cache per token", (double)kv_tok);
    print_bytes_line("recurrent state per sequence", (double)state);
    print_bytes_line("K/V cache at this context", kv_total);
    print_bytes_line("recurrent state, all sequences", state_total);
    print_bytes_line("memory needed", (double)total + kv_total + state_total);
    print_bytes_line("bytes read per token at full context", (double)read_per_tok + 2.0 * (double)state + (double)kv_tok * (double)ctx);
    cw_gguf_close(&g);
    return 0;
}

int cw_cmd_inspect(int argc, char **argv)
{
    struct inspect_opts o = {.show_meta = 1, .show_tensors = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "--ctx") || !strcmp(a, "--seqs")) && i + 1 < argc) {
            if (parse_u64(argv[++i], a[2] == 'c' ? &o.ctx : &o.seqs)) {
                fprintf(stderr, "cwen inspect: %s wants a non-negative integer, got '%s'\n", a, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--no-metadata")) {
            o.show_meta = 0;
        } else if (!strcmp(a, "--no-tensors")) {
            o.show_tensors = 0;
        } else if (a[0] == '-') {
            fprintf(stderr, "cwen inspect: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!o.path) {
            o.path = a;
        } else {
            fprintf(stderr, "cwen inspect: one file at a time ('%s' and '%s')\n", o.path, a);
            return 2;
        }
    }
    if (!o.path) {
        usage(stderr);
        return 2;
    }
    return inspect(&o);
}
