/* http.c — the HTTP server: libmicrohttpd glue, limits, auth, routing, the
 * bounded queue and the one worker thread that owns the engine.
 *
 * Threads: libmicrohttpd runs a thread per connection (MHD_USE_THREAD_PER_
 * CONNECTION). That thread reads the body (capped at 100 MB), checks the
 * API key, parses and validates the JSON, renders and tokenizes the prompt
 * (read-only engine calls), and queues a job. The worker pops jobs one after
 * another and runs cwen_generate; a non-streaming connection thread sleeps
 * until its job is done and sends the JSON, a streaming one drains the SSE
 * bytes the worker appends (MHD's content-reader callback may block in this
 * mode). A client that goes away releases its response; the free callback
 * marks the job gone and the worker's event callback cancels the generation.
 * Why libmicrohttpd rather than libevent: blocking per-connection threads
 * make the hand-off to a single worker a mutex and a condition variable, and
 * it parses HTTP/1.1 (chunked uploads, keep-alive) for us; the connection
 * count is small for a one-model server, so a thread each costs nothing. */
#include <microhttpd.h>
#include <stdatomic.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"

#define BODY_CAP (100u << 20) /* 100 MB */

struct cw_server {
    cwen *_Atomic e; /* NULL while the model loads */
    struct cw_server_opts o;
    char *api_key;
    struct MHD_Daemon *d;
    int port;
    pthread_t worker;
    bool has_worker;
    pthread_mutex_t mu; /* queue */
    pthread_cond_t cv;
    struct srv_job *head, *tail;
    int n_queued;
    _Atomic bool stopping;
    _Atomic int n_active; /* requests between their first callback and completion */
    _Atomic uint64_t seq;  /* ids */
    pthread_mutex_t log_mu;
};

struct conn {
    enum srv_dialect dialect;
    char *body;
    size_t n, cap;
    bool too_big;
};

const cwen *srv_engine(const struct cw_server *s) { return s->e; }

uint64_t srv_next_seq(struct cw_server *s) { return ++s->seq; }

void srv_log(struct cw_server *s, enum cw_log level, const char *fmt, ...)
{
    if (level > s->o.log_level)
        return;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", localtime_r(&t, &tm));
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&s->log_mu);
    fprintf(stderr, "%s [%s] ", ts, names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&s->log_mu);
    va_end(ap);
}

/* ---- jobs ---------------------------------------------------------------- */

void srv_job_release(struct srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left)
        return;
    if (j->api_free)
        j->api_free(j->api);
    json_decref(j->req);
    json_decref(j->reply);
    json_decref(j->tool_calls);
    json_decref(j->logprobs);
    for (size_t i = 0; i < j->gp.n_stop; i++)
        free(j->stops[i]);
    free(j->stops);
    free(j->bias);
    free(j->tools_json);
    free(j->prompt);
    free(j->model);
    free(j->reasoning);
    free(j->content);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

struct srv_job *srv_job_new(struct cw_server *s, enum srv_dialect d, json_t *req)
{
    struct srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->srv = s;
    j->dialect = d;
    j->req = req;
    j->refs = 1;
    j->created = (int64_t)time(NULL);
    j->gp.sampling = cw_sampling_default();
    j->gp.n_top_logprobs = -1;
    j->tool_calls = json_array();
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    return j;
}

static json_t *dialect_error(enum srv_dialect d, const struct srv_err *e)
{
    return d == SRV_ANTHROPIC ? anthropic_error(e) : openai_error(e);
}

/* A job that failed on the worker: a JSON error, or an error event that
 * ends the stream in the dialect's shape. */
static void job_fail(struct srv_job *j, const struct srv_err *e)
{
    if (!j->stream) {
        j->status = e->status;
        j->reply = dialect_error(j->dialect, e);
        return;
    }
    if (j->dialect == SRV_ANTHROPIC) {
        srv_sse_json(j, "error", anthropic_error(e));
    } else {
        srv_sse_json(j, NULL, openai_error(e));
        srv_sse_raw(j, "data: [DONE]\n\n");
    }
}

