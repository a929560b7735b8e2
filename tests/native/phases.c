/* A program that does the same calls on every run, in timed phases, for the segmented
 * recording tests: two recordings of it, one in segments, must replay to the same totals.
 * One thread; each phase allocates BLOCKS blocks of sizes drawn from a fixed sequence,
 * keeps every tenth (the live set grows phase by phase) and frees the rest, then sleeps,
 * so that a recording rotated by age cuts it between phases and inside them.
 *
 * Usage: phases PHASES MS_PER_PHASE. Prints its call count as JSON. Run with
 * MBRECORD_ARMED=1.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BLOCKS 4000

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int phases = atoi(argv[1]);
    long ms = atol(argv[2]);
    static void *block[BLOCKS];
    uint64_t x = 88172645463325252ull;
    unsigned long long calls = 0;
    for (int p = 0; p < phases; p++) {
        for (int i = 0; i < BLOCKS; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            block[i] = malloc(16 + x % 4000);
            calls++;
        }
        for (int i = 0; i < BLOCKS; i++) {
            if (i % 10 != 0) {
                free(block[i]);
                calls++;
            }
        }
        struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
    }
    printf("{\"calls\": %llu}\n", calls);
    return 0;
}
