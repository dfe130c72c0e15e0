/*
 * shardnames.c - dq__shard_name (src/util/shard.c) as a command, for
 * tests/cli/shards/shard_placement.py to place on a real cluster.
 *
 *   shardnames QUEUE N    prints the names of QUEUE's N shards, one a line
 *
 * Exits 0, or 2 with a message on stderr for arguments it refuses.
 */
#include <stdio.h>
#include <stdlib.h>

#include "util.h"

int main(int argc, char **argv) {
    char name[DQ__SHARD_NAME_MAX + 1];
    char *end;
    unsigned long n;

    if (argc != 3 || !dq__queue_valid(argv[1])) {
        fprintf(stderr, "usage: shardnames QUEUE N\n");
        return 2;
    }
    n = strtoul(argv[2], &end, 10);
    if (*end != '\0' || n < 1 || n > DQ__SHARDS_MAX) {
        fprintf(stderr, "shardnames: N must be 1..%d\n", DQ__SHARDS_MAX);
        return 2;
    }
    for (unsigned i = 0; i < n; i++) {
        if (dq__shard_name(argv[1], i, (unsigned)n, name, sizeof name) != 0) {
            fprintf(stderr, "shardnames: no name for shard %u\n", i);
            return 2;
        }
        printf("%s\n", name);
    }
    return 0;
}
