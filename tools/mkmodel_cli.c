/* mkmodel_cli.c — `cwen mkmodel`: command-line front end of the synthetic
 * model generator (tools/mkmodel.c). Parses options into cw_mkmodel_opts,
 * prints the plan or what was written. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "mkmodel.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cwen mkmodel -o FILE [options]\n"
            "Writes a synthetic Qwen3.6 GGUF (qwen35moe / qwen35) with llama.cpp's tensor names,\n"
            "shapes, metadata and quant types, random weights and a real tokenizer.\n"
            "  -o, --output FILE      file to write\n"
            "  --preset NAME          35b-a3b | 27b | 3.8-27b | tiny-moe (default) | tiny-dense\n"
            "  --mix MIX              q4_k_m (default) | q8_0 | q6_k | bf16 | f32\n"
            "  --no-mtp               leave out the MTP block\n"
            "  --seed N               random seed (default 1)\n"
            "  --std X                weight standard deviation (default %.2f)\n"
            "  --logit-std X          LM head std x sqrt(n_embd): spread of the logits (default %.1f)\n"
            "  --hot-tokens N         scale N evenly spread LM head rows (default 0: none), so that a\n"
            "                         few tokens dominate the logits and top-2 margins are wide\n"
            "  --hot-scale X          factor for those rows (default %.1f)\n"
            "  --threads N            worker threads (default: all CPUs; output does not depend on it)\n"
            "  --vocab FILE.gguf      tokenizer source (default $CWEN_ORACLE_DIR/llama.cpp/models/ggml-vocab-qwen35.gguf)\n"
            "  --template FILE.jinja  chat template (default .../models/templates/Qwen3.5-4B.jinja)\n"
            "  --name TEXT            general.name\n"
            "  --vocab-size N         token_embd/output rows; the vocabulary is padded with [PAD<i>]\n"
            "  shape overrides: --layers N (main) --embd N --heads N --kv-heads N --head-dim N --rot N\n"
            "    --experts N --experts-used N --ff-exp N --ff-shexp N --ff N --k-heads N --v-heads N\n"
            "    --state-size N --conv N --ctx N\n"
            "  --dry-run              print tensor count, file size, decode bytes/token; write nothing\n"
            "  --list                 print every tensor: name, type, shape\n"
            "  -h, --help\n",
            CW_MKMODEL_DEFAULT_STD, CW_MKMODEL_DEFAULT_LOGIT_STD, CW_MKMODEL_DEFAULT_HOT_SCALE);
}

enum {
    O_PRESET = 256, O_MIX, O_NO_MTP, O_SEED, O_STD, O_THREADS, O_VOCAB, O_TEMPLATE, O_NAME, O_VOCAB_SIZE,
    O_LAYERS, O_EMBD, O_HEADS, O_KV_HEADS, O_HEAD_DIM, O_ROT, O_EXPERTS, O_EXPERTS_USED, O_FF_EXP,
    O_FF_SHEXP, O_FF, O_K_HEADS, O_V_HEADS, O_STATE, O_CONV, O_CTX, O_DRY, O_LOGIT_STD, O_LIST,
    O_HOT_TOKENS, O_HOT_SCALE,
};

static const struct option longopts[] = {
    {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
    {"preset", required_argument, 0, O_PRESET}, {"mix", required_argument, 0, O_MIX},
    {"no-mtp", no_argument, 0, O_NO_MTP}, {"seed", required_argument, 0, O_SEED},
    {"std", required_argument, 0, O_STD}, {"threads", required_argument, 0, O_THREADS},
    {"vocab", required_argument, 0, O_VOCAB}, {"template", required_argument, 0, O_TEMPLATE},
    {"name", required_argument, 0, O_NAME}, {"vocab-size", required_argument, 0, O_VOCAB_SIZE},
    {"layers", required_argument, 0, O_LAYERS}, {"embd", required_argument, 0, O_EMBD},
    {"heads", required_argument, 0, O_HEADS}, {"kv-heads", required_argument, 0, O_KV_HEADS},
    {"head-dim", required_argument, 0, O_HEAD_DIM}, {"rot", required_argument, 0, O_ROT},
    {"experts", required_argument, 0, O_EXPERTS}, {"experts-used", required_argument, 0, O_EXPERTS_USED},
    {"ff-exp", required_argument, 0, O_FF_EXP}, {"ff-shexp", required_argument, 0, O_FF_SHEXP},
    {"ff", required_argument, 0, O_FF}, {"k-heads", required_argument, 0, O_K_HEADS},
    {"v-heads", required_argument, 0, O_V_HEADS}, {"state-size", required_argument, 0, O_STATE},
    {"conv", required_argument, 0, O_CONV}, {"ctx", required_argument, 0, O_CTX},
    {"dry-run", no_argument, 0, O_DRY}, {"logit-std", required_argument, 0, O_LOGIT_STD},
    {"list", no_argument, 0, O_LIST}, {"hot-tokens", required_argument, 0, O_HOT_TOKENS},
    {"hot-scale", required_argument, 0, O_HOT_SCALE}, {0, 0, 0, 0},
};

static int parse_u64(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (!*s || *end || v > max || s[0] == '-') {
        fprintf(stderr, "cwen mkmodel: --%s: bad value '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* "tensor NAME TYPE ne0,ne1,ne2" per tensor, in file order */
