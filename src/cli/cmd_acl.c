/*
 * cmd_acl.c - "delayq acl": the least-privilege ACL rule for some queues.
 *
 * Owns the one table of what delayq sends to a data node (every command a
 * client sends itself, and every command its scripts call, which Redis 7
 * checks against the caller's ACL too) and prints one ACL SETUSER line from
 * it: the queues' key patterns and wake channels, and exactly those
 * commands. With --read-only: read-only key patterns (%R~) and only what
 * stats and dead-letter listing need (their scripts are no-writes functions
 * run with FCALL_RO, whose keys count as read). The rule grants calls, not
 * code: FCALL of the library an administrator loaded ('delayq functions
 * load'), never FUNCTION LOAD (Redis runs a function with its caller's
 * rights, and no rule can limit a load to one library's name: a user who
 * loads a library of her own runs her code as every user that calls it) nor
 * EVAL (a script that writes and then loops cannot be killed). The queue
 * registry dq:queues is granted apart, in a selector of its own: SADD (and
 * SMEMBERS) on that one key, so no other granted command reaches it. A
 * command passes if the root or one selector grants it with all its keys.
 * The password comes from a
 * file and appears only as its SHA-256 (libsodium's crypto_hash_sha256).
 * With --access-string: the rule alone, from "on", for the providers that
 * take a user's rule and password apart and refuse 'reset' and inline
 * passwords in it (ElastiCache's access strings).
 * Connects to nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util.h"

const char cli_usage_acl[] =
    "usage: delayq acl QUEUE... --user NAME [--password-file FILE] [--read-only]\n"
    "       delayq acl QUEUE... --access-string [--read-only]\n"
    "\n"
    "Prints one ACL SETUSER command that lets user NAME run every delayq command on\n"
    "the queues given, and nothing else: their keys (dq:{QUEUE}:*, and their\n"
    "shards' dq:{QUEUE~*}:*), their wake channels, SADD to the queue registry\n"
    "dq:queues (a Redis 7 selector), and only the commands delayq and its\n"
    "scripts send: FCALL of delayq's functions, never EVAL or FUNCTION LOAD.\n"
    "An administrator loads the library: 'delayq functions load'.\n"
    "Run it on every data node (each master and replica of a cluster or\n"
    "Sentinel group):\n"
    "  delayq acl orders --user app --password-file pw | redis-cli -h HOST -x ...\n"
    "or paste it into redis-cli.\n"
    "\n"
    "  --user NAME           the ACL user (1-64 of A-Z a-z 0-9 _ . -)\n"
    "  --password-file FILE  the password: the file's first line; it must not be\n"
    "                        readable by group or others. Printed only as its\n"
    "                        SHA-256 (#...). Without it the user gets no password\n"
    "                        and cannot log in until one is set\n"
    "  --read-only           only what stats, lookup, list, dead list/count,\n"
    "                        schedules (the listing), serve and its /metrics need:\n"
    "                        read-only keys, no offer, take, ack or redrive\n"
    "  --access-string       print the rule alone ('on ~... -@all +...'): no ACL\n"
    "                        SETUSER, no 'reset', no password; for a provider that\n"
    "                        takes the user's rule and password apart (ElastiCache:\n"
    "                        create-user --access-string, the password with\n"
    "                        --passwords)\n"
    "\n"
    "The rule starts with 'reset': it replaces whatever NAME had. Sentinel itself\n"
    "is not covered: a Sentinel with ACLs needs its own user (the URL's\n"
    "sentinel_user and sentinel_password).\n"
    "Exit codes: 0 printed, 2 usage error or an unusable password file.\n";

/* What a client sends itself, and what its scripts call, on the queues'
 * keys. No EVAL, EVAL_RO or FUNCTION LOAD: a node without the library
 * refuses this user's fallback (src/ops/script.c), and the error names 'delayq
 * functions load'. CLUSTER SLOTS and ASKING: the cluster router; ROLE: the
 * check that a node is a master; WAIT: --wait-replicas. */
/* Each line of these lists is a group (clang-format would pack them). */
/* clang-format off */
static const char *const commands_full[] = {
    "ping", "select", "role", "client|id", "cluster|slots", "asking", "wait",
    "fcall", "fcall_ro",
    "blpop", "rpush", "ssubscribe", "sunsubscribe",
    "lrange", /* list's ready pages */
    /* inside the scripts (lua/NAME.lua) */
    "del", "exists", "get", "set", "rename", "type", "time", "spublish",
    "hdel", "hexists", "hget", "hincrby", "hkeys", "hlen", "hmget", "hset",
    "llen", "lpop", "lpush", "zadd", "zcard", "zrange", "zrangebyscore", "zrangestore", "zrem",
    "zremrangebyrank", "zremrangebyscore", "zrevrangebyscore", "lindex", "zscore", "zrank",
    "pttl", "pexpire", /* a holder's key, stretched by extend */
    "lpos", "lrem",    /* a recurring schedule's bucket (lib/80_recurring.lua) */
    "hscan",           /* the previous release's schedules, migrated by pages (lib/85_recurring_v1.lua) */
    "lset",            /* a cancelled item's tombstone in the timing wheel (lib/65_wheel.lua) */
    NULL,
};