static int on_event(void *ctx, const struct cwen_event *ev)
{
    struct srv_job *j = ctx;
    pthread_mutex_lock(&j->mu);
    bool gone = j->gone;
    pthread_mutex_unlock(&j->mu);
    if (gone || j->srv->stopping)
        return 1;
    return j->on_event(j, ev);
}

static void run_job(struct cw_server *s, struct srv_job *j)
{
    struct cw_err err = {0};
    struct srv_err se = {0};
    int rc = -1;
    pthread_mutex_lock(&j->mu);
    bool gone = j->gone;
    pthread_mutex_unlock(&j->mu);
    if (s->stopping) {
        srv_errf(&se, 503, "", "the server is shutting down");
    } else if (gone) {
        srv_log(s, CW_LOG_INFO, "%s: client left while queued", j->route);
    } else {
        rc = cwen_generate(s->e, &j->gp, on_event, j, &j->usage, &err);
        if (rc < 0)
            srv_errf(&se, err.code == CW_ERR_INVALID ? 400 : 500, "", "%s", err.msg);
        else if (j->usage.finish == CWEN_FINISH_CANCELLED && !j->gone)
            srv_errf(&se, 503, "", "generation cancelled: the server is shutting down");
    }
    const struct cwen_usage *u = &j->usage;
    if (se.status) {
        job_fail(j, &se);
    } else if (rc == 0) {
        j->on_done(j, u, NULL);
        j->status = j->status ? j->status : 200;
    }
    if (rc == 0) {
        double tps = u->t_decode_ms > 0 && u->n_completion > 1
                         ? (u->n_completion - 1) * 1e3 / u->t_decode_ms : 0;
        srv_log(s, CW_LOG_INFO,
                "%s%s prompt=%lld cached=%lld gen=%lld reasoning=%lld ttft=%.1fms decode=%.1ftok/s "
                "finish=%s%s",
                j->route, j->stream ? " stream" : "", (long long)u->n_prompt,
                (long long)u->n_cached, (long long)u->n_completion, (long long)u->n_reasoning,
                u->t_prompt_ms, tps, cwen_finish_name(u->finish),
                u->finish == CWEN_FINISH_CANCELLED ? (j->gone ? " (client disconnected)"
                                                               : " (shutdown)")
                                                    : "");
    } else if (se.status) {
        srv_log(s, CW_LOG_WARN, "%s: %d %s", j->route, se.status, se.msg);
    }
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    srv_job_release(j);
}

static void *worker_main(void *arg)
{
    struct cw_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        struct srv_job *j = s->head;
        if (!j) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        s->n_queued--;
        pthread_mutex_unlock(&s->mu);
        run_job(s, j);
    }
}

/* ---- responses ----------------------------------------------------------- */

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_err(struct MHD_Connection *c, enum srv_dialect d,
                                const struct srv_err *e)
{
    return send_json(c, e->status, dialect_error(d, e));
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    while (j->off_out == j->n_out && !j->done)
        pthread_cond_wait(&j->cv, &j->mu);
    ssize_t n = MHD_CONTENT_READER_END_OF_STREAM;
    if (j->off_out < j->n_out) {
        size_t k = j->n_out - j->off_out < max ? j->n_out - j->off_out : max;
        memcpy(buf, j->out + j->off_out, k);
        j->off_out += k;
        if (j->off_out == j->n_out)
            j->off_out = j->n_out = 0;
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&j->mu);
    return n;
}

static void stream_free(void *cls)
{
    struct srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    if (!j->done)
        j->gone = true; /* the client left mid-stream: the worker cancels */
    pthread_mutex_unlock(&j->mu);
    srv_job_release(j);
}

