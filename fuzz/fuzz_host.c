/*
 * fuzz_host.c - libFuzzer target: the checks 'delayq serve' makes before it
 * routes a request (serve_guard.c): the Host rule on any header value and
 * listen address, and the failed-token backoff on any sequence of tries.
 *
 * Input: a flags byte, then the Host value up to the first NUL, then
 * backoff steps of 3 bytes each (address byte, milliseconds to advance
 * times 4, and whether the try was right). Flag bits 0-1 pick the listen
 * address (127.0.0.1, 0.0.0.0, ::1, ::); bit 2 sends no Host at all.
 *
 * Besides not crashing: an allowed Host holds only the bytes of a name, an
 * IP literal and a port (no one else's names pass); an address that tries
 * again before its wait is over is told to wait, never for more than 60 s.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_host(unsigned flags, const char *host)
{
    static const char *const listen[4] = {"127.0.0.1", "0.0.0.0", "::1", "::"};
    static const char *const names[1] = {"dq.example"};
    const cli_hosts h = {listen[flags & 3], names, 1};
    if (cli_host_allowed(&h, flags & 4 ? NULL : host) && !(flags & 4) &&
        strspn(host, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.:[]-") != strlen(host))
        abort();
}

static void check_backoff(const uint8_t *p, size_t n)
{
    cli_guard *g = cli_guard_new();
    int64_t now = 1000;
    if (!g)
        return;
    for (size_t i = 0; i + 3 <= n; i += 3) {
        unsigned char addr[4] = {127, 0, 0, p[i]};
        now += (int64_t)p[i + 1] * 4;
        int wait = cli_guard_wait(g, addr, sizeof addr, now);
        if (wait < 0 || wait > 60)
            abort();
        if (!wait)
            cli_guard_result(g, addr, sizeof addr, now, p[i + 2] & 1);
    }
    cli_guard_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *host = malloc(size);
    if (!host)
        return 0;
    memcpy(host, data + 1, size - 1);
    host[size - 1] = '\0';
    size_t hl = strlen(host);
    check_host(data[0], host);
    free(host);
    if (1 + hl + 1 < size)
        check_backoff(data + 1 + hl + 1, size - (1 + hl + 1));
    return 0;
}
