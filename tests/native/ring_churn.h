/* The step the churning test programs share: a thread keeps a ring of blocks and, at
 * each draw of its xorshift generator, resizes one (a realloc) or replaces it (a free and
 * a malloc, its first bytes written). */
#ifndef RING_CHURN_H
#define RING_CHURN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double ring_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* thread k's generator, apart from every other thread's */
static inline uint64_t ring_seed(unsigned k)
{
    return (uint64_t)k * 0x9E3779B97F4A7C15ull + 1;
}

static inline uint64_t ring_draw(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* the block at *slot, by draw x: sizes 16 to 16 + max_size, one realloc in
 * realloc_one_in; the calls it made */
static inline unsigned ring_replace(void **slot, uint64_t x, size_t max_size,
                                    unsigned realloc_one_in)
{
    size_t size = 16 + (size_t)(x >> 20) % max_size;
    if ((x >> 40) % realloc_one_in == 0 && *slot != NULL) {
        void *p = realloc(*slot, size);
        if (p != NULL)
            *slot = p;
        return 1;
    }
    free(*slot);
    *slot = malloc(size);
    if (*slot != NULL)
        memset(*slot, 1, 16);
    return 2;
}

#endif
