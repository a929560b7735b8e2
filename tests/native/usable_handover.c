/* Cross-thread uses of a block just before its free, the pattern that crashed free-running
 * replays (issue 52): one thread allocates a block (alternately above glibc's mmap
 * threshold, so its free unmaps it at once, and small), a second asks its size with
 * malloc_usable_size, then hands it back and the first frees it; through an atomic flag,
 * so each size query really happens before its free. Every fourth round the second
 * thread frees the block itself, after the first asked its size (the use and the free on
 * the other sides).
 *
 * Usage: usable_handover ROUNDS. Run with MBRECORD_ARMED=1.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(void *) handed;   /* set by the allocator, taken by the asker */
static atomic_int turn;          /* 0: the allocator's move, 1: the asker's, 2: back */
static long rounds;

static void wait_for(int want)
{
    while (atomic_load_explicit(&turn, memory_order_acquire) != want)
        ;
}

static void *asker(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        wait_for(1);
        void *p = atomic_load_explicit(&handed, memory_order_relaxed);
        if (malloc_usable_size(p) == 0)
            abort();
        if (i % 4 == 3) {
            free(p); /* the allocator asked first: its use, this thread's free */
            atomic_store_explicit(&handed, NULL, memory_order_relaxed);
        }
        atomic_store_explicit(&turn, 2, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (rounds = atol(argv[1])) <= 0) {
        fprintf(stderr, "usage: usable_handover ROUNDS\n");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, asker, NULL) != 0)
        return 1;
    for (long i = 0; i < rounds; i++) {
        size_t size = i % 2 == 0 ? 300000 : 24 + (size_t)(i % 7) * 40;
        char *p = malloc(size);
        if (p == NULL)
            return 1;
        memset(p, 1, size);
        if (i % 4 == 3 && malloc_usable_size(p) < size)
            abort();
        atomic_store_explicit(&handed, p, memory_order_relaxed);
        atomic_store_explicit(&turn, 1, memory_order_release);
        wait_for(2);
        atomic_store_explicit(&turn, 0, memory_order_relaxed);
        p = atomic_load_explicit(&handed, memory_order_relaxed);
        free(p);
    }
    pthread_join(t, NULL);
    printf("{\"rounds\": %ld}\n", rounds);
    return 0;
}
