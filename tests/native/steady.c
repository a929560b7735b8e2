/* A program whose live set is flat however long it runs, for the streaming replayer's
 * tests: each thread keeps a ring of small blocks and replaces them at a set pace
 * (malloc and free, some reallocs), and hands some blocks to other threads through a
 * shared table, where the taker asks their size and later frees them (the cross-thread
 * edges). Twice as long is twice the calls with the same live bytes.
 *
 * Usage: steady THREADS SECONDS CALLS_PER_SECOND_PER_THREAD [BLOCKS]: BLOCKS in each
 * thread's ring (1024), all made at its start, so the live set is flat from there. Run
 * with MBRECORD_ARMED=1.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ring_churn.h"

#define SHARED 256

static double seconds, pace;
static unsigned blocks = 1024;
static _Atomic(void *) shared[SHARED];

static void *worker(void *arg)
{
    uint64_t x = ring_seed((unsigned)(uintptr_t)arg);
    void **ring = calloc(blocks, sizeof *ring);
    if (ring == NULL)
        abort();
    for (unsigned i = 0; i < blocks; i++)
        ring[i] = malloc(16 + i % 1000);
    double start = ring_now();
    for (unsigned long long n = 0;;) {
        if ((n & 255) == 0) {
            double late = (double)n / pace - (ring_now() - start);
            if (ring_now() - start > seconds)
                break;
            if (late > 0)
                usleep((useconds_t)(late * 1e6));
        }
        uint64_t draw = ring_draw(&x);
        void **slot = &ring[draw % blocks];
        if ((draw >> 36) % 16 == 0 && *slot != NULL) {
            /* hand it over; take another thread's block, ask its size, keep it */
            *slot = atomic_exchange(&shared[(draw >> 50) % SHARED], *slot);
            if (*slot != NULL && malloc_usable_size(*slot) == 0)
                abort();
            n += 2;
            continue;
        }
        n += ring_replace(slot, draw, 1000, 16);
    }
    for (unsigned i = 0; i < blocks; i++)
        free(ring[i]);
    free(ring);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: steady THREADS SECONDS CALLS_PER_SECOND_PER_THREAD [BLOCKS]\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    seconds = atof(argv[2]);
    pace = atof(argv[3]);
    if (argc == 5)
        blocks = (unsigned)atoi(argv[4]);
    if (threads < 1 || threads > 64 || seconds <= 0 || pace <= 0 || blocks < 1) {
        fprintf(stderr, "steady: 1-64 threads, a positive time, pace and block count\n");
        return 2;
    }
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    for (unsigned i = 0; i < SHARED; i++)
        free(shared[i]);
    return 0;
}