/* Queues j, then answers: waits for a JSON reply, or streams. */
static enum MHD_Result submit(struct cw_server *s, struct MHD_Connection *c, struct srv_job *j)
{
    struct srv_err e = {0};
    pthread_mutex_lock(&s->mu);
    if (s->stopping)
        srv_errf(&e, 503, "", "the server is shutting down");
    else if (s->n_queued >= s->o.queue)
        srv_errf(&e, j->dialect == SRV_ANTHROPIC ? 529 : 503, "",
                 "the server is busy: %d requests are already waiting", s->n_queued);
    if (!e.status) {
        j->refs++; /* the worker's */
        if (s->tail)
            s->tail->next = j;
        else
            s->head = j;
        s->tail = j;
        s->n_queued++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (e.status) {
        srv_log(s, CW_LOG_WARN, "%s: %d %s", j->route, e.status, e.msg);
        enum srv_dialect d = j->dialect;
        srv_job_release(j);
        return send_err(c, d, &e);
    }
    if (j->stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, j, stream_free);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    json_t *reply = j->reply;
    j->reply = NULL;
    int status = j->status;
    srv_job_release(j);
    return send_json(c, status, reply);
}

/* ---- auth and routing ----------------------------------------------------- */

/* Constant-time in the key's length: every byte of the key is compared. */
static bool key_ok(const struct cw_server *s, const char *given)
{
    if (!given)
        return false;
    size_t kl = strlen(s->api_key), gl = strlen(given);
    unsigned diff = kl != gl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)s->api_key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

static bool authorized(const struct cw_server *s, struct MHD_Connection *c)
{
    if (!s->api_key)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7) && key_ok(s, h + 7))
        return true;
    return key_ok(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"));
}

static enum srv_dialect dialect_of(const char *url)
{
    if (!strncmp(url, "/v1/messages", 12))
        return SRV_ANTHROPIC;
    if (!strncmp(url, "/cwen/", 6) || !strcmp(url, "/health"))
        return SRV_NATIVE;
    return SRV_OPENAI;
}

struct route {
    const char *path;
    const char *name;
    int (*parse)(struct srv_job *j, struct srv_err *e);
};
static const struct route post_routes[] = {
    {"/v1/chat/completions", "openai.chat", openai_chat},
    {"/v1/completions", "openai.completions", openai_completions},
    {"/v1/responses", "openai.responses", openai_responses},
    {"/v1/messages", "anthropic.messages", anthropic_messages},
    {"/cwen/v1/generate", "native.generate", native_generate},
};

