/*
 * keyslot.c - dq__key_slot (src/util/slot.c) as a filter, for tests/cli/scripts/keyslot.py
 * to compare against a real cluster node's CLUSTER KEYSLOT.
 *
 * Reads one key a line on stdin, written in hex (so keys may hold any byte,
 * newlines and NULs included; an empty line is the empty key), and prints
 * its slot in decimal, one a line. Exits 0, or 1 with a message on stderr at
 * the first line that is not hex (a test bug, not a slot to compare).
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int main(void) {
    /* A line of hex holds half as many key bytes; keys here stay short. */
    static char line[65536];
    static char key[sizeof line / 2];
    unsigned long number = 0;

    while (fgets(line, sizeof line, stdin) != NULL) {
        size_t n = strcspn(line, "\r\n"), i;
        number++;
        if (line[n] == '\0' && n == sizeof line - 1) {
            fprintf(stderr, "keyslot: line %lu: longer than %zu bytes\n", number, sizeof line - 2);
            return 1;
        }
        if (n % 2 != 0) {
            fprintf(stderr, "keyslot: line %lu: odd length\n", number);
            return 1;
        }
        for (i = 0; i < n; i += 2) {
            char pair[3] = {line[i], line[i + 1], '\0'};
            if (!isxdigit((unsigned char)pair[0]) || !isxdigit((unsigned char)pair[1])) {
                fprintf(stderr, "keyslot: line %lu: not hex\n", number);
                return 1;
            }
            key[i / 2] = (char)strtol(pair, NULL, 16);
        }
        printf("%u\n", dq__key_slot(key, n / 2));
    }
    return ferror(stdin) ? 1 : 0;
}
