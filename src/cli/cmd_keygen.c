/*
 * cmd_keygen.c - "delayq keygen": a new key line for sealed payloads.
 *
 * Prints one "dq-key-1 <key id> <key>" line (src/util/seal.c makes it from
 * libsodium's randombytes) for a key file: the first line of the file seals,
 * every line opens. Connects to nothing.
 */
#include <sodium.h>
#include <string.h>

#include "cli/cli.h"
#include "util.h"

const char cli_usage_keygen[] =
    "usage: delayq keygen\n"
    "\n"
    "Prints a new key line for a key file (--key-file, $DELAYQ_KEY_FILE): 32\n"
    "random bytes in base64 with their key id. Keep the file private:\n"
    "  (umask 077; delayq keygen > queue.key)\n"
    "To rotate, put a new key first and keep the old ones until nothing sealed\n"
    "with them is left (the first line seals, every line opens):\n"
    "  (umask 077; { delayq keygen; cat queue.key; } > queue.key.new) &&\n"
    "    mv queue.key.new queue.key\n"
    "\n"
    "Exit codes: 0 printed, 2 usage error.\n";

int cli_cmd_keygen(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {""};
    const cli_opt opts[] = {{NULL, NULL, NULL}};
    char line[128];
    int npos;

    int rc = cli_parse(env, "keygen", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("keygen", npos, 0, 0, names, argv);
    if (rc) return rc;
    if (sodium_init() < 0 || dq__key_line(line, sizeof line) != 0) {
        cli_err("keygen: libsodium could not make a key");
        return CLI_FAIL;
    }
    rc = cli_write_out(line, strlen(line));
    sodium_memzero(line, sizeof line);
    return rc ? CLI_FAIL : CLI_OK;
}
