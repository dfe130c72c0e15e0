/*
 * refs.c - dqbench's references, measured in the same run on the same
 * server: redis-benchmark runs, the design references (a minimal mover,
 * LPOP drains, Redisson's scripts) and the machine factor.
 */
#include "bench.h"

/* Runs redis-benchmark; returns requests per second (and Redis CPU per
 * request in *cpu_us). */
double redis_benchmark(int64_t n, int c, int p, const char *args, double *cpu_us, double *client_us) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s -h 127.0.0.1 -p %d -n %" PRId64 " -c %d -P %d -r 1000000000 --csv %s 2>&1", G.rbench,
             G.port, n, c, p, args);
    snap a, b;
    take_snap(&a);
    double c0 = cpu_of(RUSAGE_CHILDREN);
    FILE *f = popen(cmd, "r");
    if (!f) die("popen %s: %s", cmd, strerror(errno));
    char line[2048], last[2048] = "";
    while (fgets(line, sizeof line, f))
        if (line[0] == '"' && strncmp(line, "\"test\"", 6) != 0) snprintf(last, sizeof last, "%s", line);
    int rc = pclose(f);
    take_snap(&b);
    if (client_us) *client_us = (cpu_of(RUSAGE_CHILDREN) - c0) * 1e6 / (double)n;
    /* "CMD","rps",... */
    const char *q = strstr(last, "\",\"");
    if (rc != 0 || !q) die("redis-benchmark failed (%s): %s", cmd, last);
    double rps = atof(q + 3);
    if (cpu_us) *cpu_us = d_cpu_us(&a, &b) / (double)n;
    return rps;
}

/* ------------------------------------------------------------ design references */

/* The floor of any Lua script that moves due members from a zset to a list:
 * ZRANGEBYSCORE 100 + ZREM + RPUSH of the members themselves (no payload
 * look-up), up to 1000 a call like the default transfer_batch. */
static const char MOVER_LUA[] =
    "local moved = 0\n"
    "while moved < 1000 do\n"
    "  local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)\n"
    "  if #items == 0 then break end\n"
    "  redis.call('ZREM', KEYS[1], unpack(items))\n"
    "  redis.call('RPUSH', KEYS[2], unpack(items))\n"
    "  moved = moved + #items\n"
    "end\n"
    "return moved\n";

static void random_id(char id[23]) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (int j = 0; j < 22; j++) id[j] = b64[rnd() % 64];
    id[22] = '\0';
}

static void drain_replies(int k) {
    for (int j = 0; j < k; j++) {
        redisReply *r;
        if (redisGetReply(ctl, (void **)&r) != REDIS_OK) die("redis: %s", ctl->errstr);
        if (r->type == REDIS_REPLY_ERROR) die("redis: %s", r->str);
        freeReplyObject(r);
    }
}

/* Items/s of MOVER_LUA over n due members (22-char ids); *cpu_item gets
 * the Redis CPU per item moved. */
double mover_reference(int64_t n, double *cpu_item) {
    flushall();
    int64_t now = server_ms();
    char id[23];
    for (int64_t i = 0; i < n;) {
        int k = 0;
        for (; k < 1000 && i < n; k++, i++) {
            random_id(id);
            redisAppendCommand(ctl, "ZADD mover:z %.0f %s",
                               (double)(now - 2000 + (int64_t)(rnd() % 1000)) * 2048, id);
        }
        drain_replies(k);
    }
    redisReply *r = rcmd(ctl, "SCRIPT LOAD %s", MOVER_LUA);
    char sha[41];
    snprintf(sha, sizeof sha, "%s", r->str);
    freeReplyObject(r);
    snap a, b;
    take_snap(&a);
    double t0 = mono();
    int64_t moved = 0;
    for (;;) {
        long long m = rint_cmd("EVALSHA %s 2 mover:z mover:l +inf", sha);
        if (m == 0) break;
        moved += m;
    }
    double t = mono() - t0;
    take_snap(&b);
    flushall();
    *cpu_item = d_cpu_us(&a, &b) / (double)(moved ? moved : 1);
    return (double)moved / t;
}

/* redis-benchmark's own LPUSH then LPOP tests on one list ("mylist"):
 * returns LPOP's requests/s at -c clients, one pop per round trip. */
double lpop_reference(int64_t n, int clients) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "%s -h 127.0.0.1 -p %d -n %" PRId64 " -c %d -P 1 -d 71 -t lpush,lpop --csv 2>&1", G.rbench,
             G.port, n, clients);
    flushall();
    FILE *f = popen(cmd, "r");
    if (!f) die("popen %s: %s", cmd, strerror(errno));
    char line[1024];
    double rps = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "\"LPOP\",\"", 8) == 0) rps = atof(line + 8);
    if (pclose(f) != 0 || rps <= 0) die("redis-benchmark LPOP reference failed (%s)", cmd);
    flushall();
    return rps;
}

/* Redisson's RDelayedQueue scripts (redisson/redisson,
 * RedissonDelayedQueue.java: offerAsync and the QueueTransferTask's
 * pushTaskAsync), verbatim apart from the Java string concatenation. */
