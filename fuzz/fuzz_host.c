/*
 * fuzz_host.c - libFuzzer target: the checks 'delayq serve' makes before it
 * routes a request (serve_guard.c): the Host rule on any header value and
 * listen address, and the failed-token backoff on any sequence of tries.
 *
 * Input: a flags byte, then the Host value up to the first NUL, then steps
 * of 3 bytes each (address byte, milliseconds to advance times 4, and an
 * outcome byte) run twice: as token tries (bit 0 of the outcome: the token
 * was right) and as connections (0-1: one opens, 2: its request begins,
 * 3: it ends; bits 2-7 pick an open one). Flag bits 0-1 pick the listen
 * address (127.0.0.1, 0.0.0.0, ::1, ::); bit 2 sends no Host at all.
 *
 * Besides not crashing: an allowed Host holds only the bytes of a name, an
 * IP literal and a port (no one else's names pass); an address that tries
 * again before its wait is over is told to wait, never for more than 60 s;
 * a connection pushed out has no request in progress, was not pushed out
 * before and is not the new one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_host(unsigned flags, const char *host) {
    static const char *const listen[4] = {"127.0.0.1", "0.0.0.0", "::1", "::"};
    static const char *const names[1] = {"dq.example"};
    const cli_hosts h = {listen[flags & 3], names, 1};
    if (cli_host_allowed(&h, flags & 4 ? NULL : host) && !(flags & 4) &&
        strspn(host, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.:[]-") !=
            strlen(host))
        abort();
}

static void check_backoff(const uint8_t *p, size_t n) {
    cli_guard *g = cli_guard_new();
    int64_t now = 1000;
    if (!g) return;
    for (size_t i = 0; i + 3 <= n; i += 3) {
        unsigned char addr[4] = {127, 0, 0, p[i]};
        now += (int64_t)p[i + 1] * 4;
        int wait = cli_guard_wait(g, addr, sizeof addr, now);
        if (wait < 0 || wait > 60) abort();
        if (!wait) cli_guard_result(g, addr, sizeof addr, now, p[i + 2] & 1);
    }
    cli_guard_free(g);
}

#define OPEN_MAX 64

static void check_conns(const uint8_t *p, size_t n) {
    cli_conns *t = cli_conns_new();
    cli_conn *open[OPEN_MAX];
    int busy[OPEN_MAX], closing[OPEN_MAX], nopen = 0;
    int64_t now = 1000;
    if (!t) return;
    for (size_t i = 0; i + 3 <= n; i += 3) {
        unsigned char addr[4] = {127, 0, 0, p[i] & 3};
        unsigned op = p[i + 2] & 3, k = nopen ? (unsigned)(p[i + 2] >> 2) % (unsigned)nopen : 0;
        now += (int64_t)p[i + 1] * 4;
        if (op <= 1 && nopen < OPEN_MAX) {
            cli_conn *evict;
            cli_conn *c = cli_conn_start(t, addr, sizeof addr, &open[nopen], now, &evict);
            if (!c) break;
            for (int j = 0; evict && j < nopen; j++)
                if (open[j] == evict) {
                    if (busy[j] || closing[j]) abort();
                    closing[j] = 1;
                }
            if (evict == c) abort();
            open[nopen] = c, busy[nopen] = 0, closing[nopen] = 0, nopen++;
        } else if (op == 2 && nopen) {
            cli_conn_busy(open[k], busy[k] = !busy[k], now);
        } else if (op == 3 && nopen) {
            cli_conn_end(t, open[k]);
            open[k] = open[nopen - 1], busy[k] = busy[nopen - 1], closing[k] = closing[nopen - 1];
            nopen--;
        }
    }
    cli_conns_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *host = malloc(size);
    if (!host) return 0;
    memcpy(host, data + 1, size - 1);
    host[size - 1] = '\0';
    size_t hl = strlen(host);
    check_host(data[0], host);
    free(host);
    if (1 + hl + 1 < size) {
        check_backoff(data + 1 + hl + 1, size - (1 + hl + 1));
        check_conns(data + 1 + hl + 1, size - (1 + hl + 1));
    }
    return 0;
}
