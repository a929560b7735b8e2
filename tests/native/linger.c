/* A process that is recorded and then ends during the window, for the `record` tests.
 *
 * Usage: linger STATUS_FILE SECONDS. Run under the mbrecord shim, unarmed: it waits for
 * STATUS_FILE (the shim's CONTROL.status) to say "recording", i.e. for `mallocbench
 * record` to arm it, then makes and frees a few blocks every millisecond for SECONDS and
 * exits (or is killed meanwhile by the test). It prints "armed" once recorded, so the
 * test knows when the window has begun.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim_status.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: linger STATUS_FILE SECONDS\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    for (int i = 0; i < 3000 && !recording(argv[1]); i++)
        usleep(10000);
    if (!recording(argv[1])) {
        fprintf(stderr, "linger: the shim never said it was recording\n");
        return 1;
    }
    printf("armed\n");
    fflush(stdout);
    void *keep[64] = {0};
    double end = now() + seconds;
    for (unsigned n = 0; now() < end; n++) {
        unsigned i = n % 64;
        free(keep[i]);
        keep[i] = malloc(32 + (n * 37) % 2000);
        if (keep[i] != NULL)
            memset(keep[i], 1, 16);
        if (n % 16 == 0)
            usleep(1000);
    }
    for (unsigned i = 0; i < 64; i++)
        free(keep[i]);
    return 0;
}