static const char RS_OFFER[] =
    "local value = struct.pack('Bc0Lc0', string.len(ARGV[2]), ARGV[2], string.len(ARGV[3]), ARGV[3]);"
    "redis.call('zadd', KEYS[2], ARGV[1], value);"
    "redis.call('rpush', KEYS[3], value);"
    "local v = redis.call('zrange', KEYS[2], 0, 0); "
    "if v[1] == value then "
    "redis.call('publish', KEYS[4], ARGV[1]); "
    "end;";
static const char RS_TRANSFER[] =
    "local expiredValues = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1], 'limit', 0, ARGV[2]); "
    "if #expiredValues > 0 then "
    "for i, v in ipairs(expiredValues) do "
    "local randomId, value = struct.unpack('Bc0Lc0', v);"
    "redis.call('rpush', KEYS[1], value);"
    "redis.call('lrem', KEYS[3], 1, v);"
    "end; "
    "redis.call('zrem', KEYS[2], unpack(expiredValues));"
    "end; "
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); "
    "if v[1] ~= nil then "
    "return v[2]; "
    "end "
    "return nil;";

/* Redis script time (s, commandstats EVALSHA usec) Redisson's transfer
 * spends to move n items that share one due time. */
double redisson_move(int64_t n) {
    flushall();
    redisReply *r = rcmd(ctl, "SCRIPT LOAD %s", RS_OFFER);
    char offer_sha[41], tr_sha[41];
    snprintf(offer_sha, sizeof offer_sha, "%s", r->str);
    freeReplyObject(r);
    r = rcmd(ctl, "SCRIPT LOAD %s", RS_TRANSFER);
    snprintf(tr_sha, sizeof tr_sha, "%s", r->str);
    freeReplyObject(r);
    const long long due = 1700000000000LL;
    unsigned char rid[8];
    char payload[PAYLOAD_LEN];
    for (int64_t i = 0; i < n;) {
        int k = 0;
        for (; k < 1000 && i < n; k++, i++) {
            uint64_t x = rnd();
            memcpy(rid, &x, sizeof rid);
            make_payload(payload, (uint64_t)i);
            redisAppendCommand(ctl, "EVALSHA %s 4 rs rs:timeout rs:queue rs:channel %lld %b %b",
                               offer_sha, due, rid, sizeof rid, payload, (size_t)PAYLOAD_LEN);
        }
        drain_replies(k);
    }
    snap a, b;
    take_snap(&a);
    double until = mono() + 120;
    while (rint_cmd("ZCARD rs:timeout") > 0 && mono() < until) {
        r = rcmd(ctl, "EVALSHA %s 3 rs rs:timeout rs:queue %lld 100", tr_sha, due);
        freeReplyObject(r);
    }
    take_snap(&b);
    long long left = rint_cmd("ZCARD rs:timeout"), moved = rint_cmd("LLEN rs");
    flushall();
    if (left != 0 || moved != n)
        die("Redisson reference: moved %lld of %" PRId64 ", %lld left", moved, n, left);
    return d_usec(&a, &b, "evalsha") / 1e6;
}

/* ------------------------------------------------------------ the machine factor */

/* The machine factor (see BRIEF_EVALSHA_RATE), from a frozen stand-in for
 * the offer script the brief's figure was taken with: the same five calls
 * (TIME, TYPE, ZREVRANGEBYSCORE, HSET, ZADD) in the same order, so later
 * changes to lua/offer.lua do not move the factor. */
static const char CALIB_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "if redis.call('TYPE', KEYS[2])['ok'] ~= 'none' then return redis.error_reply('ERR type') end\n"
    "local due = now + tonumber(ARGV[5])\n"
    "local prev = redis.call('ZREVRANGEBYSCORE', KEYS[1], due * 2048 + 2047, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)\n"
    "local score = due * 2048\n"
    "if prev[2] and tonumber(prev[2]) >= score then score = math.min(tonumber(prev[2]) + 1, score + 2047) end\n"
    "redis.call('HSET', ARGV[1] .. string.format('%.0f', (math.floor(score / 2048) + score % 2048) % 8192), ARGV[3], '1' .. ARGV[4])\n"
    "redis.call('ZADD', KEYS[1], score, ARGV[3])\n"
    "return {1, due, now}\n";

double machine_factor(void) {
    if (factor > 0) return factor;
    redisReply *r = rcmd(ctl, "SCRIPT LOAD %s", CALIB_LUA);
    char args[512];
    snprintf(args, sizeof args,
             "EVALSHA %s 2 'dq:{cal}:z' 'dq:{cal}:r' 'dq:{cal}:p:' 'dq:{cal}:w' aaaaaaaaaa__rand_int__ "
             "0123456789abcdef %d",
             r->str, 3600000 /* ms, as figure 1 offers */);
    freeReplyObject(r);
    flushall();
    double best = 0;
    for (int i = 0; i < 2; i++) { /* best of 2, never scaled */
        best = max2(best, redis_benchmark(100000, 1, 64, args, NULL, NULL));
        flushall();
    }
    factor = best / BRIEF_EVALSHA_RATE;
    out("   machine factor %.2f: %.0f calls/s of a frozen 5-call stand-in for the brief's offer script\n"
        "   (TIME, TYPE, ZREVRANGEBYSCORE, HSET, ZADD; redis-benchmark -P64 -c1) / the brief's 130k/s.\n"
        "   Targets in absolute units are also judged scaled by it (summary column 'normalized').\n",
        factor, best);
    return factor;
}
