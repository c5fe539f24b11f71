/* outstream.c — token text → stop-string filter → chat output parser →
 * held tool calls → events (see outstream.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"
#include "engine/outstream.h"

static int emit(struct cw_outstream *g, enum cwen_ev_type type, const char *s, size_t n, int tool)
{
    if (g->cancelled)
        return 1;
    struct cwen_event ev = {.type = type, .text = s, .len = n, .tool_index = tool};
    if (g->fn(g->ctx, &ev))
        g->cancelled = true;
    return g->cancelled;
}

static int on_chat(void *user, const struct cw_chat_event *ev)
{
    struct cw_outstream *g = user;
    if (g->stop_now) /* the one tool call allowed is out: the rest of this feed is dropped */
        return 0;
    switch (ev->type) {
    case CW_CHAT_EV_REASONING:
        return emit(g, CWEN_EV_REASONING, ev->text, ev->len, 0);
    case CW_CHAT_EV_CONTENT:
        return emit(g, CWEN_EV_TEXT, ev->text, ev->len, 0);
    case CW_CHAT_EV_TOOL_START:
        free(g->tname);
        g->tname = strndup(ev->text, ev->len);
        g->n_targs = g->n_tdelta = 0;
        return g->tname ? 0 : -1;
    case CW_CHAT_EV_TOOL_ARGS:
        if (cw_grow((void **)&g->targs, &g->cap_targs, g->n_targs + ev->len, 1) < 0 ||
            cw_grow((void **)&g->tdelta, &g->cap_tdelta, g->n_tdelta + 1, sizeof(size_t)) < 0)
            return -1;
        memcpy(g->targs + g->n_targs, ev->text, ev->len);
        g->n_targs += ev->len;
        g->tdelta[g->n_tdelta++] = g->n_targs;
        return 0;
    case CW_CHAT_EV_TOOL_END: {
        int idx = g->n_tools++;
        if (emit(g, CWEN_EV_TOOL_BEGIN, g->tname, strlen(g->tname), idx))
            return 1;
        size_t off = 0;
        for (size_t i = 0; i < g->n_tdelta; i++) {
            if (emit(g, CWEN_EV_TOOL_ARGS, g->targs + off, g->tdelta[i] - off, idx))
                return 1;
            off = g->tdelta[i];
        }
        /* the deltas concatenate to the whole object; an empty one has none */
        if (off == 0 && emit(g, CWEN_EV_TOOL_ARGS, ev->text, ev->len, idx))
            return 1;
        if (emit(g, CWEN_EV_TOOL_END, ev->text, ev->len, idx))
            return 1;
        if (g->p->one_tool_call)
            g->stop_now = true;
        return 0;
    }
    case CW_CHAT_EV_TOOL_ABORT:
        g->n_targs = g->n_tdelta = 0;
        return 0;
    }
    return 0;
}

/* Passes released text on: to the parser in chat mode, else as answer text. */
static int release(struct cw_outstream *g, const char *s, size_t n, struct cw_err *err)
{
    if (!n || g->stop_now)
        return 0;
    if (!g->has_parser)
        return emit(g, CWEN_EV_TEXT, s, n, 0) ? 1 : 0;
    if (cw_chat_parser_feed(&g->parser, s, n, err) < 0)
        return g->cancelled ? 1 : -1;
    return g->cancelled ? 1 : 0;
}

/* Longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t stop_hold(const struct cw_outstream *g, const char *s, size_t n)
{
    size_t best = 0;
    for (size_t i = 0; i < g->p->n_stop; i++) {
        const char *z = g->p->stop[i];
        size_t zl = strlen(z);
        for (size_t k = zl - 1 < n ? zl - 1 : n; k > best; k--)
            if (!memcmp(s + n - k, z, k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Appends a token's text; releases what can no longer be part of a stop
 * string. Returns 0, 1 (cancelled), 2 (a stop string matched), -1. */
static int push_text(struct cw_outstream *g, const char *s, size_t n, struct cw_err *err)
{
    if (!n)
        return 0;
    if (!g->p->n_stop)
        return release(g, s, n, err);
    if (cw_grow((void **)&g->pending, &g->cap_pending, g->n_pending + n, 1) < 0)
        return cw_errf(err, CW_ERR_NOMEM, "generate: out of memory");
    memcpy(g->pending + g->n_pending, s, n);
    g->n_pending += n;
    size_t first = SIZE_MAX;
    for (size_t i = 0; i < g->p->n_stop; i++) {
        const char *z = g->p->stop[i];
        const char *hit = memmem(g->pending, g->n_pending, z, strlen(z));
        if (hit && (size_t)(hit - g->pending) < first) {
            first = (size_t)(hit - g->pending);
            g->stop_string = z;
        }
    }
    if (first != SIZE_MAX) {
        int rc = release(g, g->pending, first, err);
        g->n_pending = 0;
        return rc ? rc : 2;
    }
    size_t keep = stop_hold(g, g->pending, g->n_pending);
    int rc = release(g, g->pending, g->n_pending - keep, err);
    memmove(g->pending, g->pending + g->n_pending - keep, keep);
    g->n_pending = keep;
    return rc;
}


int cw_outstream_init(struct cw_outstream *o, const struct cwen_gen_params *p, cwen_event_fn fn,
                      void *ctx, struct cw_err *err)
{
    memset(o, 0, sizeof *o);
    o->p = p, o->fn = fn, o->ctx = ctx;
    if (p->mode == CWEN_OUT_CHAT) {
        if (cw_chat_parser_init(&o->parser, p->in_reasoning, p->tools_json, on_chat, o, err) < 0)
            return -1;
        o->has_parser = true;
    }
    return 0;
}

int cw_outstream_push(struct cw_outstream *o, const char *s, size_t n, struct cw_err *err)
{
    if (o->cancelled || o->stop_now || o->stop_string)
        return 1;
    int r = push_text(o, s, n, err);
    if (r < 0)
        return -1;
    return r || o->cancelled || o->stop_now ? 1 : 0;
}

int cw_outstream_finish(struct cw_outstream *o, struct cw_err *err)
{
    if (o->cancelled)
        return 1;
    if (!o->stop_now && !o->stop_string) {
        if (release(o, o->pending, o->n_pending, err) < 0)
            return -1;
        o->n_pending = 0;
    }
    if (o->has_parser && !o->cancelled && cw_chat_parser_finish(&o->parser, err) < 0 &&
        !o->cancelled)
        return -1;
    return o->cancelled ? 1 : 0;
}

void cw_outstream_free(struct cw_outstream *o)
{
    if (o->has_parser)
        cw_chat_parser_free(&o->parser);
    free(o->pending);
    free(o->tname);
    free(o->targs);
    free(o->tdelta);
    memset(o, 0, sizeof *o);
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || len > n || (len == 2 && c < 0xC2))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if (len == 3) {
        unsigned cp = (c & 15) << 12 | (s[1] & 63u) << 6 | (s[2] & 63u);
        if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    } else if (len == 4) {
        unsigned cp = (c & 7) << 18 | (s[1] & 63u) << 12 | (s[2] & 63u) << 6 | (s[3] & 63u);
        if (cp < 0x10000 || cp > 0x10FFFF)
            return 0;
    }
    return len;
}

size_t cwen_utf8_lossy(const char *s, size_t n, char *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (l) {
            memcpy(out + o, s + i, l);
            o += l, i += l;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i++;
        }
    }
    return o;
}

