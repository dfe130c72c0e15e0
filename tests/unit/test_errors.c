/*
 * test_errors.c - unit tests of how delayq reads Redis's error replies
 * (src/util/errors.c): one table of the texts Redis 7.0 and Valkey 8 answer for
 * each class, taken from each server's sources (Valkey rewrote NOSCRIPT's,
 * LOADING's, BUSY's, MISCONF's and the ACL refusals' prose), each of which
 * must land in its class; the near misses that must not (a code word
 * only as a prefix, in the prose, in lower case); which classes persist;
 * and which ACL refusals are of a key.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "internal.h"

typedef struct sample {
    const char *server; /* whose text it is */
    const char *text;   /* the reply, as hiredis hands it over (no '-') */
    enum dq__errclass class;
} sample;

static const sample table[] = {
    {"redis 7.0", "NOSCRIPT No matching script. Please use EVAL.", DQ__ERR_NOSCRIPT},
    {"valkey 8", "NOSCRIPT No matching script.", DQ__ERR_NOSCRIPT},
    {"redis 7.0", "ERR Function not found", DQ__ERR_NOFUNCTION},
    {"valkey 8", "ERR Function not found", DQ__ERR_NOFUNCTION},
    {"redis 7.0", "MOVED 3999 127.0.0.1:6381", DQ__ERR_MOVED},
    {"valkey 8", "MOVED 3999 node-2.example.com:6379", DQ__ERR_MOVED},
    {"redis 7.0", "ASK 3999 127.0.0.1:6381", DQ__ERR_ASK},
    {"valkey 8", "ASK 3999 node-2.example.com:6379", DQ__ERR_ASK},
    {"redis 7.0", "TRYAGAIN Multiple keys request during rehashing of slot", DQ__ERR_TRYAGAIN},
    {"valkey 8", "TRYAGAIN Multiple keys request during rehashing of slot", DQ__ERR_TRYAGAIN},
    {"redis 7.0", "CLUSTERDOWN Hash slot not served", DQ__ERR_CLUSTERDOWN},
    {"valkey 8", "CLUSTERDOWN The cluster is down and only accepts read commands", DQ__ERR_CLUSTERDOWN},
    {"redis 7.0", "READONLY You can't write against a read only replica.", DQ__ERR_READONLY},
    {"valkey 8", "READONLY Can not run script with write flag on readonly replica", DQ__ERR_READONLY},
    {"redis 7.0", "LOADING Redis is loading the dataset in memory", DQ__ERR_LOADING},
    {"valkey 8", "LOADING Valkey is loading the dataset in memory", DQ__ERR_LOADING},
    {"redis 7.0",
     "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.",
     DQ__ERR_BUSY},
    {"valkey 8",
     "BUSY Valkey is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.",
     DQ__ERR_BUSY},
    {"redis 7.0", "NOREPLICAS Not enough good replicas to write.", DQ__ERR_NOREPLICAS},
    {"valkey 8", "NOREPLICAS Not enough good replicas to write.", DQ__ERR_NOREPLICAS},
    {"redis 7.0",
     "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
     "to disk.",
     DQ__ERR_MISCONF},
    {"valkey 8",
     "MISCONF Valkey is configured to save RDB snapshots, but it's currently unable to persist "
     "to disk.",
     DQ__ERR_MISCONF},
    {"redis 7.0", "OOM command not allowed when used memory > 'maxmemory'.", DQ__ERR_OOM},
    {"valkey 8",
     "OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'",
     DQ__ERR_OOM},
    {"redis 7.0", "NOPERM this user has no permissions to run the 'eval' command or its subcommand",
     DQ__ERR_NOPERM},
    {"valkey 8", "NOPERM User alice has no permissions to run the 'eval' command", DQ__ERR_NOPERM},
    {"redis 7.0", "NOPERM this user has no permissions to access one of the keys used as arguments",
     DQ__ERR_NOPERM},
    {"valkey 8", "NOPERM No permissions to access a key", DQ__ERR_NOPERM},
    {"redis 7.0",
     "ERR The user executing the script can't run this command or subcommand script: "
     "delayq_take, on @user_function:12.",
     DQ__ERR_NOPERM_SCRIPT},
    {"valkey 8",
     "ERR ACL failure in script: User alice has no permissions to run the 'zadd' command script: "
     "delayq_take, on @user_function:12.",
     DQ__ERR_NOPERM_SCRIPT},
    {"redis 7.0", "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
     DQ__ERR_MASTERDOWN},
    {"redis 7.0",
     "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
     DQ__ERR_UNBLOCKED},
    {"redis 7.0", "WRONGTYPE Operation against a key holding the wrong kind of value",
     DQ__ERR_WRONGTYPE},
    {"redis 7.0", "NOAUTH Authentication required.", DQ__ERR_NOAUTH},
    {"valkey 8", "WRONGPASS invalid username-password pair or user is disabled.", DQ__ERR_NOAUTH},
    /* near misses */
    {"-", "ERR OOM in the text is not the code", DQ__ERR_OTHER},
    {"-", "OOMX something", DQ__ERR_OTHER},
    {"-", "BUSYKEY Target key name already exists.", DQ__ERR_OTHER},
    {"-", "ASKING", DQ__ERR_OTHER},
    {"-", "oom lower case", DQ__ERR_OTHER},
    {"-", "ERR Function not", DQ__ERR_OTHER},
    {"-", "ERR delayq: due time beyond the year 9999", DQ__ERR_OTHER},
    {"-", "", DQ__ERR_OTHER},
};

