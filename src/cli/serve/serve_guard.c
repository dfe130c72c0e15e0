/*
 * serve_guard.c - what 'delayq serve' checks before it routes a request:
 * whether its Host header names this server (DNS rebinding), whether its
 * client must wait after failed tokens (guessing), and which waiting
 * connection a new one pushes out (slow clients).
 *
 * Owns the Host rule, the backoff table and the connection table. No HTTP
 * library and no Redis: serve_http.c hands in the header's value, the
 * client's address and a monotonic clock, answers 421 or 429 from what
 * these say, and closes the connections named here.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/serve/serve.h"

/* ------------------------------------------------------------ Host */

/* An IP literal's bytes into out (16): IPv4 as its 4 bytes, IPv6 as its
 * 16. Returns the length, or 0 if s is no literal. */
static size_t ip_bytes(const char *s, unsigned char out[16]) {
    if (inet_pton(AF_INET, s, out) == 1) return 4;
    if (inet_pton(AF_INET6, s, out) == 1) return 16;
    return 0;
}

static int wildcard(const unsigned char *ip, size_t len) {
    static const unsigned char zero[16];
    return len && memcmp(ip, zero, len) == 0;
}

int cli_addr_loopback(const char *addr) {
    unsigned char ip[16];
    static const unsigned char one6[16] = {[15] = 1};
    size_t len = ip_bytes(addr, ip);
    return (len == 4 && ip[0] == 127) || (len == 16 && memcmp(ip, one6, 16) == 0);
}

/* The name of a Host value into name (size bytes): "[v6]" loses its
 * brackets, a ":PORT" of 1 to 5 digits is dropped. 0, or -1 if malformed. */
static int host_name(const char *host, char *name, size_t size) {
    const char *end, *port;
    if (host[0] == '[') {
        end = strchr(host, ']');
        if (!end) return -1;
        host++;
        port = end + 1;
    } else {
        end = strchr(host, ':');
        if (!end) end = host + strlen(host);
        port = end;
    }
    if (*port) {
        size_t digits = strspn(port + 1, "0123456789");
        if (port[0] != ':' || digits < 1 || digits > 5 || port[1 + digits]) return -1;
    }
    if (end == host || (size_t)(end - host) >= size) return -1;
    memcpy(name, host, (size_t)(end - host));
    name[end - host] = '\0';
    return 0;
}

int cli_host_allowed(const cli_hosts *h, const char *host) {
    char name[256];
    unsigned char ip[16], mine[16];

    if (!host) return 1;
    if (host_name(host, name, sizeof name)) return 0;
    if (strcasecmp(name, "localhost") == 0) return 1;
    for (int i = 0; i < h->nnames; i++)
        if (strcasecmp(name, h->names[i]) == 0) return 1;
    /* An IP literal cannot be rebound: it passes if it is the listen
     * address, or any address when the server listens on all of them. */
    size_t len = ip_bytes(name, ip), mlen = ip_bytes(h->listen, mine);
    if (!len || !mlen) return 0;
    return wildcard(mine, mlen) || (len == mlen && memcmp(ip, mine, len) == 0);
}

/* ------------------------------------------------------------ failed tokens */

#define GUARD_SLOTS 256
#define FREE_TRIES 3 /* failures before the first wait: typos cost nothing */
#define DELAY_FIRST_MS 250
#define DELAY_MAX_MS 60000
#define FORGET_MS 600000 /* an address quiet this long starts afresh   */
#define WINDOW_MS 10000  /* the process-wide count's window             */
#define WINDOW_MAX 20    /* failures in a window before everyone waits  */
#define ADDR_MAX 16      /* an IPv6 address's bytes                   */

typedef struct slot {
    unsigned char addr[ADDR_MAX];
    size_t len;
    int failures;
    int64_t last_ms, until_ms;
} slot;

struct cli_guard {
    slot slots[GUARD_SLOTS];
    int64_t window_start_ms;
    int window_failures;
};

cli_guard *cli_guard_new(void) { return calloc(1, sizeof(cli_guard)); }

void cli_guard_free(cli_guard *g) { free(g); }

/* The slot of addr, or NULL. */
static slot *find(cli_guard *g, const void *addr, size_t len) {
    if (!len) /* an address unknown: only the process-wide count */
        return NULL;
    if (len > ADDR_MAX) len = ADDR_MAX;
    for (int i = 0; i < GUARD_SLOTS; i++)
        if (g->slots[i].len == len && memcmp(g->slots[i].addr, addr, len) == 0) return &g->slots[i];
    return NULL;
}

