/* test_debug_dump_oracle.c — `cwen debug-dump --ref` against llama_dump's
 * GGUF of llama.cpp's intermediates, on a generated tiny dense file.
 *
 *   - the same file and prompt: every op cwen taps is found in the dump
 *     (>= 50 of them), none diverges (default threshold 0.1, the bound
 *     debug_dump.c justifies), exit status 0;
 *   - the dump with one tensor scaled by 1.5 (attn_post_norm-1, mid-model):
 *     exit status 1 and exactly that tensor named as the first divergent op
 *     (its rel err is 0.5; every op before it agrees as in the first run);
 *   - a prompt whose tokens differ from the dump's is refused (status 2);
 *   - a dump of token ids (llama_dump -t) runs without a prompt, its own
 *     tokens, with no divergence; bad ids and no prompt nor dump are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "../test.h"

#define PROMPT "The quick brown fox jumps over the lazy dog. <|im_start|>user\nHow are you?"

/* runs cmd, captures stdout into out[cap]; returns the exit status or -1 */
static int run(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void)
{
    const char *bin = test_env("CWEN_BIN", "cwen"), *tmp = test_env("CWEN_TMP", "/tmp");
    const char *dump = test_env("CWEN_LLAMA_DUMP", "llama_dump");
    char model[512], ref[512], bad[512], cmd[2048];
    static char out[1 << 20];
    snprintf(model, sizeof model, "%s/dbgdump-tiny-dense.gguf", tmp);
    snprintf(ref, sizeof ref, "%s/dbgdump-ref.gguf", tmp);
    snprintf(bad, sizeof bad, "%s/dbgdump-ref-bad.gguf", tmp);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel -o '%s' --preset tiny-dense --no-mtp --seed 7 --threads 2 >/dev/null",
             bin, model);
    ok(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -p '" PROMPT "' -o '%s' >/dev/null", dump, model, ref);
    ok(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -p '" PROMPT "' -o '%s' --scale attn_post_norm-1 1.5 >/dev/null",
             dump, model, bad);
    ok(system(cmd) == 0, "%s", cmd);

    /* clean: no divergence */
    snprintf(cmd, sizeof cmd, "'%s' debug-dump -m '%s' -p '" PROMPT "' --ref '%s'", bin, model, ref);
    int st = run(cmd, out, sizeof out);
    ok(st == 0, "debug-dump on the same file and prompt exits 0 (got %d)", st);
    ok(strstr(out, "\nno divergence\n") != NULL, "reports no divergence");
    int n_ops = 0, n_cmp = 0, n_miss = -1;
    const char *s2 = strstr(out, " ops, ");
    if (s2) {
        while (s2 > out && s2[-1] != '#')
            s2--;
        sscanf(s2, " %d ops, %d compared with %*s %d not in it", &n_ops, &n_cmp, &n_miss);
    }
    ok(n_ops >= 50 && n_cmp == n_ops && n_miss == 0, "every tapped op is in the dump (%d ops, %d compared, %d missing)",
       n_ops, n_cmp, n_miss);
    ok(strstr(out, "attn_norm-0 ") && strstr(out, "attn_gated-3 ") && strstr(out, "result_output "),
       "the listing names ops as llama.cpp does");
    if (getenv("CWEN_TEST_VERBOSE"))
        fputs(out, stdout);

    /* planted divergence: that tensor is the first */
    snprintf(cmd, sizeof cmd, "'%s' debug-dump -m '%s' -p '" PROMPT "' --ref '%s'", bin, model, bad);
    st = run(cmd, out, sizeof out);
    ok(st == 1, "debug-dump against the scaled dump exits 1 (got %d)", st);
    const char *fd = strstr(out, "first divergent op: ");
    char name[64] = "";
    if (fd)
        sscanf(fd, "first divergent op: %63s", name);
    ok(!strcmp(name, "attn_post_norm-1"), "first divergent op reported: '%s' (planted: attn_post_norm-1)", name);

    /* another prompt than the dump's */
    snprintf(cmd, sizeof cmd, "'%s' debug-dump -m '%s' -p 'something else' --ref '%s' 2>&1", bin, model, ref);
    st = run(cmd, out, sizeof out);
    ok(st == 2 && strstr(out, "differ"), "a prompt other than the dump's is refused (%d: %.200s)", st, out);
    /* a dump of token ids (llama_dump -t), run without a prompt: its own
     * tokens, which need not be text that tokenizes back to them */
    char ids[512];
    snprintf(ids, sizeof ids, "%s/dbgdump-ids.gguf", tmp);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t 151643,9707,30,0 -o '%s' >/dev/null", dump, model,
             ids);
    ok(system(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "'%s' debug-dump -m '%s' --ref '%s'", bin, model, ids);
    st = run(cmd, out, sizeof out);
    ok(st == 0 && strstr(out, ": 4 tokens, ") && strstr(out, "\nno divergence\n"),
       "debug-dump without a prompt runs the dump's 4 tokens, no divergence (%d)", st);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t 9707,x -o '%s' 2>&1", dump, model, ids);
    st = run(cmd, out, sizeof out);
    ok(st == 1 && strstr(out, "bad token ids"), "llama_dump refuses bad token ids (%d: %.200s)", st,
       out);
    snprintf(cmd, sizeof cmd, "'%s' debug-dump -m '%s' 2>&1", bin, model);
    st = run(cmd, out, sizeof out);
    ok(st == 2 && strstr(out, "usage"), "debug-dump without a prompt or a dump is refused (%d)",
       st);
    remove(model), remove(ref), remove(bad), remove(ids);
    return done();
}