static void print_list(const struct cw_qwen35_hparams *hp, enum cw_mix mix)
{
    size_t n = cw_qwen35_tensors(hp, NULL, 0);
    struct cw_qwen35_tensor *ts = calloc(n, sizeof *ts);
    if (!ts)
        return;
    cw_qwen35_tensors(hp, ts, n);
    for (size_t i = 0; i < n; i++)
        printf("tensor %s %s %lld,%lld,%lld\n", ts[i].name, cw_qtype_name(cw_mkmodel_tensor_type(hp, &ts[i], mix)),
               (long long)ts[i].ne[0], (long long)ts[i].ne[1], (long long)ts[i].ne[2]);
    free(ts);
}

int cw_cmd_mkmodel(int argc, char **argv)
{
    struct cw_mkmodel_opts o = {.mix = CW_MIX_Q4_K_M, .seed = 1};
    const char *preset = "tiny-moe";
    bool mtp = true, list = false;
    /* shape overrides, applied after the preset; 0 = keep */
    uint64_t ov[O_LOGIT_STD + 1] = {0};
    bool has_ov = false;
    struct cw_err err = {0};

    optind = 1;
    int c, li;
    while ((c = getopt_long(argc, argv, "o:h", longopts, &li)) != -1) {
        uint64_t v;
        switch (c) {
        case 'o': o.out_path = optarg; break;
        case 'h': usage(stdout); return 0;
        case O_PRESET: preset = optarg; break;
        case O_MIX: {
            int m = cw_mix_from_name(optarg);
            if (m < 0) {
                fprintf(stderr, "cwen mkmodel: unknown mix '%s' (q4_k_m, q8_0, q6_k, bf16, f32)\n", optarg);
                return 2;
            }
            o.mix = (enum cw_mix)m;
            break;
        }
        case O_NO_MTP: mtp = false; break;
        case O_SEED:
            if (parse_u64("seed", optarg, UINT64_MAX, &o.seed))
                return 2;
            break;
        case O_STD:
        case O_LOGIT_STD:
        case O_HOT_SCALE: {
            char *end;
            float f = strtof(optarg, &end);
            if (!*optarg || *end || !(f > 0.0f) || f > 100.0f) {
                fprintf(stderr, "cwen mkmodel: --%s: bad value '%s'\n", longopts[li].name, optarg);
                return 2;
            }
            *(c == O_STD ? &o.std : c == O_LOGIT_STD ? &o.logit_std : &o.hot_scale) = f;
            break;
        }
        case O_HOT_TOKENS:
            if (parse_u64("hot-tokens", optarg, UINT32_MAX, &v))
                return 2;
            o.hot_tokens = (uint32_t)v;
            break;
        case O_THREADS:
            if (parse_u64("threads", optarg, 1024, &v))
                return 2;
            o.n_threads = (int)v;
            break;
        case O_VOCAB: o.vocab_path = optarg; break;
        case O_TEMPLATE: o.template_path = optarg; break;
        case O_NAME: o.name = optarg; break;
        case O_DRY: o.dry_run = true; break;
        case O_LIST: list = true; break;
        case '?': usage(stderr); return 2;
        default:
            if (c >= O_VOCAB_SIZE && c < O_DRY) {
                if (parse_u64(longopts[li].name, optarg, UINT32_MAX, &ov[c]))
                    return 2;
                if (c != O_VOCAB_SIZE)
                    has_ov = true;
                break;
            }
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "cwen mkmodel: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o.out_path && !o.dry_run) {
        fprintf(stderr, "cwen mkmodel: -o FILE is required (or --dry-run)\n");
        usage(stderr);
        return 2;
    }
    if (cw_qwen35_preset(preset, mtp, &o.hp, &err)) {
        fprintf(stderr, "cwen mkmodel: %s\n", err.msg);
        return 2;
    }
    struct cw_qwen35_hparams *hp = &o.hp;
#define OV(id, field) if (ov[id]) hp->field = (uint32_t)ov[id]
    OV(O_VOCAB_SIZE, n_vocab);
    OV(O_LAYERS, n_layer);
    OV(O_EMBD, n_embd);
    OV(O_HEADS, n_head);
    OV(O_KV_HEADS, n_head_kv);
    OV(O_HEAD_DIM, head_dim);
    OV(O_ROT, n_rot);
    OV(O_EXPERTS, n_expert);
    OV(O_EXPERTS_USED, n_expert_used);
    OV(O_FF_EXP, n_ff_exp);
    OV(O_FF_SHEXP, n_ff_shexp);
    OV(O_FF, n_ff);
    OV(O_K_HEADS, ssm_n_k_heads);
    OV(O_V_HEADS, ssm_n_v_heads);
    OV(O_STATE, ssm_d_state);
    OV(O_CONV, ssm_conv);
    OV(O_CTX, n_ctx_train);
#undef OV
    if (has_ov) {
        hp->ssm_inner = hp->ssm_n_v_heads * hp->ssm_d_state;
        if (hp->n_layer + hp->n_nextn > CW_MAX_LAYERS) {
            fprintf(stderr, "cwen mkmodel: at most %d layers\n", CW_MAX_LAYERS - 1);
            return 2;
        }
        cw_qwen35_set_layer_pattern(hp, 4);
    }

    char name[128];
    if (!o.name) {
        const char *base = !strcmp(preset, "35b-a3b")   ? "Qwen3.6-35B-A3B"
                         : !strcmp(preset, "27b")       ? "Qwen3.6-27B"
                         : !strcmp(preset, "3.8-27b")   ? "Qwen3.8-27B"
                                                        : preset;
        snprintf(name, sizeof name, "%s%s (synthetic)", base, has_ov ? "-custom" : "");
        o.name = name;
    }

    struct cw_mkmodel_result res;
    if (cw_mkmodel(&o, &res, &err)) {
        fprintf(stderr, "cwen mkmodel: %s\n", err.msg);
        return 1;
    }
    if (list)
        print_list(hp, o.mix);
    if (o.dry_run) {
        printf("tensors: %llu\nsize: %llu bytes (%.2f GB)\nparams: %llu\ndecode bytes/token: %llu\n",
               (unsigned long long)res.n_tensors, (unsigned long long)res.file_size, (double)res.file_size / 1e9,
               (unsigned long long)res.n_params, (unsigned long long)res.decode_bytes);
        return 0;
    }
    printf("wrote %s: %s %s, %llu tensors, %llu bytes (%.2f GB) in %.2f s (%.1f MB/s)\n", o.out_path,
           cw_qwen35_arch_name(hp->arch), cw_mix_name(o.mix), (unsigned long long)res.n_tensors,
           (unsigned long long)res.file_size, (double)res.file_size / 1e9, res.seconds,
           res.seconds > 0 ? (double)res.file_size / 1e6 / res.seconds : 0.0);
    printf("special tokens: <think> %d </think> %d <tool_call> %d </tool_call> %d <tool_response> %d "
           "</tool_response> %d\n",
           res.id_think, res.id_think_end, res.id_tool_call, res.id_tool_call_end, res.id_tool_resp,
           res.id_tool_resp_end);
    return 0;
}