static int seconds_until(int64_t until_ms, int64_t now_ms) {
    return (int)((until_ms - now_ms + 999) / 1000);
}

int cli_guard_wait(cli_guard *g, const void *addr, size_t len, int64_t now_ms) {
    if (now_ms - g->window_start_ms >= WINDOW_MS) {
        g->window_start_ms = now_ms;
        g->window_failures = 0;
    }
    if (g->window_failures >= WINDOW_MAX) return seconds_until(g->window_start_ms + WINDOW_MS, now_ms);
    const slot *s = find(g, addr, len);
    return s && s->until_ms > now_ms ? seconds_until(s->until_ms, now_ms) : 0;
}

void cli_guard_result(cli_guard *g, const void *addr, size_t len, int64_t now_ms, int ok) {
    slot *s = find(g, addr, len);
    if (ok) {
        if (s) memset(s, 0, sizeof *s);
        return;
    }
    g->window_failures++;
    if (!len) return;
    if (!s) { /* a free slot, or the one quiet longest */
        s = &g->slots[0];
        for (int i = 1; i < GUARD_SLOTS && s->len; i++)
            if (!g->slots[i].len || g->slots[i].last_ms < s->last_ms) s = &g->slots[i];
        memset(s, 0, sizeof *s);
        s->len = len > ADDR_MAX ? ADDR_MAX : len;
        memcpy(s->addr, addr, s->len);
    }
    if (now_ms - s->last_ms > FORGET_MS) s->failures = 0;
    s->failures++;
    s->last_ms = now_ms;
    if (s->failures <= FREE_TRIES) return;
    int64_t delay = DELAY_FIRST_MS;
    for (int i = FREE_TRIES + 1; i < s->failures && delay < DELAY_MAX_MS; i++) delay *= 2;
    s->until_ms = now_ms + (delay < DELAY_MAX_MS ? delay : DELAY_MAX_MS);
}

/* ------------------------------------------------------------ connections */

struct cli_conn {
    cli_conn *prev, *next;
    unsigned char addr[ADDR_MAX];
    size_t len;
    void *handle;
    int busy, closing;
    int64_t since_ms; /* waiting since */
};

struct cli_conns {
    cli_conn *head;
    int n;
};

cli_conns *cli_conns_new(void) { return calloc(1, sizeof(cli_conns)); }

void cli_conns_free(cli_conns *t) {
    while (t && t->head) cli_conn_end(t, t->head);
    free(t);
}

static int same_addr(const cli_conn *c, const void *addr, size_t len) {
    return c->len == len && memcmp(c->addr, addr, len) == 0;
}

/* The connection waiting longest, of addr (len 0: of any address), or
 * NULL; *waiting gets how many wait. */
static cli_conn *longest_waiting(const cli_conns *t, const void *addr, size_t len, int *waiting) {
    cli_conn *best = NULL;
    *waiting = 0;
    for (cli_conn *c = t->head; c; c = c->next) {
        if (c->busy || c->closing || (len && !same_addr(c, addr, len))) continue;
        ++*waiting;
        if (!best || c->since_ms < best->since_ms) best = c;
    }
    return best;
}

cli_conn *cli_conn_start(cli_conns *t, const void *addr, size_t len, void *handle, int64_t now_ms,
                         cli_conn **evict) {
    int waiting;
    *evict = NULL;
    if (len > ADDR_MAX) len = ADDR_MAX;
    cli_conn *old = len ? longest_waiting(t, addr, len, &waiting) : NULL;
    if (old && waiting >= CLI_WAIT_PER_IP) *evict = old;
    else if (t->n >= CLI_CONN_SOFT_MAX) *evict = longest_waiting(t, NULL, 0, &waiting);
    if (*evict) (*evict)->closing = 1;
    cli_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    memcpy(c->addr, addr, len);
    c->len = len;
    c->handle = handle;
    c->since_ms = now_ms;
    c->next = t->head;
    if (t->head) t->head->prev = c;
    t->head = c;
    t->n++;
    return c;
}

void cli_conn_busy(cli_conn *c, int busy, int64_t now_ms) {
    if (!c) return;
    c->busy = busy;
    c->since_ms = now_ms;
}

void cli_conn_end(cli_conns *t, cli_conn *c) {
    if (!c) return;
    if (c->prev) c->prev->next = c->next;
    else t->head = c->next;
    if (c->next) c->next->prev = c->prev;
    t->n--;
    free(c);
}

void *cli_conn_handle(const cli_conn *c) { return c->handle; }
