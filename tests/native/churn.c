/* Allocation churn faster than the recording shim's writer can compress it, for the
 * buffer-cap tests: several threads replace random blocks of a ring as fast as they can
 * (malloc, realloc, free; the addresses are reused at once, so an event lost from the
 * middle of a trace shows up in its replay as an implicit or skipped free).
 *
 * Usage: churn STATUS_FILE THREADS SECONDS [DROP_KIB]. Run with MBRECORD_ARMED=1; it
 * starts churning once STATUS_FILE (the shim's CONTROL.status) says "recording", so the
 * trace holds the churn from its first call. It prints, as JSON, its call count, its peak
 * RSS and its lowest RSS after its threads have ended: sampled for up to 3 s, or until it
 * is DROP_KIB below the peak (the shim returns its buffers between windows).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring_churn.h"
#include "shim_status.h"

#define RING 256

static double seconds;
static atomic_ullong calls;

static void *worker(void *arg)
{
    uint64_t x = ring_seed((unsigned)(uintptr_t)arg);
    void *ring[RING] = {0};
    unsigned long long n = 0;
    double end = ring_now() + seconds;
    for (;;) {
        if ((n & 1023) == 0 && ring_now() > end)
            break;
        uint64_t draw = ring_draw(&x);
        n += ring_replace(&ring[draw % RING], draw, 4000, 8);
    }
    for (unsigned i = 0; i < RING; i++)
        free(ring[i]);
    atomic_fetch_add(&calls, n + RING);
    return NULL;
}

static long status_kb(const char *key)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, strlen(key)) == 0)
            kb = strtol(line + strlen(key), NULL, 10);
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: churn STATUS_FILE THREADS SECONDS [DROP_KIB]\n");
        return 2;
    }
    int threads = atoi(argv[2]);
    seconds = atof(argv[3]);
    if (threads < 1 || threads > 64 || seconds <= 0) {
        fprintf(stderr, "churn: 1-64 threads and a positive time\n");
        return 2;
    }
    for (int i = 0; i < 1000 && !recording(argv[1]); i++)
        usleep(10000);
    if (!recording(argv[1])) {
        fprintf(stderr, "churn: the shim never said it was recording\n");
        return 1;
    }
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    long hwm = status_kb("VmHWM:"), drop = argc == 5 ? atol(argv[4]) : 0, low = hwm;
    for (int i = 0; i < 60 && (i < 4 || hwm - low < drop); i++) {
        usleep(50000);
        long rss = status_kb("VmRSS:");
        low = rss >= 0 && rss < low ? rss : low;
    }
    printf("{\"calls\": %llu, \"rss_peak_kb\": %ld, \"rss_after_kb\": %ld}\n",
           (unsigned long long)atomic_load(&calls), hwm, low);
    return 0;
}
