/* cmd_serve.c — `cwen serve`: load a model and answer the OpenAI, Anthropic
 * and native HTTP APIs until SIGINT/SIGTERM.
 *
 * Owns the command line and the process's signal handling: SIGINT/SIGTERM
 * are blocked in every thread and taken by sigwait in the main thread, which
 * then stops the server (cw_server_stop ends running and queued requests
 * with an error and waits for every connection) and closes the engine. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "cwen.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cwen serve -m FILE [options]\n"
            "Serves FILE over HTTP: OpenAI (/v1/chat/completions, /v1/completions,\n"
            "/v1/responses, /v1/models), Anthropic (/v1/messages, /v1/messages/count_tokens)\n"
            "and native (/cwen/v1/generate, /health) APIs.\n"
            "  -m, --model FILE   the GGUF to serve\n"
            "  --host ADDR        address to bind (default 127.0.0.1)\n"
            "  --port N           port (default 8080; 0 picks a free one)\n"
            "  --api-key KEY      require KEY (Authorization: Bearer KEY or x-api-key: KEY);\n"
            "                     also read from $CWEN_API_KEY\n"
            "  --backend NAME     cpu | cuda | auto (default auto: the GPU when present)\n"
            "  -t, --threads N    forward threads (default: all CPUs)\n"
            "  -c, --ctx N        context per request, prompt + output (default min(train, 8192))\n"
            "  --queue N          requests that may wait behind the running one (default 16)\n"
            "  --log-level L      error | warn | info (default) | debug\n");
}

static bool is_loopback(const char *h)
{
    return !strcmp(h, "127.0.0.1") || !strcmp(h, "::1") || !strcmp(h, "localhost") ||
           !strncmp(h, "127.", 4);
}

static int int_arg(const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "cwen serve: %s needs an integer in [%ld, %ld]\n", opt, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int cw_cmd_serve(int argc, char **argv)
{
    const char *model = NULL, *host = "127.0.0.1", *key = getenv("CWEN_API_KEY"), *backend = NULL;
    long port = 8080, threads = 0, ctx = 0, queue = 16;
    enum cw_log level = CW_LOG_INFO;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--host"))
            host = v;
        else if (!strcmp(a, "--api-key"))
            key = v;
        else if (!strcmp(a, "--backend")) {
            if (v && !cw_cli_backend_ok(v)) {
                fprintf(stderr, "cwen serve: unknown backend \"%s\" (expected cpu, cuda or auto)\n", v);
                return 2;
            }
            backend = v;
        } else if (!strcmp(a, "--port")) {
            if (int_arg(a, v, 0, 65535, &port))
                return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (int_arg(a, v, 0, 1024, &threads))
                return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            if (int_arg(a, v, 0, 1L << 30, &ctx))
                return 2;
        } else if (!strcmp(a, "--queue")) {
            if (int_arg(a, v, 0, 1 << 20, &queue))
                return 2;
        } else if (!strcmp(a, "--log-level")) {
            static const char *const names[] = {"error", "warn", "info", "debug"};
            int found = -1;
            for (int k = 0; k < 4 && v; k++)
                if (!strcmp(v, names[k]))
                    found = k;
            if (found < 0) {
                fprintf(stderr, "cwen serve: --log-level must be error, warn, info or debug\n");
                return 2;
            }
            level = (enum cw_log)found;
        } else {
            fprintf(stderr, "cwen serve: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "cwen serve: %s needs a value\n", a);
            return 2;
        }
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    if (key && !*key)
        key = NULL;
    if (!key && !is_loopback(host))
        fprintf(stderr, "cwen serve: warning: listening on %s without --api-key: anyone who can "
                        "reach this address can use the model\n", host);

    /* block the signals before any thread starts, so that only sigwait sees them */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* listen first, so that /health can say "loading" while the model maps */
    struct cw_err err = {0};
    struct cw_server_opts so = {.host = host, .port = (int)port, .api_key = key,
                                .queue = (int)queue, .log_level = level};
    struct cw_server *s = NULL;
    if (cw_server_start(&s, NULL, &so, &err) < 0) {
        fprintf(stderr, "cwen serve: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "cwen serve: listening on http://%s:%d%s; loading %s\n", host,
            cw_server_port(s), key ? " (API key required)" : "", model);
    fflush(stderr);
    cwen *e = NULL;
    struct cwen_opts eo = {.path = model, .n_threads = (int)threads, .n_ctx = ctx,
                           .backend = backend};
    if (cwen_open(&e, &eo, &err) < 0) {
        fprintf(stderr, "cwen serve: %s\n", err.msg);
        cw_server_stop(s);
        return 1;
    }
    const struct cwen_info *in = cwen_get_info(e);
    cw_server_set_engine(s, e);
    fprintf(stderr, "cwen serve: ready: %s (%s, %s), context %lld, %s backend, %d threads\n",
            in->model_name, in->file_name, in->arch, (long long)in->n_ctx, in->backend,
            in->n_threads);
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "cwen serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    cw_server_stop(s);
    cwen_close(e);
    fprintf(stderr, "cwen serve: stopped\n");
    return 0;
}
