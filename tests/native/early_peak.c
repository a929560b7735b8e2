/* A program whose heap peaks at the start of its window and stays low after, for the
 * steady-peak test: it arms the mbrecord shim through the control file (argv[1]),
 * writing the trace to argv[2], makes and touches 32 MiB in large blocks (each its own
 * mapping under glibc, returned at its free), frees them, then for 0.4 s keeps about
 * 1 MiB of small blocks churning. A replay's peak over its whole is the start's; over
 * its second half, the churn's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim_control.h"

#define BIG 128
#define BIG_SIZE (256 * 1024)
#define SMALL 1024

static void pause_ms(long ms)
{
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: early_peak CONTROL TRACE\n");
        return 2;
    }
    char status[600];
    static void *big[BIG], *small[SMALL];
    arm("early_peak", argv[1], argv[2], status, sizeof status);
    for (int i = 0; i < BIG; i++) {
        big[i] = malloc(BIG_SIZE);
        if (big[i] != NULL)
            memset(big[i], 1, BIG_SIZE);
    }
    pause_ms(50);
    for (int i = 0; i < BIG; i++)
        free(big[i]);
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < SMALL; i++) {
            free(small[i]);
            small[i] = malloc(512 + (size_t)(i % 512));
            if (small[i] != NULL)
                memset(small[i], 2, 16);
        }
        pause_ms(10);
    }
    for (int i = 0; i < SMALL; i++)
        free(small[i]);
    disarm("early_peak", argv[1], status);
    printf("{}\n");
    return 0;
}