static enum MHD_Result handle(struct cw_server *s, struct MHD_Connection *c, struct conn *cn,
                              const char *url, const char *method)
{
    struct srv_err e = {0};
    enum srv_dialect d = cn->dialect;
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    srv_log(s, CW_LOG_DEBUG, "%s %s (%zu bytes)", method, url, cn->n);
    if (get && !strcmp(url, "/health"))
        return s->e ? send_json(c, 200, native_health(s))
                    : send_json(c, 503, json_pack("{s:s}", "status", "loading"));
    if (!authorized(s, c)) {
        srv_errf(&e, 401, "", "invalid or missing API key (Authorization: Bearer, or x-api-key)");
        return send_err(c, d, &e);
    }
    if (!s->e) {
        srv_errf(&e, d == SRV_ANTHROPIC ? 529 : 503, "", "the model is still loading");
        return send_err(c, d, &e);
    }
    if (cn->too_big) {
        srv_errf(&e, 413, "", "the request body exceeds %u bytes", BODY_CAP);
        return send_err(c, d, &e);
    }
    if (get && (!strcmp(url, "/v1/models")))
        return send_json(c, 200, openai_models(s));
    const struct route *rt = NULL;
    for (size_t i = 0; i < sizeof post_routes / sizeof post_routes[0]; i++)
        if (!strcmp(url, post_routes[i].path))
            rt = &post_routes[i];
    bool is_count = !strcmp(url, "/v1/messages/count_tokens");
    if (!rt && !is_count) {
        srv_errf(&e, 404, "", "no route %s %s", method, url);
        return send_err(c, d, &e);
    }
    if (!post) {
        srv_errf(&e, 405, "", "%s needs POST", url);
        return send_err(c, d, &e);
    }
    json_error_t je;
    json_t *req = json_loadb(cn->body ? cn->body : "", cn->n, 0, &je);
    if (!req) {
        srv_errf(&e, 400, "", "the body is not valid JSON: %s (line %d, column %d)", je.text,
                 je.line, je.column);
        return send_err(c, d, &e);
    }
    if (!json_is_object(req)) {
        json_decref(req);
        srv_errf(&e, 400, "", "the body must be a JSON object");
        return send_err(c, d, &e);
    }
    if (is_count) {
        json_t *r = anthropic_count_tokens(s, req, &e);
        json_decref(req);
        return r ? send_json(c, 200, r) : send_err(c, d, &e);
    }
    struct srv_job *j = srv_job_new(s, d, req);
    if (!j) {
        json_decref(req);
        srv_errf(&e, 500, "", "out of memory");
        return send_err(c, d, &e);
    }
    j->route = rt->name;
    if (rt->parse(j, &e) < 0) {
        srv_log(s, CW_LOG_INFO, "%s: %d %s%s%s", j->route, e.status, e.msg,
                e.param[0] ? " param=" : "", e.param);
        srv_job_release(j);
        return send_err(c, d, &e);
    }
    return submit(s, c, j);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    struct cw_server *s = cls;
    struct conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn)
            return MHD_NO;
        cn->dialect = dialect_of(url);
        s->n_active++;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > BODY_CAP)
            cn->too_big = true;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        /* past the cap the rest is read and dropped, so the client gets the 413 */
        if (!cn->too_big && cn->n + *upload_size > BODY_CAP) {
            cn->too_big = true;
            free(cn->body);
            cn->body = NULL;
            cn->n = cn->cap = 0;
        }
        if (!cn->too_big) {
            if (cn->n + *upload_size > cn->cap) {
                size_t cap = cn->cap ? cn->cap : 4096;
                while (cap < cn->n + *upload_size)
                    cap *= 2;
                char *b = realloc(cn->body, cap);
                if (!b)
                    return MHD_NO;
                cn->body = b;
                cn->cap = cap;
            }
            memcpy(cn->body + cn->n, upload_data, *upload_size);
            cn->n += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return handle(s, c, cn, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct cw_server *s = cls;
    struct conn *cn = *con_cls;
    if (cn) {
        s->n_active--;
        free(cn->body);
        free(cn);
        *con_cls = NULL;
    }
}

/* ---- start / stop --------------------------------------------------------- */

int cw_server_start(struct cw_server **out, cwen *e, const struct cw_server_opts *o,
                    struct cw_err *err)
{
    *out = NULL;
    struct cw_server *s = calloc(1, sizeof *s);
    if (!s)
        return cw_errf(err, CW_ERR_NOMEM, "serve: out of memory");
    s->e = e;
    s->o = *o;
    if (!s->o.host)
        s->o.host = "127.0.0.1";
    if (s->o.queue < 0)
        s->o.queue = 0;
    if (o->api_key && *o->api_key)
        s->api_key = strdup(o->api_key);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_init(&s->log_mu, NULL);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(s->o.host, port, &hints, &ai);
    if (gai) {
        cw_errf(err, CW_ERR_INVALID, "serve: --host %s: %s", s->o.host, gai_strerror(gai));
        goto fail;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (pthread_create(&s->worker, NULL, worker_main, s)) {
        freeaddrinfo(ai);
        cw_errf(err, CW_ERR_NOMEM, "serve: cannot start the worker thread");
        goto fail;
    }
    s->has_worker = true;
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        cw_errf(err, CW_ERR_IO, "serve: cannot listen on %s:%d (in use? not a local address?)",
                s->o.host, o->port);
        goto fail;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    *out = s;
    return 0;
fail:
    cw_server_stop(s);
    return -1;
}

int cw_server_port(const struct cw_server *s) { return s->port; }

void cw_server_set_engine(struct cw_server *s, cwen *e) { s->e = e; }

void cw_server_stop(struct cw_server *s)
{
    if (!s)
        return;
    /* the worker cancels what runs and fails what waits, then exits; the
     * connections then see their jobs done and finish */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->has_worker)
        pthread_join(s->worker, NULL);
    /* let the answers already decided reach their clients (bounded wait) */
    for (int i = 0; i < 500 && s->n_active > 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    if (s->d)
        MHD_stop_daemon(s->d);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->log_mu);
    free(s->api_key);
    free(s);
}