static void test_each_server_text_in_its_class(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        enum dq__errclass got = dq__error_class(table[i].text);
        if (got != table[i].class)
            fail_msg("%s: \"%s\": class %d, want %d", table[i].server, table[i].text, (int)got,
                     (int)table[i].class);
    }
    assert_int_equal(dq__error_class(NULL), DQ__ERR_OTHER);
}

static void test_persisting_classes(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        enum dq__errclass k = table[i].class;
        int want = k == DQ__ERR_OOM || k == DQ__ERR_MISCONF || k == DQ__ERR_NOREPLICAS ||
                   k == DQ__ERR_READONLY || k == DQ__ERR_LOADING || k == DQ__ERR_BUSY;
        if (dq__error_persists(table[i].text) != want)
            fail_msg("persists(\"%s\") != %d", table[i].text, want);
    }
}

static void test_code_word(void **state) {
    (void)state;
    char w[DQ__ERRKIND_MAX];
    dq__error_code("NOREPLICAS Not enough good replicas to write.", w);
    assert_string_equal(w, "NOREPLICAS");
    dq__error_code("BUSY", w);
    assert_string_equal(w, "BUSY");
    dq__error_code("connection lost", w);
    assert_string_equal(w, "");
    dq__error_code("ABCDEFGHIJKLMNOPQRSTUVWXYZ too long", w);
    assert_string_equal(w, "");
    dq__error_code(NULL, w);
    assert_string_equal(w, "");
}

static void test_refusals_of_a_key(void **state) {
    (void)state;
    assert_true(dq__error_names_key(
        "NOPERM this user has no permissions to access one of the keys used as arguments"));
    assert_true(dq__error_names_key("NOPERM No permissions to access a key"));
    assert_true(
        dq__error_names_key("ERR The user executing the script can't access at least one of the keys "
                            "mentioned in the command arguments script: x, on @user_function:1."));
    assert_true(
        dq__error_names_key("ERR ACL failure in script: No permissions to access a key script: x, on "
                            "@user_function:1."));
    assert_false(dq__error_names_key("NOPERM User alice has no permissions to run the 'eval' command"));
    assert_false(dq__error_names_key("NOPERM No permissions to access a channel"));
    assert_false(
        dq__error_names_key("ERR The user executing the script can't publish to the channel mentioned "
                            "in the command"));
    assert_false(dq__error_names_key("ERR access to a key that is not NOPERM"));
    assert_false(dq__error_names_key(NULL));
}

/* The class word after "ERR delayq:" (lua/ writes them), never the prose. */
static void test_refusal_classes(void **state) {
    (void)state;
    static const struct {
        const char *text;
        enum dq_refusal class;
    } rows[] = {
        {"ERR delayq:input due time beyond 253402300799999 ms after the epoch", DQ_REFUSAL_INPUT},
        {"ERR delayq:input backoff_base_ms above backoff_max_ms", DQ_REFUSAL_INPUT},
        {"ERR delayq:state the shard count changes only on an empty queue; dq:{q}:n holds 1 pending",
         DQ_REFUSAL_STATE},
        {"ERR delayq:corrupt counter pending in dq:{q}:n is 'x'", DQ_REFUSAL_CORRUPT},
        {"ERR delayq:proto malformed offer arguments for item 1", DQ_REFUSAL_PROTO},
        /* the prose alone tells nothing */
        {"ERR delayq: due time beyond 253402300799999 ms after the epoch", DQ_REFUSAL_NONE},
        {"ERR delayq: backoff_base_ms above backoff_max_ms", DQ_REFUSAL_NONE},
        /* near misses */
        {"ERR delayq:inputs due time", DQ_REFUSAL_NONE},
        {"ERR delayq:inp due time", DQ_REFUSAL_NONE},
        {"ERR delayq:input", DQ_REFUSAL_NONE},
        {"ERR delayq:INPUT due time", DQ_REFUSAL_NONE},
        {"WRONGTYPE delayq: key dq:{q}:r holds a string, expected a list", DQ_REFUSAL_NONE},
        {"DQSHARDS 4", DQ_REFUSAL_NONE},
        {"OOM command not allowed when used memory > 'maxmemory'.", DQ_REFUSAL_NONE},
        {"offer: ERR delayq:input due time beyond", DQ_REFUSAL_NONE},
        {"", DQ_REFUSAL_NONE},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        enum dq_refusal got = dq__refusal_class(rows[i].text);
        if (got != rows[i].class)
            fail_msg("\"%s\": class %d, want %d", rows[i].text, (int)got, (int)rows[i].class);
    }
    assert_int_equal(dq__refusal_class(NULL), DQ_REFUSAL_NONE);
    assert_int_equal(dq_client_refusal(NULL), DQ_REFUSAL_NONE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_server_text_in_its_class),
        cmocka_unit_test(test_persisting_classes),
        cmocka_unit_test(test_code_word),
        cmocka_unit_test(test_refusals_of_a_key),
        cmocka_unit_test(test_refusal_classes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
