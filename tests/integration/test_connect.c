/*
 * test_connect.c - connecting as an ACL user to another database, with a
 * password given apart from the URL (dq_options.password), surviving a
 * flushed script cache, and delays of years: the parts of the contract the
 * other integration tests do not reach.
 */
#include "dqtest.h"

static dq_client *connect_url(const char *url, int *rc) {
    dq_client *c = dq_client_new(NULL, NULL);
    assert_non_null(c);
    *rc = dq_connect(c, url);
    return c;
}

/* Counts a key in database db, with a connection of our own. */
static long long exists_in_db(int db, const char *key) {
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", dqt_port(), (struct timeval){5, 0});
    assert_true(rc && !rc->err);
    redisReply *r = redisCommand(rc, "SELECT %d", db);
    freeReplyObject(r);
    r = redisCommand(rc, "EXISTS %s", key);
    assert_non_null(r);
    long long n = r->integer;
    freeReplyObject(r);
    redisFree(rc);
    return n;
}

static void test_acl_user_and_db(void **state) {
    (void)state;
    char q[64], url[256];
    dqt_queue(q, sizeof q, "acl");
    freeReplyObject(dqt_redis("ACL SETUSER dqtest on >s3cr@t:pw ~* &* +@all"));
    freeReplyObject(dqt_redis("ACL SETUSER dqlimited on >pw ~other:* +@all"));

    /* The password holds '@' and ':'; the user part ends at the last '@'. */
    snprintf(url, sizeof url, "redis://dqtest:s3cr%%40t%%3Apw@127.0.0.1:%d/2", dqt_port());
    int rc;
    dq_client *c = connect_url(url, &rc);
    DQT_EXPECT(c, rc, 0);
    dq_item it = {.id = "a1", .payload = "x", .payload_len = 1, .delay_ms = 60000};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    char key[128];
    snprintf(key, sizeof key, "dq:{%s}:zs", q);
    assert_int_equal(exists_in_db(2, key), 1); /* in db 2 ... */
    assert_int_equal(exists_in_db(0, key), 0); /* ... not in db 0 */
    dq_client_free(c);

    /* A wrong password: DQ_EAUTH, and the message never shows it. */
    snprintf(url, sizeof url, "redis://dqtest:wrong-secret@127.0.0.1:%d", dqt_port());
    c = connect_url(url, &rc);
    DQT_EXPECT(c, rc, DQ_EAUTH);
    assert_non_null(strstr(dq_client_errstr(c), "WRONGPASS"));
    assert_null(strstr(dq_client_errstr(c), "wrong-secret"));
    dq_client_free(c);

    /* A user without access to the queue's keys: a clear refusal. */
    snprintf(url, sizeof url, "redis://dqlimited:pw@127.0.0.1:%d", dqt_port());
    c = connect_url(url, &rc);
    DQT_EXPECT(c, rc, 0);
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), DQ_EAUTH);
    assert_non_null(strstr(dq_client_errstr(c), "NOPERM"));
    dq_client_free(c);

    freeReplyObject(dqt_redis("ACL DELUSER dqtest dqlimited"));
}

/* SCRIPT FLUSH (or a failover) empties the script cache under a connected
 * client: calls go on, with EVAL reloading each script. */
static void test_script_cache_flushed(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "noscript");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    dq_item it = {.id = "n1", .payload = "x", .payload_len = 1};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    freeReplyObject(dqt_redis("SCRIPT FLUSH"));
    dq_item it2 = {.id = "n2", .payload = "y", .payload_len = 1, .delay_ms = 50};
    DQT_EXPECT(c, dq_offer(c, q, &it2, NULL), 0); /* offer.lua: NOSCRIPT, then EVAL */
    dq_msg *m = NULL;
    DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1); /* take.lua */
    assert_string_equal(m->id, "n1");
    dq_msg_free(m);
    DQT_EXPECT(c, dq_take(c, q, 3000, &m), 1); /* transfer.lua ran too */
    assert_string_equal(m->id, "n2");
    dq_msg_free(m);
    dq_client_free(c);
}

/* Delays of years: accepted, due exactly then by the server clock, never
 * moved early; beyond year 2109 refused. */
