/*
 * fig_mem.c - dqbench, figure 3, memory per pending item, and figure 4 at 1,000,000 pending.
 */
#include "bench.h"

static void mem_reference(int64_t n) {
    /* A plain zset + one hash: ZADD z <score> <22-char id>, HSET h <id> <"1"+16 bytes>. */
    flushall();
    double m0 = info_num("memory", "used_memory");
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char id[23], payload[PAYLOAD_LEN + 1];
    double t0 = mono(), next = t0 + 2;
    for (int64_t i = 0; i < n;) {
        int k = 0;
        for (; k < 1000 && i < n; k++, i++) {
            for (int j = 0; j < 22; j++) id[j] = b64[rnd() % 64];
            id[22] = '\0';
            payload[0] = '1';
            make_payload(payload + 1, (uint64_t)i);
            double score = (double)(1700000000000LL + (int64_t)(rnd() % 86400000)) * 2048;
            redisAppendCommand(ctl, "ZADD memref:z %.0f %s", score, id);
            redisAppendCommand(ctl, "HSET memref:h %s %b", id, payload, (size_t)(PAYLOAD_LEN + 1));
        }
        for (int j = 0; j < 2 * k; j++) {
            redisReply *r;
            if (redisGetReply(ctl, (void **)&r) != REDIS_OK) die("redis: %s", ctl->errstr);
            freeReplyObject(r);
        }
        if (mono() > next) {
            next += 2;
            progress("memory reference: %" PRId64 " of %" PRId64, i, n);
        }
    }
    double m1 = info_num("memory", "used_memory");
    out("   reference (plain zset + one hash, 22-char ids, '1'+16-byte values): %.1f bytes per item\n",
        (m1 - m0) / (double)n);
    flushall();
    char ours[32];
    snprintf(ours, sizeof ours, "%.1f B", (m1 - m0) / (double)n);
    add_row("3", "memory reference: plain zset + one hash", ours, "(brief: about 230 B)", "-", "-", -1);
}

/* Keys of one family: how many, their bytes, their encodings, the longest. */
typedef struct key_family {
    long long keys, bytes, listpack, other, largest;
} key_family;

/* Adds every key matching pattern (SCAN, so robust to how many there are)
 * to *f; len_cmd (ZCARD, HLEN) gives a key's length. */
static void scan_family(const char *pattern, const char *len_cmd, key_family *f) {
    char cursor[32] = "0";
    do {
        redisReply *sr = rcmd(ctl, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        snprintf(cursor, sizeof cursor, "%s", sr->element[0]->str);
        redisReply *keys = sr->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            redisAppendCommand(ctl, "OBJECT ENCODING %s", keys->element[i]->str);
            redisAppendCommand(ctl, "MEMORY USAGE %s SAMPLES 0", keys->element[i]->str);
            redisAppendCommand(ctl, "%s %s", len_cmd, keys->element[i]->str);
        }
        for (size_t i = 0; i < keys->elements; i++) {
            redisReply *r[3];
            for (int k = 0; k < 3; k++)
                if (redisGetReply(ctl, (void **)&r[k]) != REDIS_OK) die("redis: %s", ctl->errstr);
            f->keys++;
            if (r[0]->type == REDIS_REPLY_STRING || r[0]->type == REDIS_REPLY_STATUS) {
                if (strcmp(r[0]->str, "listpack") == 0) f->listpack++;
                else f->other++;
            }
            if (r[1]->type == REDIS_REPLY_INTEGER) f->bytes += r[1]->integer;
            if (r[2]->type == REDIS_REPLY_INTEGER && r[2]->integer > f->largest)
                f->largest = r[2]->integer;
            for (int k = 0; k < 3; k++) freeReplyObject(r[k]);
        }
        freeReplyObject(sr);
    } while (strcmp(cursor, "0") != 0);
}

void phase_mem(void) {
    int64_t n = scaled(1000000);
    out("\n== Figure 3: Redis memory per pending item%s\n", scaled_tag());
    out("   %" PRId64 " real offers (default ids, 16-byte payloads, delays 1-2 days), INFO used_memory\n"
        "   delta / N, from an empty database.\n",
        n);
    mem_reference(n);
    flushall();
    double m0 = info_num("memory", "used_memory");
    fill_spec fs = {86400000, 86400000, 0, 0};
    double t = fill(LAT_Q, n, &fs, 512, "fill 1M far-future");
    rdo("SLOWLOG RESET"); /* the calls over 1 ms it logged, arguments and all */
    double m1 = info_num("memory", "used_memory");
    double per = (m1 - m0) / (double)n;
    /* Breakdown by key family (lua/lib/00_base.lua): the slot index, the slots,
     * the id index buckets. */
    key_family idx = {0}, slots = {0}, ids = {0};
    char pattern[160];
    snprintf(pattern, sizeof pattern, "dq:{%s}:zs", LAT_Q);
    scan_family(pattern, "ZCARD", &idx);
    snprintf(pattern, sizeof pattern, "dq:{%s}:q:*", LAT_Q);
    scan_family(pattern, "ZCARD", &slots);
    snprintf(pattern, sizeof pattern, "dq:{%s}:i:*", LAT_Q);
    scan_family(pattern, "HLEN", &ids);
    out("   filled in %.1f s (%.0f offers/s, dq_offer_async, 512 in flight)\n", t, (double)n / t);
    out("   ours: %.1f bytes per pending item (target <= 160; BullMQ 326 with empty payloads)\n", per);
    out("   breakdown (MEMORY USAGE, per item): slot index %.1f B, slots %.1f B, id index %.1f B\n",
        (double)idx.bytes / (double)n, (double)slots.bytes / (double)n, (double)ids.bytes / (double)n);
    out("   %lld slots (%lld listpack, %lld other), %.1f records each on average, largest %lld;\n"
        "   %lld id index buckets (%lld listpack, %lld other), largest %lld ids\n",
        slots.keys, slots.listpack, slots.other, slots.keys ? (double)n / (double)slots.keys : 0.0,
        slots.largest, ids.keys, ids.listpack, ids.other, ids.largest);
    char ours[32], ref[44];
    snprintf(ours, sizeof ours, "%.1f B", per);
    snprintf(ref, sizeof ref, "slots %.0f + ids %.0f B", (double)slots.bytes / (double)n,
             (double)ids.bytes / (double)n);
    add_row("3", "memory per pending item (1M, 16-byte payload)", ours, ref, "-", "<= 160 B",
            per <= 160);

    out("\n== Figure 4 at %" PRId64 " pending: end-to-end lateness%s\n", n, scaled_tag());
    lat_res r1, r4;
    char label[96];
    snprintf(label, sizeof label, "%" PRId64 " pending, 1 consumer", n);
    lateness_run(LAT_Q, 1, LAT_RATE, lat_secs(), LAT_MAX_DELAY, label, &r1);
    snprintf(label, sizeof label, "%" PRId64 " pending, 4 consumers", n);
    lateness_run(LAT_Q, 4, LAT_RATE, lat_secs(), LAT_MAX_DELAY, label, &r4);
    lateness_rows("1M", 1, &r1);
    lateness_rows("1M", 4, &r4);
    flushall();
}
