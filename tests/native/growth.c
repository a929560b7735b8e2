/* Memory that grows for the growth reading of replays (and the `record -- COMMAND` test).
 *
 * Usage: growth MODE SECONDS. Runs for SECONDS, then prints its own call count as JSON.
 * - leak: 64 KiB for every 10 ms of the clock, never freed: live bytes grow on one line
 *   of the trace's clock, and RSS with them under any allocator.
 * - arenas: the glibc pattern behind MALLOC_ARENA_MAX: a new thread every SECONDS/12
 *   (12 threads, 13 arenas with the main one: under glibc's limit of 8 per core on 2
 *   cores) makes a 1 MiB burst of small blocks, keeps one small block allocated after it and
 *   frees the burst, then stays (a block a second) until the end. Each thread gets its
 *   own arena, whose kept block pins the freed burst below it: live bytes stay flat
 *   while glibc's RSS grows a MiB a thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 12
#define BURST 4096
#define BURST_SIZE 256

static double end_at;
static atomic_ullong calls;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *touched(size_t size)
{
    void *p = malloc(size);
    if (p == NULL)
        abort();
    memset(p, 1, size);
    atomic_fetch_add(&calls, 1);
    return p;
}

static void release(void *p)
{
    free(p);
    atomic_fetch_add(&calls, 1);
}

static void *arena_thread(void *unused)
{
    (void)unused;
    static _Thread_local void *burst[BURST];
    for (int i = 0; i < BURST; i++)
        burst[i] = touched(BURST_SIZE);
    void *kept = touched(64);
    for (int i = 0; i < BURST; i++)
        release(burst[i]);
    while (now() < end_at) {
        release(touched(128));
        pause_ms(20);
    }
    /* kept stays to the end: freed, it would unpin the arena, which glibc then trims,
     * and the replay's threads, ending one by one, would end the trace with a fall */
    (void)kept;
    return NULL;
}

/* Thread i starts at (i + 1/2) twelfths of the run, on the clock rather than after the
 * previous sleep (which a loaded host stretches): each twelfth of the trace holds one
 * step of RSS, in its middle. */
static void arenas(double seconds)
{
    pthread_t threads[THREADS];
    double start = end_at - seconds, turn = seconds / THREADS;
    for (int i = 0; i < THREADS; i++) {
        double wait = start + (i + 0.5) * turn - now();
        if (wait > 0)
            pause_ms((long)(wait * 1000));
        if (pthread_create(&threads[i], NULL, arena_thread, NULL) != 0)
            abort();
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
}

/* The blocks due by now on the clock, as arenas() starts its threads: a wake-up a loaded
 * host delays makes up what is due at once. Paced by its sleeps, a program starved for a
 * second leaked nothing then and never caught up: a staircase whose steps a trend's
 * interval reads as a wandering level (the test flickered at a load average of 20). */
static void leak(double seconds)
{
    double start = end_at - seconds;
    long made = 0;
    while (now() < end_at) {
        long due = (long)((now() - start) / 0.01) + 1;
        for (; made < due; made++)
            for (int i = 0; i < 4; i++)
                touched(16384);
        pause_ms(10);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "leak") != 0 && strcmp(argv[1], "arenas") != 0)) {
        fprintf(stderr, "usage: growth leak|arenas SECONDS\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    end_at = now() + seconds;
    if (strcmp(argv[1], "leak") == 0)
        leak(seconds);
    else
        arenas(seconds);
    printf("{\"calls\": %llu}\n", (unsigned long long)atomic_load(&calls));
    return 0;
}
