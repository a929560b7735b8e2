/* A probe of the host's speed, run beside a server under load: every period it times a
 * fixed piece of work by the thread's own CPU clock and prints "unix-time ns-per-step".
 *
 *   canary cpu [period_us]   an L1-resident integer loop: the vCPU's speed (frequency,
 *                            a hypervisor that takes the vCPU without reporting steal)
 *   canary mem [period_us]   a dependent walk over 64 MiB in random order: memory
 *                            latency, which neighbours' cache and bandwidth use moves
 *
 * The thread CPU clock, not the wall clock: the run queue of a saturated guest would
 * otherwise be measured instead of the host. Stops on SIGTERM or SIGINT. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stopping;
/* Where the work's result goes, so the compiler cannot drop the work. */
static volatile uint64_t sink;

static void on_stop(int sig) {
    (void)sig;
    stopping = 1;
}

static uint64_t now_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t rng_state = 88172645463325252u;

static uint64_t next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* One cycle through every slot in random order, so no prefetcher can guess the next. */
static size_t *random_cycle(size_t slots) {
    size_t *order = malloc(slots * sizeof *order);
    size_t *next = malloc(slots * sizeof *next);
    if (order == NULL || next == NULL) {
        fprintf(stderr, "canary: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < slots; i++)
        order[i] = i;
    for (size_t i = slots - 1; i > 0; i--) {
        size_t j = (size_t)(next_random() % (i + 1));
        size_t swap = order[i];
        order[i] = order[j];
        order[j] = swap;
    }
    for (size_t i = 0; i < slots; i++)
        next[order[i]] = order[(i + 1) % slots];
    free(order);
    return next;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "cpu") != 0 && strcmp(argv[1], "mem") != 0)) {
        fprintf(stderr, "usage: canary cpu|mem [period_us]\n");
        return 2;
    }
    int memory = strcmp(argv[1], "mem") == 0;
    long period_us = argc > 2 ? atol(argv[2]) : 100000;
    signal(SIGTERM, on_stop);
    signal(SIGINT, on_stop);
    const long steps = memory ? 20000 : 200000;
    size_t *next = memory ? random_cycle((64u << 20) / sizeof(size_t)) : NULL;
    static uint32_t table[4096];
    uint32_t x = 1;
    size_t at = 0;
    while (!stopping) {
        uint64_t began = now_ns(CLOCK_THREAD_CPUTIME_ID);
        if (memory) {
            for (long i = 0; i < steps; i++)
                at = next[at];
        } else {
            for (long i = 0; i < steps; i++) {
                x = x * 1664525u + 1013904223u;
                table[x & 4095] += x;
            }
        }
        sink = at + x;
        double per_step = (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - began) / (double)steps;
        printf("%.3f %.3f\n", (double)now_ns(CLOCK_REALTIME) / 1e9, per_step);
        fflush(stdout);
        usleep((useconds_t)period_us);
    }
    free(next);
    return 0;
}
