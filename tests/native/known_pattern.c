/* A program with a known allocation pattern, for the record/replay tests. It arms the
 * mbrecord shim itself through the control file (argv[1]) writing the trace to argv[2],
 * so the window holds exactly the calls below, and prints what it did as JSON: the call
 * counts and its live requested bytes at the end of each phase (relative to the window's
 * start), which the replay of the trace must reproduce.
 *
 * Pattern: blocks made before the window and freed inside it by another thread (the
 * snapshot), cross-thread frees, realloc chains, memalign/posix_memalign/aligned_alloc,
 * calloc, and blocks still live at the end. No call in the window allocates otherwise:
 * threads are created before arming and synchronise with barriers.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim_control.h"

#define THREADS 4
#define BLOCKS 2000
#define OLD 500

static pthread_barrier_t barrier;
static void *blocks[THREADS][BLOCKS];
static size_t sizes[THREADS][BLOCKS];
static void *old_blocks[OLD];
static size_t old_sizes[OLD];
static long long live_at[THREADS + 1][8]; /* each thread's contribution per phase */
static long long calls[8];                  /* malloc calloc realloc free memalign */
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;

static void count(int kind, long long n)
{
    pthread_mutex_lock(&calls_lock);
    calls[kind] += n;
    pthread_mutex_unlock(&calls_lock);
}

static size_t size_of(int t, int i)
{
    return (size_t)(16 + ((unsigned)(t * 7919 + i * 104729) % 4000));
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    long long live = 0, n_malloc = 0, n_calloc = 0, n_realloc = 0, n_free = 0, n_align = 0;
    pthread_barrier_wait(&barrier); /* armed */
    /* phase 0: allocate, every kind */
    for (int i = 0; i < BLOCKS; i++) {
        size_t s = size_of(t, i);
        void *p;
        switch (i % 5) {
        case 0: p = calloc(1, s); n_calloc++; break;
        case 1: p = memalign(64, s); n_align++; break;
        case 2: if (posix_memalign(&p, 256, s) != 0) p = NULL; n_align++; break;
        case 3: p = aligned_alloc(32, (s + 31) / 32 * 32); s = (s + 31) / 32 * 32; n_align++; break;
        default: p = malloc(s); n_malloc++; break;
        }
        if (p == NULL)
            abort();
        memset(p, 1, s);
        blocks[t][i] = p;
        sizes[t][i] = s;
        live += (long long)s;
    }
    live_at[t][0] = live;
    pthread_barrier_wait(&barrier);
    /* phase 1: free half of the next thread's blocks (cross-thread), and this thread's
     * share of the blocks made before the window */
    int next = (t + 1) % THREADS;
    for (int i = 0; i < BLOCKS; i += 2) {
        free(blocks[next][i]);
        live -= (long long)sizes[next][i];
        blocks[next][i] = NULL;
        n_free++;
    }
    for (int i = t; i < OLD; i += THREADS) {
        free(old_blocks[i]);
        live -= (long long)old_sizes[i];
        n_free++;
    }
    live_at[t][1] = live;
    pthread_barrier_wait(&barrier);
    /* phase 2: realloc chains on the surviving own blocks, shrinking then growing but never
     * past the block's first size, so the end of phase 0 stays the exact peak */
    for (int i = 1; i < BLOCKS; i += 2) {
        size_t first = sizes[t][i];
        for (int k = 0; k < 4; k++) {
            size_t s = k == 0 ? first / 2 + 1 : k == 1 ? first / 4 + 1 : k == 2 ? first / 2 : first * 3 / 4;
            void *p = realloc(blocks[t][i], s);
            if (p == NULL)
                abort();
            live += (long long)s - (long long)sizes[t][i];
            blocks[t][i] = p;
            sizes[t][i] = s;
            n_realloc++;
        }
    }
    live_at[t][2] = live;
    pthread_barrier_wait(&barrier);
    /* phase 3: free three quarters of the survivors; a quarter stays live at the end */
    for (int i = 1; i < BLOCKS; i += 2) {
        if (i % 8 == 7)
            continue;
        free(blocks[t][i]);
        live -= (long long)sizes[t][i];
        n_free++;
    }
    live_at[t][3] = live;
    count(0, n_malloc);
    count(1, n_calloc);
    count(2, n_realloc);
    count(3, n_free);
    count(4, n_align);
    pthread_barrier_wait(&barrier);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: known_pattern CONTROL TRACE\n");
        return 2;
    }
    char status[600];
    long long old_live = 0;
    for (int i = 0; i < OLD; i++) {
        old_sizes[i] = 100 + (size_t)i * 3;
        old_blocks[i] = malloc(old_sizes[i]);
        old_live += (long long)old_sizes[i];
    }
    pthread_barrier_init(&barrier, NULL, THREADS + 1);
    pthread_t tids[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&tids[t], NULL, worker, (void *)(intptr_t)t);
    arm("known_pattern", argv[1], argv[2], status, sizeof status);
    for (int phase = 0; phase < 5; phase++)
        pthread_barrier_wait(&barrier);
    disarm("known_pattern", argv[1], status);
    for (int t = 0; t < THREADS; t++)
        pthread_join(tids[t], NULL);
    printf("{\"old_live\": %lld, \"phases\": [", old_live);
    long long peak = 0;
    for (int phase = 0; phase < 4; phase++) {
        long long sum = old_live;
        for (int t = 0; t < THREADS; t++)
            sum += live_at[t][phase];
        peak = sum > peak ? sum : peak;
        printf("%s%lld", phase ? ", " : "", sum);
    }
    printf("], \"peak_live\": %lld, \"calls\": {\"malloc\": %lld, \"calloc\": %lld, "
           "\"realloc\": %lld, \"free\": %lld, \"memalign\": %lld}}\n",
           peak, calls[0], calls[1], calls[2], calls[3], calls[4]);
    return 0;
}
