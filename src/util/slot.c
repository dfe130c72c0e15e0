/*
 * slot.c - the Redis Cluster slot of a key.
 *
 * Owns dq__key_slot: which of the 16384 slots a key lives in, computed
 * exactly as a cluster node does (the Redis Cluster specification, "Keys
 * distribution model"), so the client can send each command to the node
 * that serves its keys. A queue's keys all carry the hash tag "{queue}",
 * which is what puts them in one slot and lets one script touch them all:
 * dq__queue_slot, that slot, which every operation routes by, is here too.
 */
#include <string.h>

#include "util.h"

/* CRC16-CCITT in its XMODEM variant (polynomial 0x1021, initial value 0,
 * no reflection, no final xor): the checksum Redis Cluster hashes keys with.
 * Bitwise rather than from a 256-entry table: keys are a few dozen bytes and
 * a slot is computed once per command, so the eight shifts per byte cost
 * less than a table would in cache, and there is no table to get wrong. */
static unsigned crc16_xmodem(const unsigned char *p, size_t len) {
    unsigned crc = 0;
    size_t i;
    int bit;
    for (i = 0; i < len; i++) {
        crc ^= (unsigned)p[i] << 8;
        for (bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

unsigned dq__key_slot(const char *key, size_t len) {
    const unsigned char *k = (const unsigned char *)key;
    size_t open, close;

    /* The hash tag: from the first '{' to the first '}' after it. Only a
     * non-empty tag counts; "{}" or a '{' never closed means the whole key
     * is hashed, as the cluster does. */
    for (open = 0; open < len && k[open] != '{'; open++)
        ;
    if (open < len) {
        for (close = open + 1; close < len && k[close] != '}'; close++)
            ;
        if (close < len && close > open + 1)
            return crc16_xmodem(k + open + 1, close - open - 1) & (DQ__SLOTS - 1);
    }
    return crc16_xmodem(k, len) & (DQ__SLOTS - 1);
}

/* The queue name is the hash tag of every key of the queue (dq:{queue}:...),
 * and a valid name holds no brace, so the name hashed whole is the tag. */
unsigned dq__queue_slot(const char *queue) { return dq__key_slot(queue, strlen(queue)); }
