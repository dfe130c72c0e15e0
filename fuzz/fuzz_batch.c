/*
 * fuzz_batch.c - libFuzzer target: `delayq offer --batch` input, read
 * through the CLI's own batch reader (cli_batch_open on an in-memory file,
 * then cli_batch_next until the end or the first bad line). Every item it
 * hands out has a valid id (or none) and a payload within the limit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("batch", 0);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    lseek(fd, 0, SEEK_SET);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    cli_batch b;
    if (cli_batch_open(path, 0, &b) == 0) {
        for (int chunk = 0; chunk < 1000 && cli_batch_next(&b) == 0 && b.n > 0; chunk++) {
            for (size_t i = 0; i < b.n; i++) {
                const dq_item *it = &b.items[i];
                if (it->id && !dq__id_valid(it->id)) abort();
                if (it->payload_len > DQ_PAYLOAD_DEFAULT_MAX) abort();
            }
        }
        cli_batch_close(&b);
    }
    close(fd);
    return 0;
}
