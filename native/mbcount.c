/*
 * libmbcount.so: a test-only malloc interposer that counts the bytes requested and not
 * yet freed, independently of mbpatterns' own accounting. mbpatterns looks up
 * mbcount_live_bytes() at run time and reports the difference over its measured window
 * as interposer_live_bytes; the tests compare it with live_bytes.
 *
 * Each block carries a 16-byte header in front of it holding the requested size and
 * the distance back to the real allocation; the real work is done by glibc's
 * __libc_* entry points, which avoids the dlsym(RTLD_NEXT) bootstrap problem.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

#define HEADER 16

static _Atomic uint64_t live;

uint64_t mbcount_live_bytes(void);
uint64_t mbcount_live_bytes(void)
{
    return atomic_load(&live);
}

typedef struct {
    size_t size;
    size_t offset; /* from the real allocation to the user pointer */
} header;

static void *finish(char *base, size_t offset, size_t size)
{
    if (base == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    char *user = base + offset;
    header *h = (header *)(user - HEADER);
    h->size = size;
    h->offset = offset;
    atomic_fetch_add(&live, size);
    return user;
}

void *malloc(size_t size)
{
    if (size > SIZE_MAX - HEADER)
        return NULL;
    return finish(__libc_malloc(size + HEADER), HEADER, size);
}

void free(void *p)
{
    if (p == NULL)
        return;
    header *h = (header *)((char *)p - HEADER);
    atomic_fetch_sub(&live, h->size);
    __libc_free((char *)p - h->offset);
}

void *calloc(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = malloc(n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void *realloc(void *old, size_t size)
{
    if (old == NULL)
        return malloc(size);
    if (size == 0) {
        free(old);
        return NULL;
    }
    void *p = malloc(size);
    if (p == NULL)
        return NULL;
    size_t was = ((header *)((char *)old - HEADER))->size;
    memcpy(p, old, was < size ? was : size);
    free(old);
    return p;
}

void *memalign(size_t align, size_t size)
{
    if (align <= HEADER)
        return malloc(size);
    /* the user pointer sits `align` bytes in, leaving room for the header */
    return finish(__libc_memalign(align, size + align), align, size);
}

void *aligned_alloc(size_t align, size_t size)
{
    return memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size)
{
    void *p = memalign(align, size);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

size_t malloc_usable_size(void *p)
{
    return p ? ((header *)((char *)p - HEADER))->size : 0;
}