static void test_delays_of_years(void **state) {
    (void)state;
    char q[64];
    dqt_queue(q, sizeof q, "years");
    dq_client *c = dqt_client(NULL);
    DQT_EXPECT(c, dq_schedule(c, q), 0);
    const int64_t three_years = 3LL * 365 * 24 * 3600 * 1000;
    int64_t before = dqt_server_ms();
    dq_item it = {.id = "y1", .payload = "x", .payload_len = 1, .delay_ms = three_years};
    dq_offer_result res;
    DQT_EXPECT(c, dq_offer(c, q, &it, &res), 0);
    int64_t after = dqt_server_ms();
    assert_true(res.due_ms >= before + three_years && res.due_ms <= after + three_years);

    dq_item_info info;
    DQT_EXPECT(c, dq_lookup(c, q, "y1", &info), 0);
    assert_int_equal(info.state, DQ_STATE_PENDING);
    assert_int_equal(info.due_ms, res.due_ms); /* exact: no precision lost */
    dqt_run_for(c, 0.3);
    dq_stats st;
    DQT_EXPECT(c, dq_get_stats(c, q, &st), 0);
    assert_int_equal(st.pending, 1);
    assert_int_equal(st.ready, 0);
    assert_true(st.next_due_in_ms > three_years - 5000);

    dq_item late = {.id = "y2", .payload = "x", .payload_len = 1, .due_ms = DQ_DUE_MAX_MS + 1};
    DQT_EXPECT(c, dq_offer(c, q, &late, NULL), DQ_EINVAL);
    dq_item edge = {.id = "y3", .payload = "x", .payload_len = 1, .delay_ms = DQ_DUE_MAX_MS};
    DQT_EXPECT(c, dq_offer(c, q, &edge, NULL), DQ_EREDIS); /* now + delay is past the end */
    dq_item ok = {.id = "y4", .payload = "x", .payload_len = 1, .due_ms = DQ_DUE_MAX_MS};
    DQT_EXPECT(c, dq_offer(c, q, &ok, &res), 0);
    assert_int_equal(res.due_ms, DQ_DUE_MAX_MS);
    DQT_EXPECT(c, dq_lookup(c, q, "y4", &info), 0);
    assert_int_equal(info.due_ms, DQ_DUE_MAX_MS);
    dq_client_free(c);
}

/* dq_options.password and sentinel_password: a password kept out of the
 * URL, copied by dq_connect (the caller's buffer wiped right after), used
 * again on reconnects; refused when empty, too long or for the wrong URL. */
static void test_password_option(void **state) {
    (void)state;
    char q[64], url[256], pw[300];
    dqt_queue(q, sizeof q, "pwopt");
    freeReplyObject(dqt_redis("ACL SETUSER dqpwopt on >r@w#pw:/x ~* &* +@all"));

    dq_options o;
    dq_options_init(&o);
    snprintf(pw, sizeof pw, "r@w#pw:/x"); /* raw: no URL could carry it so */
    o.password = pw;
    dq_client *c = dq_client_new(NULL, &o);
    assert_non_null(c);
    snprintf(url, sizeof url, "redis://dqpwopt:wrong@127.0.0.1:%d", dqt_port());
    int rc = dq_connect(c, url);
    memset(pw, 0, sizeof pw);
    DQT_EXPECT(c, rc, 0);
    dq_item it = {.id = "p1", .payload = "x", .payload_len = 1, .delay_ms = 60000};
    DQT_EXPECT(c, dq_offer(c, q, &it, NULL), 0);
    /* Cut off: the client logs in again with its own copy. */
    redisReply *killed = dqt_redis("CLIENT KILL USER dqpwopt");
    assert_true(killed && killed->type == REDIS_REPLY_INTEGER && killed->integer >= 1);
    freeReplyObject(killed);
    it.id = "p2";
    for (int i = 0; i < 100 && (rc = dq_offer(c, q, &it, NULL)) != 0; i++) usleep(30000);
    DQT_EXPECT(c, rc, 0);
    dq_client_free(c);

    static const struct {
        int len;
        const char *sentinel, *why;
    } bad[] = {
        {0, NULL, "the password is empty"},
        {256, NULL, "the password is longer than 255 bytes"},
        {-1, "s", "a sentinel password is given, but the URL is not redis-sentinel://"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dq_options_init(&o);
        memset(pw, 'p', sizeof pw);
        pw[bad[i].len < 0 ? 8 : bad[i].len] = '\0';
        o.password = pw;
        o.sentinel_password = bad[i].sentinel;
        c = dq_client_new(NULL, &o);
        assert_non_null(c);
        DQT_EXPECT(c, dq_connect(c, url), DQ_EINVAL);
        assert_string_equal(dq_client_errstr(c), bad[i].why);
        dq_client_free(c);
    }
    freeReplyObject(dqt_redis("ACL DELUSER dqpwopt"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acl_user_and_db),
        cmocka_unit_test(test_script_cache_flushed),
        cmocka_unit_test(test_delays_of_years),
        cmocka_unit_test(test_password_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
