/* An allocator that gives up mid-way: glibc's malloc for its first ABORT_AFTER calls,
 * then abort(). Preloaded into the replayer, it makes every replay under it die of
 * SIGABRT, as a broken custom allocator would, so the command's account of failed
 * replays is tested against a real crash of the real replayer.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>

#define ABORT_AFTER 2000

extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);

static atomic_long calls;

static void count(void) {
    if (atomic_fetch_add(&calls, 1) >= ABORT_AFTER) abort();
}

void *malloc(size_t size) {
    count();
    return __libc_malloc(size);
}

void free(void *ptr) { __libc_free(ptr); }

void *calloc(size_t n, size_t size) {
    count();
    return __libc_calloc(n, size);
}

void *realloc(void *ptr, size_t size) {
    count();
    return __libc_realloc(ptr, size);
}