/* stats, dead list and dead count (and the library's lookup): no-writes
 * functions (FCALL_RO) and the reads they make. */
static const char *const commands_read[] = {
    "ping", "select", "role", "client|id", "cluster|slots", "asking",
    "fcall_ro", "lrange",
    "type", "time", "hget", "hexists", "hmget", "llen", "zcard", "zrange",
    "zrangebyscore", "zrevrangebyscore", "lindex", "zscore",
    "get", /* a holder's key (lookup, list) */
    "exists", /* stats: whether the queue has keys at all */
    "hkeys", "hlen", /* the recurring schedules (schedules, metrics) */
    NULL,
};
/* clang-format on */

static int user_valid(const char *name) {
    size_t n = strlen(name);
    if (n < 1 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return 0;
    }
    return 1;
}


/* The rule for queues[0..n-1], printed as one line: an ACL SETUSER of
 * user from reset, or (user NULL) the access string alone. */
static int print_rule(const char *user, const char *pw, int read_only, char **queues, int n) {
    dq__buf b = {0};
    int bad = user ? dq__buf_printf(&b, "ACL SETUSER %s reset on", user) : dq__buf_printf(&b, "on");
    if (pw) {
        unsigned char hash[crypto_hash_sha256_BYTES];
        char hex[crypto_hash_sha256_BYTES * 2 + 1];
        crypto_hash_sha256(hash, (const unsigned char *)pw, strlen(pw));
        sodium_bin2hex(hex, sizeof hex, hash, sizeof hash);
        bad |= dq__buf_printf(&b, " #%s", hex);
    }
    /* A queue's own keys, and those of its shards ("QUEUE~TAG": '~' is in
     * no queue name, so the pattern matches no other queue). */
    for (int i = 0; i < n; i++)
        bad |= dq__buf_printf(&b, " %s~dq:{%s}:* %s~dq:{%s~*}:*", read_only ? "%R" : "", queues[i],
                              read_only ? "%R" : "", queues[i]);
    if (!read_only)
        for (int i = 0; i < n; i++)
            bad |= dq__buf_printf(&b, " &dq:{%s}:w &dq:{%s~*}:w", queues[i], queues[i]);
    bad |= dq__buf_printf(&b, " -@all");
    for (const char *const *c = read_only ? commands_read : commands_full; *c; c++)
        bad |= dq__buf_printf(&b, " +%s", *c);
    /* The registry of queue names: offers add to it, serve lists it. A
     * selector of its own, so that no command the root grants (SET, DEL
     * for the scripts) reaches it. */
    bad |=
        dq__buf_printf(&b, read_only ? " (%%R~dq:queues +smembers)" : " (~dq:queues +sadd +smembers)");
    bad |= dq__buf_append(&b, "\n", 1);
    int rc = bad ? (cli_err("acl: out of memory"), CLI_FAIL) : cli_write_out(b.data, b.len);
    dq__buf_release(&b);
    return rc ? CLI_FAIL : CLI_OK;
}

int cli_cmd_acl(cli_env *env, int argc, char **argv) {
    static const char *const names[] = {"QUEUE"};
    const char *user = NULL, *pwfile = NULL;
    int read_only = 0, access = 0, npos;
    const cli_opt opts[] = {{"user", &user, NULL},
                            {"password-file", &pwfile, NULL},
                            {"read-only", NULL, &read_only},
                            {"access-string", NULL, &access},
                            {NULL, NULL, NULL}};
    char pw[512];

    int rc = cli_parse(env, "acl", argc, argv, opts, &npos);
    if (rc == CLI_HELP) return CLI_HELP;
    if (!rc) rc = cli_want_args("acl", npos, 1, -1, names, argv);
    for (int i = 0; !rc && i < npos; i++) rc = cli_check_queue(argv[i]);
    if (!rc && access && (user || pwfile)) {
        cli_err("acl: --access-string prints the rule alone: the provider takes the user "
                "name and the password apart (no --user, no --password-file)");
        rc = CLI_USAGE;
    }
    if (!rc && access) return print_rule(NULL, NULL, read_only, argv, npos);
    if (!rc && !user) {
        cli_err("acl: missing --user NAME (see 'delayq acl --help')");
        rc = CLI_USAGE;
    }
    if (!rc && !user_valid(user)) {
        cli_err("acl: invalid user name '%s': expected 1 to 64 of A-Z a-z 0-9 _ . -", cli_quote(user));
        rc = CLI_USAGE;
    }
    if (!rc && sodium_init() < 0) {
        cli_err("acl: libsodium could not start");
        rc = CLI_FAIL;
    }
    if (!rc && pwfile) rc = cli_read_secret("acl", "password", pwfile, pw, sizeof pw);
    if (rc) return rc;
    if (!pwfile)
        cli_err("acl: no --password-file: user %s gets no password and cannot log in until "
                "one is set (ACL SETUSER %s >PASSWORD)",
                user, user);
    rc = print_rule(user, pwfile ? pw : NULL, read_only, argv, npos);
    sodium_memzero(pw, sizeof pw);
    return rc;
}
