/* Cross-thread uses of a block just before its end, the pattern that crashed free-running
 * replays (issue 52): one thread makes a block, the other asks its size with
 * malloc_usable_size, and then one of them ends it, handing over through an atomic flag,
 * so each size query really happens before the free or realloc. Half the blocks are above
 * glibc's mmap threshold (their free unmaps them at once). By round modulo 4:
 *   0: A mallocs 300,000 bytes, B asks its size, A frees it
 *   1: A callocs a small block and asks its size, B asks too and reallocs it to 300,000
 *      bytes, A asks the new block's size and frees it
 *   2: A memaligns 300,000 bytes, B asks its size, A reallocs it small and frees that
 *   3: A mallocs a small block and asks its size, B asks too and frees it
 *
 * Usage: usable_handover ROUNDS. Run with MBRECORD_ARMED=1.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG 300000

static _Atomic(void *) handed; /* the block of this round, whichever thread holds it */
static atomic_int turn;        /* 0: A's move, 1: B's, 2: back to A */
static long rounds;

/* Yields while waiting: on a host busier than its cores (a test suite's other workers),
 * a bare spin held the CPU for its whole time slice, every hand-over waited one, and
 * recording 2000 rounds took 25 s instead of a fraction of one. The hand-over's order
 * is the flag's, so the calls recorded are the same. */
static void wait_for(int want)
{
    while (atomic_load_explicit(&turn, memory_order_acquire) != want)
        sched_yield();
}

static void *ask(void *p)
{
    if (p == NULL || malloc_usable_size(p) == 0)
        abort();
    return p;
}

static void *thread_b(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        wait_for(1);
        void *p = ask(atomic_load_explicit(&handed, memory_order_relaxed));
        if (i % 4 == 1)
            p = realloc(p, BIG);
        else if (i % 4 == 3) {
            free(p);
            p = NULL;
        }
        atomic_store_explicit(&handed, p, memory_order_relaxed);
        atomic_store_explicit(&turn, 2, memory_order_release);
    }
    return NULL;
}

static void *make(long i)
{
    size_t small = 24 + (size_t)(i % 7) * 40;
    void *p;
    switch (i % 4) {
    case 0:
        p = malloc(BIG);
        break;
    case 1:
        return ask(calloc(1, small));
    case 2:
        p = memalign(64, BIG);
        break;
    default:
        p = malloc(small);
        if (p != NULL)
            memset(p, 1, small);
        return ask(p);
    }
    if (p != NULL)
        memset(p, 1, BIG);
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (rounds = atol(argv[1])) <= 0) {
        fprintf(stderr, "usage: usable_handover ROUNDS\n");
        return 2;
    }
    pthread_t b;
    if (pthread_create(&b, NULL, thread_b, NULL) != 0)
        return 1;
    for (long i = 0; i < rounds; i++) {
        void *p = make(i);
        if (p == NULL)
            return 1;
        atomic_store_explicit(&handed, p, memory_order_relaxed);
        atomic_store_explicit(&turn, 1, memory_order_release);
        wait_for(2);
        atomic_store_explicit(&turn, 0, memory_order_relaxed);
        p = atomic_load_explicit(&handed, memory_order_relaxed);
        if (i % 4 == 1)
            ask(p);
        else if (i % 4 == 2)
            p = realloc(p, 100);
        free(p);
    }
    pthread_join(b, NULL);
    printf("{\"rounds\": %ld}\n", rounds);
    return 0;
}
