/* mbreplay: replay an allocation trace written by mbrecord under whatever allocator this
 * process is started with (LD_PRELOAD), and report its memory and CPU as JSON.
 *
 * One replay thread per recorded thread. Blocks get ids in a single pass over all events
 * in time order; an operation on a block made by another thread waits until that block
 * exists, and the call that ends a block (free, realloc) waits until every use of it
 * (malloc_usable_size) in other threads has happened (dependency edges: free-running
 * threads must never make a call on a block the program could not have made it on).
 * Edges only point back in time, so they cannot form a cycle;
 * a free of a block the trace never saw (made before a cut window) is skipped and counted.
 * Every new block is written once (calloc's are zeroed by calloc), so pages are touched
 * as the program touched them. The replayer's own bookkeeping lives in mmap'd memory and
 * is resident before the replay starts: its size is the baseline subtracted from RSS.
 *
 * Exit status 2 with one line on stderr for bad usage and bad traces (with the byte
 * offset of a truncated or corrupt frame).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "mbtrace.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
/* ZSTD_createDCtx_advanced: zstd's buffers come from mmap, not from the measured heap */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#define NONE UINT32_MAX

#ifdef __SANITIZE_ADDRESS__
/* the checking build (make check): the blocks a trace leaves live are no leak of ours */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
}
#endif

static const char *trace_path;

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mbreplay: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* ---- mmap'd growable arrays: the replayer's bookkeeping stays out of the measured heap */
struct arr {
    char *data;
    size_t len, cap; /* bytes */
};

static void *arr_grow(struct arr *a, size_t more)
{
    if (a->len + more > a->cap) {
        size_t cap = a->cap ? a->cap : 1u << 16;
        while (cap < a->len + more)
            cap *= 2;
        void *p = a->data == NULL
                      ? mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : mremap(a->data, a->cap, cap, MREMAP_MAYMOVE);
        if (p == MAP_FAILED)
            fail("out of memory loading the trace (%zu bytes)", cap);
        a->data = p;
        a->cap = cap;
    }
    void *at = a->data + a->len;
    a->len += more;
    return at;
}

static void arr_free(struct arr *a)
{
    if (a->data != NULL)
        munmap(a->data, a->cap);
    memset(a, 0, sizeof *a);
}

static void *zmap(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail("out of memory (%zu bytes)", bytes);
    memset(p, 0, bytes); /* resident now, so it is part of the baseline */
    return p;
}

/* ---- the trace as loaded ---- */
struct rthread {
    uint32_t token;
    struct arr recs; /* struct mb_rec */
    struct arr ops;  /* struct op */
    struct arr seqs; /* uint32_t: each op's place in the global order (--order recorded) */
    uint32_t pending_old; /* block of a realloc between its two records */
};

struct op {
    uint64_t ts;
    uint64_t size;
    uint32_t id;
    uint32_t old;
    uint16_t kind;
    uint8_t wait; /* WAIT_* bits: what other threads must have done before this op */
    uint8_t use;  /* 1: a use another thread's end of the block waits for (uses_left) */
    uint32_t align;
};

#define WAIT_MADE 1u /* the block, made by another thread, exists */
#define WAIT_USED 2u /* every use of the block in other threads has happened */

static struct {
    char status[MB_STATUS_SIZE + 1];
    char info[MB_HEADER_SIZE];
    char end[512];
    uint32_t version;
    uint64_t frames, bytes, events;
    uint64_t read_events; /* every call in the frames read, --until or not */
    int end_frame;        /* the recorder closed the trace: its END frame is there */
    struct arr threads; /* struct rthread */
    struct arr snapshot; /* u64 token, u64 size */
    uint64_t counts[8];
} tr;

/* Far above any real server's threads (thousands): a trace with more is damaged or
 * crafted, and each one costs a replay thread and a linear lookup here. */
#define MAX_THREADS 4096u

static struct rthread *thread_of(uint32_t token, uint64_t at)
{
    static size_t last;
    struct rthread *t = (struct rthread *)tr.threads.data;
    size_t n = tr.threads.len / sizeof *t;
    if (last < n && t[last].token == token)
        return &t[last];
    for (size_t i = 0; i < n; i++)
        if (t[i].token == token)
            return &t[last = i];
    if (n >= MAX_THREADS)
        fail("%s: more than %u threads (the %zuth starts in the frame at byte offset %llu): "
             "no real server records that many; the trace is damaged or not a recording",
             trace_path, MAX_THREADS, n + 1, (unsigned long long)at);
    struct rthread *fresh = arr_grow(&tr.threads, sizeof *fresh);
    memset(fresh, 0, sizeof *fresh);
    fresh->token = token;
    fresh->pending_old = NONE;
    last = n;
    return fresh;
}

/* --until: only the calls of the first N ns of the trace (0: all of it). A portion is
 * a shorter replay of the same program, its recorded start (the snapshot) included. */
static uint64_t until_ns;
/* The recorder's writer sweeps every thread's records into frames every 200 ms, so once a
 * whole frame is this far past --until, no later frame holds a call before it. */
#define UNTIL_SLACK_NS 10000000000ull
static uint64_t frame_first_ns;

static void parse_events(const char *raw, size_t len, uint64_t at)
{
    size_t pos = 0;
    frame_first_ns = UINT64_MAX;
    while (pos < len) {
        uint32_t head[2];
        if (len - pos < sizeof head)
            fail("%s: corrupt frame at byte offset %llu (event block header cut)", trace_path,
                 (unsigned long long)at);
        memcpy(head, raw + pos, sizeof head);
        pos += sizeof head;
        size_t bytes = (size_t)head[1] * sizeof(struct mb_rec);
        if (bytes > len - pos)
            fail("%s: corrupt frame at byte offset %llu (event block overruns the frame)",
                 trace_path, (unsigned long long)at);
        struct rthread *t = thread_of(head[0], at);
        for (uint32_t i = 0; i < head[1]; i++) {
            struct mb_rec r;
            memcpy(&r, raw + pos + (size_t)i * sizeof r, sizeof r);
            unsigned kind = MB_KIND(r.w0);
            if (kind < MB_MALLOC || kind > MB_USABLE)
                fail("%s: corrupt frame at byte offset %llu (unknown call kind %u)", trace_path,
                     (unsigned long long)at, kind);
            tr.read_events++;
            if (MB_TIME(r.w0) < frame_first_ns)
                frame_first_ns = MB_TIME(r.w0);
            if (until_ns && MB_TIME(r.w0) > until_ns)
                continue;
            memcpy(arr_grow(&t->recs, sizeof r), &r, sizeof r);
            tr.counts[kind]++;
            tr.events++;
        }
        pos += bytes;
    }
}

static void *zstd_alloc(void *opaque, size_t size)
{
    (void)opaque;
    char *p = mmap(NULL, size + 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memcpy(p, &size, sizeof size);
    return p + 64;
}

static void zstd_free(void *opaque, void *address)
{
    (void)opaque;
    if (address == NULL)
        return;
    char *p = (char *)address - 64;
    size_t size;
    memcpy(&size, p, sizeof size);
    munmap(p, size + 64);
}

static void load(const char *path)
{
    trace_path = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail("cannot open trace %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        fail("%s is not a regular file", path);
    size_t size = (size_t)st.st_size;
    tr.bytes = size;
    if (size < 16)
        fail("%s: not a mallocbench trace (only %zu bytes)", path, size);
    const char *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        fail("cannot read %s: %s", path, strerror(errno));
    if (memcmp(map, MB_MAGIC, 8) != 0)
        fail("%s: not a mallocbench trace (bad magic at byte offset 0)", path);
    uint32_t header;
    memcpy(&tr.version, map + 8, 4);
    memcpy(&header, map + 12, 4);
    if (tr.version > MB_VERSION)
        fail("%s: trace format version %u is newer than this replayer's (%u): upgrade mallocbench",
             path, tr.version, MB_VERSION);
    if (tr.version == 0 || header < MB_INFO_OFFSET || header > size)
        fail("%s: corrupt header at byte offset 8 (version %u, header size %u)", path,
             tr.version, header);
    memcpy(tr.status, map + MB_STATUS_OFFSET, MB_STATUS_SIZE);
    tr.status[MB_STATUS_SIZE] = 0;
    size_t info_len = header - MB_INFO_OFFSET < sizeof tr.info - 1 ? header - MB_INFO_OFFSET
                                                                    : sizeof tr.info - 1;
    memcpy(tr.info, map + MB_INFO_OFFSET, info_len);
    ZSTD_customMem mem = {zstd_alloc, zstd_free, NULL};
    ZSTD_DCtx *dctx = ZSTD_createDCtx_advanced(mem);
    if (dctx == NULL)
        fail("out of memory creating a decompression context");
    struct arr raw = {0};
    for (size_t at = header; at < size;) {
        struct mb_frame f;
        if (size - at < sizeof f)
            fail("%s: truncated at byte offset %zu (a frame header needs %zu bytes, %zu left)",
                 path, at, sizeof f, size - at);
        memcpy(&f, map + at, sizeof f);
        if (f.magic != MB_FRAME_MAGIC || f.kind < MB_FRAME_EVENTS || f.kind > MB_FRAME_END)
            fail("%s: corrupt frame at byte offset %zu (bad frame header)", path, at);
        if (f.comp_len > size - at - sizeof f)
            fail("%s: truncated at byte offset %zu (a frame of %u bytes starts there, the file "
                 "ends at %zu)", path, at, f.comp_len, size);
        raw.len = 0;
        char *out = arr_grow(&raw, f.raw_len ? f.raw_len : 1);
        size_t got = ZSTD_decompressDCtx(dctx, out, f.raw_len, map + at + sizeof f, f.comp_len);
        if (ZSTD_isError(got) || got != f.raw_len)
            fail("%s: corrupt frame at byte offset %zu (%s)", path, at,
                 ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong length");
        if (f.kind == MB_FRAME_EVENTS) {
            parse_events(out, got, at);
            if (until_ns && frame_first_ns != UINT64_MAX &&
                frame_first_ns > until_ns + UNTIL_SLACK_NS) {
                tr.frames++;
                break; /* the rest of the trace is past the portion */
            }
        } else if (f.kind == MB_FRAME_SNAPSHOT) {
            memcpy(arr_grow(&tr.snapshot, got / 16 * 16), out, got / 16 * 16);
        } else {
            snprintf(tr.end, sizeof tr.end, "%.*s", (int)got, out);
            tr.end_frame = 1;
        }
        tr.frames++;
        at += sizeof f + f.comp_len;
    }
    ZSTD_freeDCtx(dctx);
    arr_free(&raw);
    munmap((void *)map, size);
}

/* The calls the recorder counted: its END frame's events=, else the header status's
 * "events=N" or "after N events" (a recording cut by a write error); -1 if it says none. */
static long long header_events(void)
{
    const char *at = tr.end_frame ? strstr(tr.end, "events=") : NULL;
    if (at == NULL || (at != tr.end && at[-1] != '\n'))
        at = strstr(tr.status, "events=");
    if (at != NULL)
        return strtoll(at + strlen("events="), NULL, 10);
    at = strstr(tr.status, " after ");
    if (at != NULL && strstr(at, " events") != NULL)
        return strtoll(at + strlen(" after "), NULL, 10);
    return -1;
}

/* ---- building the replay: block ids, dependency edges, the ideal live curve ---- */
struct gkey {
    uint64_t ts;
    uint32_t thread;
    uint32_t index;
};

static int gkey_cmp(const void *a, const void *b)
{
    const struct gkey *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->thread != y->thread)
        return x->thread < y->thread ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The global order, sorted in mmap'd memory: qsort would malloc a buffer as large as the
 * array, and an allocator that keeps freed memory (tcmalloc) would then serve the replay
 * from it, hiding the replay's RSS inside the baseline. */
static void sort_gkeys(struct gkey *g, size_t n)
{
    if (n < 2)
        return;
    struct gkey *tmp = zmap(sizeof *g * n), *src = g, *dst = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t a = lo, c = mid, k = lo;
            while (a < mid && c < hi)
                dst[k++] = gkey_cmp(&src[c], &src[a]) < 0 ? src[c++] : src[a++];
            while (a < mid)
                dst[k++] = src[a++];
            while (c < hi)
                dst[k++] = src[c++];
        }
        struct gkey *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != g)
        memcpy(g, src, sizeof *g * n);
    munmap(tmp, sizeof *g * n);
}

/* One thread's records in time order. The writer may take a thread's records out of
 * order at a chunk boundary, so pieces can arrive swapped; a stable merge sort puts them
 * back without disturbing records of equal time. */
static void sort_records(struct mb_rec *r, size_t n)
{
    size_t i = 1;
    while (i < n && MB_TIME(r[i - 1].w0) <= MB_TIME(r[i].w0))
        i++;
    if (i >= n)
        return;
    struct mb_rec *tmp = zmap(sizeof *r * n), *src = r, *dst = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t a = lo, c = mid, k = lo;
            while (a < mid && c < hi)
                dst[k++] = MB_TIME(src[c].w0) < MB_TIME(src[a].w0) ? src[c++] : src[a++];
            while (a < mid)
                dst[k++] = src[a++];
            while (c < hi)
                dst[k++] = src[c++];
        }
        struct mb_rec *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != r)
        memcpy(r, src, sizeof *r * n);
    munmap(tmp, sizeof *r * n);
}

/* token -> block id, open addressing with backward-shift deletion */
static struct {
    uint64_t *key;
    uint32_t *val;
    size_t mask;
} map;

static size_t map_slot(uint64_t key)
{
    size_t j = (size_t)((key >> 4) * 0x9E3779B97F4A7C15ull >> 17) & map.mask;
    while (map.key[j] != 0 && map.key[j] != key)
        j = (j + 1) & map.mask;
    return j;
}

static uint32_t map_get(uint64_t key)
{
    size_t j = map_slot(key);
    return map.key[j] == key ? map.val[j] : NONE;
}

static void map_put(uint64_t key, uint32_t val)
{
    size_t j = map_slot(key);
    map.key[j] = key;
    map.val[j] = val;
}

static uint32_t map_take(uint64_t key)
{
    size_t j = map_slot(key);
    if (map.key[j] != key)
        return NONE;
    uint32_t val = map.val[j];
    size_t hole = j;
    for (size_t k = (j + 1) & map.mask; map.key[k] != 0; k = (k + 1) & map.mask) {
        size_t home = (size_t)((map.key[k] >> 4) * 0x9E3779B97F4A7C15ull >> 17) & map.mask;
        if (((k - home) & map.mask) >= ((k - hole) & map.mask)) {
            map.key[hole] = map.key[k];
            map.val[hole] = map.val[k];
            hole = k;
        }
    }
    map.key[hole] = 0;
    return val;
}

static struct {
    uint32_t nblocks, cap;
    uint64_t *size;      /* requested size of each block */
    uint32_t *creator;   /* thread index that made it; NONE: the snapshot (made up front) */
    uint32_t *ender;     /* thread index that ended it (free, realloc); NONE: still live */
    /* uses of each block by threads other than its ender, still to happen: the end waits
     * for 0, so no replay thread asks the size of a block another one already freed */
    _Atomic uint32_t *uses_left;
    uint64_t skipped_frees, unknown_reallocs, implicit_frees, failed_reallocs;
    int64_t live, peak_live, final_live;
    uint64_t peak_live_ts, duration_ns, nops;
    int64_t snapshot_live;
    struct arr curve; /* ideal live: {u64 ts, i64 live}, thinned */
} b;

static uint32_t new_block(uint64_t size, uint32_t creator)
{
    if (b.nblocks == b.cap)
        fail("internal: more blocks than allocation events");
    b.size[b.nblocks] = size;
    b.creator[b.nblocks] = creator;
    b.live += (int64_t)size;
    if (b.live > b.peak_live)
        b.peak_live = b.live;
    return b.nblocks++;
}

/* --order recorded: the calls of all threads run one at a time in the order recorded, so
 * every replay makes the allocator the same calls in the same order (an allocator whose
 * layout depends on how threads interleave, like tcmalloc's, then gives one peak). */
static int strict_order;
static struct arr owners; /* uint32_t: the thread of each place in the global order */

static void add_op(struct rthread *t, uint64_t ts, uint16_t kind, uint32_t id, uint32_t old,
                   uint64_t size, uint32_t align, uint32_t self)
{
    if (strict_order) {
        /* build() steps through the records in their global order: this is the op's place */
        if (b.nops >= UINT32_MAX)
            fail("%s: --order recorded replays at most 4 billion calls", trace_path);
        *(uint32_t *)arr_grow(&t->seqs, 4) = (uint32_t)b.nops;
        *(uint32_t *)arr_grow(&owners, 4) = self;
    }
    struct op *o = arr_grow(&t->ops, sizeof *o);
    uint32_t dep = kind == MB_MALLOC || kind == MB_CALLOC || kind == MB_MEMALIGN ? NONE
                   : kind == MB_REALLOC                                          ? old
                                                                                 : id;
    *o = (struct op){ts, size, id, old, kind, 0, 0, align};
    o->wait = dep != NONE && b.creator[dep] != NONE && b.creator[dep] != self ? WAIT_MADE : 0;
    b.nops++;
}

static void end_block(uint32_t id, uint32_t ender)
{
    b.live -= (int64_t)b.size[id];
    b.ender[id] = ender;
}

static void step(struct rthread *threads, uint32_t ti, const struct mb_rec *r)
{
    struct rthread *t = &threads[ti];
    uint64_t ts = MB_TIME(r->w0);
    unsigned kind = MB_KIND(r->w0);
    uint32_t id;
    switch (kind) {
    case MB_MALLOC:
    case MB_CALLOC:
    case MB_MEMALIGN:
        id = map_take(r->ptr);
        if (id != NONE) { /* its free fell outside what was recorded: end it here */
            b.implicit_frees++;
            end_block(id, ti);
            add_op(t, ts, MB_FREE, id, NONE, 0, 0, ti);
        }
        id = new_block(r->size, ti);
        map_put(r->ptr, id);
        add_op(t, ts, (uint16_t)kind, id, NONE, r->size, (uint32_t)r->aux, ti);
        break;
    case MB_FREE:
        id = map_take(r->ptr);
        if (id == NONE) {
            b.skipped_frees++;
            break;
        }
        end_block(id, ti);
        add_op(t, ts, MB_FREE, id, NONE, 0, 0, ti);
        break;
    case MB_REALLOC_FREE:
        t->pending_old = r->ptr ? map_take(r->ptr) : NONE;
        if (r->ptr && t->pending_old == NONE)
            b.unknown_reallocs++;
        break;
    case MB_REALLOC: {
        uint32_t old = t->pending_old;
        t->pending_old = NONE;
        if (r->ptr == 0 && r->size > 0) { /* failed: the old block lives on */
            b.failed_reallocs++;
            if (old != NONE)
                map_put(r->aux, old);
            break;
        }
        if (r->ptr == 0) { /* realloc(p, 0) freed p */
            if (old != NONE) {
                end_block(old, ti);
                add_op(t, ts, MB_FREE, old, NONE, 0, 0, ti);
            }
            break;
        }
        uint32_t stale = map_take(r->ptr);
        if (stale != NONE) {
            b.implicit_frees++;
            end_block(stale, ti);
            add_op(t, ts, MB_FREE, stale, NONE, 0, 0, ti);
        }
        if (old != NONE)
            end_block(old, ti);
        id = new_block(r->size, ti);
        map_put(r->ptr, id);
        add_op(t, ts, MB_REALLOC, id, old, r->size, 0, ti);
        break;
    }
    case MB_USABLE:
        id = map_get(r->ptr);
        if (id != NONE)
            add_op(t, ts, MB_USABLE, id, NONE, 0, 0, ti);
        break;
    }
}

/* The use -> end edges, once every block's ender is known (a use: a call that neither
 * makes nor ends its block; of the calls the shim records, malloc_usable_size). A
 * thread's own uses come before its end of the block in program order; another thread's
 * use signals when done, and the end waits for all of them. A use always precedes its block's end in the global order
 * (a token ended is out of the map), so these edges point back in time, like the others. */
static void order_uses_before_ends(struct rthread *threads, uint32_t nthreads)
{
    for (uint32_t ti = 0; ti < nthreads; ti++) {
        struct op *o = (struct op *)threads[ti].ops.data;
        for (size_t i = 0; i < threads[ti].ops.len / sizeof *o; i++) {
            uint32_t ender = b.ender[o[i].id];
            if (o[i].kind == MB_USABLE && ender != NONE && ender != ti) {
                o[i].use = 1;
                b.uses_left[o[i].id]++;
            }
        }
    }
    for (uint32_t ti = 0; ti < nthreads; ti++) {
        struct op *o = (struct op *)threads[ti].ops.data;
        for (size_t i = 0; i < threads[ti].ops.len / sizeof *o; i++) {
            uint32_t ended = o[i].kind == MB_FREE ? o[i].id
                             : o[i].kind == MB_REALLOC ? o[i].old
                                                       : NONE;
            if (ended != NONE && b.uses_left[ended] != 0)
                o[i].wait |= WAIT_USED;
        }
    }
}

static void build(void)
{
    struct rthread *threads = (struct rthread *)tr.threads.data;
    uint32_t nthreads = (uint32_t)(tr.threads.len / sizeof *threads);
    uint64_t nsnap = tr.snapshot.len / 16, allocs = nsnap;
    for (int k = MB_MALLOC; k <= MB_USABLE; k++)
        if (k == MB_MALLOC || k == MB_CALLOC || k == MB_MEMALIGN || k == MB_REALLOC)
            allocs += tr.counts[k];
    if (allocs >= NONE)
        fail("%s: more than 4 billion blocks: replay a shorter window", trace_path);
    b.cap = (uint32_t)allocs;
    b.size = zmap(sizeof *b.size * allocs);
    b.creator = zmap(sizeof *b.creator * allocs);
    b.ender = zmap(sizeof *b.ender * allocs);
    memset(b.ender, 0xff, sizeof *b.ender * allocs); /* NONE */
    b.uses_left = zmap(sizeof *b.uses_left * allocs);
    size_t slots = 1024;
    while (slots < allocs * 2)
        slots *= 2;
    map.key = zmap(sizeof *map.key * slots);
    map.val = zmap(sizeof *map.val * slots);
    map.mask = slots - 1;
    const uint64_t *snap = (const uint64_t *)tr.snapshot.data;
    for (uint64_t i = 0; i < nsnap; i++) {
        uint32_t id = map_take(snap[2 * i]);
        if (id != NONE)
            end_block(id, NONE);
        map_put(snap[2 * i], new_block(snap[2 * i + 1], NONE));
    }
    b.snapshot_live = b.live;
    struct arr order = {0};
    for (uint32_t ti = 0; ti < nthreads; ti++) {
        struct rthread *t = &threads[ti];
        size_t n = t->recs.len / sizeof(struct mb_rec);
        sort_records((struct mb_rec *)t->recs.data, n);
        const struct mb_rec *r = (const struct mb_rec *)t->recs.data;
        for (size_t i = 0; i < n; i++) {
            struct gkey *g = arr_grow(&order, sizeof *g);
            *g = (struct gkey){MB_TIME(r[i].w0), ti, (uint32_t)i};
        }
    }
    size_t n = order.len / sizeof(struct gkey);
    sort_gkeys((struct gkey *)order.data, n);
    const struct gkey *g = (const struct gkey *)order.data;
    uint64_t stride = n / 2000 + 1;
    for (size_t i = 0; i < n; i++) {
        const struct mb_rec *r = (const struct mb_rec *)threads[g[i].thread].recs.data;
        int64_t before = b.peak_live;
        step(threads, g[i].thread, &r[g[i].index]);
        if (b.peak_live > before)
            b.peak_live_ts = g[i].ts;
        if (i % stride == 0 || i + 1 == n) {
            int64_t *c = arr_grow(&b.curve, 16);
            c[0] = (int64_t)g[i].ts;
            c[1] = b.live;
        }
        b.duration_ns = g[i].ts;
    }
    b.final_live = b.live;
    arr_free(&order);
    munmap(map.key, sizeof *map.key * slots);
    munmap(map.val, sizeof *map.val * slots);
    order_uses_before_ends(threads, nthreads);
    munmap(b.ender, sizeof *b.ender * allocs);
    b.ender = NULL;
    for (uint32_t ti = 0; ti < nthreads; ti++)
        arr_free(&threads[ti].recs);
}

/* ---- the replay ---- */
static struct {
    int timing; /* 1: keep the recorded gaps */
    double speed;
    double sample_ms;
    int check;
} opt = {1, 1.0, 10.0, 0};

static _Atomic(void *) *blocks;
static uint64_t start_ns;
static atomic_int go, finished;
static atomic_ullong malloc_failures, waits;

struct worker {
    struct rthread *t;
    _Atomic int64_t live;
    _Atomic size_t at; /* the op this thread is on, from 1; past its last: all made */
    uint32_t index;
    char pad[36];
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t when)
{
    struct timespec ts = {(time_t)(when / 1000000000u), (long)(when % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void wait_a_little(unsigned spins)
{
    if (spins == 0)
        atomic_fetch_add_explicit(&waits, 1, memory_order_relaxed);
    if (spins < 64)
        sched_yield();
    else
        sleep_until(now_ns() + 20000);
}

static void *await(uint32_t id)
{
    void *p;
    for (unsigned spins = 0; (p = atomic_load_explicit(&blocks[id], memory_order_acquire)) == NULL;
         spins++)
        wait_a_little(spins);
    return p;
}

static void await_uses(uint32_t id)
{
    for (unsigned spins = 0;
         atomic_load_explicit(&b.uses_left[id], memory_order_acquire) != 0; spins++)
        wait_a_little(spins);
}

/* A block's pointer, once it exists, and once no other thread still has a use of it to
 * make when this op ends it. */
static void *block_for(const struct op *o, uint32_t id)
{
    void *p = o->wait & WAIT_MADE ? await(id)
                                  : atomic_load_explicit(&blocks[id], memory_order_relaxed);
    if (o->wait & WAIT_USED)
        await_uses(id);
    return p;
}

#define FAILED ((void *)1) /* a block whose allocation failed: nothing to free */

static void *fresh(const struct op *o)
{
    void *p = NULL;
    size_t size = (size_t)o->size;
    if (o->kind == MB_CALLOC)
        p = calloc(1, size);
    else if (o->kind == MB_MEMALIGN) {
        size_t align = o->align;
        if (align < sizeof(void *) || (align & (align - 1)) != 0)
            p = memalign(align ? align : 16, size);
        else if (posix_memalign(&p, align, size) != 0)
            p = NULL;
    } else
        p = malloc(size);
    if (p == NULL) {
        atomic_fetch_add(&malloc_failures, 1);
        return FAILED;
    }
    if (o->kind != MB_CALLOC)
        memset(p, 0x5a, size);
    return p;
}

static void run_op(struct worker *wk, const struct op *o)
{
    void *p;
    switch (o->kind) {
    case MB_MALLOC:
    case MB_CALLOC:
    case MB_MEMALIGN:
        atomic_store_explicit(&blocks[o->id], fresh(o), memory_order_release);
        atomic_fetch_add_explicit(&wk->live, (int64_t)o->size, memory_order_relaxed);
        break;
    case MB_FREE:
        p = block_for(o, o->id);
        if (p != FAILED)
            free(p);
        atomic_fetch_sub_explicit(&wk->live, (int64_t)b.size[o->id], memory_order_relaxed);
        break;
    case MB_REALLOC: {
        uint64_t old_size = o->old == NONE ? 0 : b.size[o->old];
        p = o->old == NONE ? NULL : block_for(o, o->old);
        if (p == FAILED)
            p = NULL;
        void *q = realloc(p, (size_t)o->size);
        if (q == NULL) {
            atomic_fetch_add(&malloc_failures, 1);
            if (p != NULL)
                free(p);
            q = FAILED;
        } else if (o->size > old_size) {
            memset((char *)q + old_size, 0x5a, (size_t)(o->size - old_size));
        }
        atomic_store_explicit(&blocks[o->id], q, memory_order_release);
        atomic_fetch_add_explicit(&wk->live, (int64_t)o->size - (int64_t)old_size,
                                  memory_order_relaxed);
        break;
    }
    case MB_USABLE:
        p = block_for(o, o->id);
        if (p != FAILED)
            (void)malloc_usable_size(p);
        if (o->use)
            atomic_fetch_sub_explicit(&b.uses_left[o->id], 1, memory_order_release);
        break;
    }
}

static atomic_uint turn; /* the next place in the global order to run */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

static void wait_turn(uint32_t seq, uint32_t self)
{
    for (unsigned spins = 0;; spins++) {
        unsigned now = atomic_load_explicit(&turn, memory_order_acquire);
        if (now == seq)
            return;
        if (spins < 256) {
            /* the thread before us is likely running on another CPU: a short busy wait
             * beats a sleep and a wake-up, and yielding would hand it our CPU's time */
            cpu_relax();
            continue;
        }
        /* asleep until the op before ours wakes this thread's bit (or turn moved on) */
        syscall(SYS_futex, &turn, FUTEX_WAIT_BITSET_PRIVATE, now, NULL, NULL, 1u << (self % 32));
    }
}

static void pass_turn(uint32_t seq, uint32_t self)
{
    atomic_store_explicit(&turn, seq + 1, memory_order_release);
    if ((size_t)seq + 1 < owners.len / 4) {
        uint32_t next = ((const uint32_t *)owners.data)[seq + 1];
        if (next != self)
            syscall(SYS_futex, &turn, FUTEX_WAKE_BITSET_PRIVATE, INT32_MAX, NULL, NULL,
                    1u << (next % 32));
    }
}

/* ---- a replay that dies says which call each thread was on: its place in the thread's
 * calls and its recorded time into the trace, so the call can be found (and the trace
 * replayed --until just past it). Written with write(2) only: the heap may be broken. */
static struct worker *crash_workers;
static uint32_t crash_nthreads;
static _Thread_local uint32_t crash_self = NONE;
static atomic_int crashing;

static const char *const kind_names[] = {"", "malloc", "calloc", "realloc_free", "realloc",
                                         "free", "memalign", "malloc_usable_size"};

struct line {
    char text[320];
    size_t len;
};

static void put_s(struct line *l, const char *s)
{
    while (*s && l->len < sizeof l->text - 1)
        l->text[l->len++] = *s++;
}

static void put_u(struct line *l, uint64_t v, int width)
{
    char digits[24];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0 && n < 24);
    while (n < width && n < 24)
        digits[n++] = '0';
    while (n > 0 && l->len < sizeof l->text - 1)
        l->text[l->len++] = digits[--n];
}

static void say(struct line *l)
{
    l->text[l->len++] = '\n';
    for (size_t done = 0; done < l->len;) {
        ssize_t n = write(STDERR_FILENO, l->text + done, l->len - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
}

static void put_thread(struct line *l, uint32_t i)
{
    put_s(l, "thread ");
    put_u(l, i + 1, 0);
    put_s(l, " of ");
    put_u(l, crash_nthreads, 0);
    put_s(l, " (recorded thread ");
    put_u(l, crash_workers[i].t->token, 0);
    put_s(l, ")");
}

static void report_thread(uint32_t i)
{
    const struct worker *w = &crash_workers[i];
    const struct op *ops = (const struct op *)w->t->ops.data;
    size_t n = w->t->ops.len / sizeof *ops, at = atomic_load(&w->at);
    struct line l = {.len = 0};
    put_s(&l, "mbreplay: crash: ");
    put_thread(&l, i);
    if (at == 0) {
        put_s(&l, " had not begun its ");
        put_u(&l, n, 0);
        put_s(&l, " calls");
    } else if (at > n) {
        put_s(&l, " had made all its ");
        put_u(&l, n, 0);
        put_s(&l, " calls");
    } else {
        const struct op *o = &ops[at - 1];
        put_s(&l, " was on its call ");
        put_u(&l, at, 0);
        put_s(&l, " of ");
        put_u(&l, n, 0);
        put_s(&l, ": a ");
        put_s(&l, o->kind < sizeof kind_names / sizeof *kind_names ? kind_names[o->kind] : "?");
        put_s(&l, " recorded ");
        put_u(&l, o->ts / 1000000000u, 0);
        put_s(&l, ".");
        put_u(&l, o->ts % 1000000000u, 9);
        put_s(&l, " s into the trace");
    }
    say(&l);
}

/* the signals report_crashes catches; sigabbrev_np would need glibc 2.32 */
static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGBUS:
        return "SIGBUS";
    case SIGILL:
        return "SIGILL";
    case SIGFPE:
        return "SIGFPE";
    default:
        return "SIGABRT";
    }
}

static void on_fatal(int sig)
{
    if (atomic_exchange(&crashing, 1) == 0) {
        struct line l = {.len = 0};
        put_s(&l, "mbreplay: crash: ");
        put_s(&l, signal_name(sig));
        put_s(&l, " in ");
        if (crash_self == NONE)
            put_s(&l, "the main thread");
        else
            put_thread(&l, crash_self);
        say(&l);
        for (uint32_t i = 0; i < crash_nthreads; i++)
            report_thread(i);
    } else {
        for (;;)
            pause(); /* another thread is reporting; its re-raised signal ends us all */
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void report_crashes(struct worker *workers, uint32_t nthreads)
{
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    crash_workers = workers;
    crash_nthreads = nthreads;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        sigaction(fatal[i], &sa, NULL);
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    const struct op *ops = (const struct op *)wk->t->ops.data;
    const uint32_t *seqs = (const uint32_t *)wk->t->seqs.data;
    uint32_t self = wk->index;
    size_t n = wk->t->ops.len / sizeof *ops;
    crash_self = self;
    while (!atomic_load(&go))
        sched_yield();
    for (size_t i = 0; i < n; i++) {
        if (opt.timing) {
            uint64_t when = start_ns + (uint64_t)((double)ops[i].ts / opt.speed);
            if (when > now_ns() + 20000)
                sleep_until(when);
        }
        if (strict_order)
            wait_turn(seqs[i], self);
        atomic_store_explicit(&wk->at, i + 1, memory_order_relaxed);
        run_op(wk, &ops[i]);
        if (strict_order)
            pass_turn(seqs[i], self);
    }
    atomic_store_explicit(&wk->at, n + 1, memory_order_relaxed);
    return NULL;
}

static long page_size;

static uint64_t rss_now(int fd)
{
    char text[128];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = 0;
    unsigned long long size = 0, resident = 0;
    if (sscanf(text, "%llu %llu", &size, &resident) != 2)
        return 0;
    return resident * (uint64_t)page_size;
}

struct sampler {
    struct worker *workers;
    uint32_t n;
    int fd;
    struct arr samples; /* {u64 t_ns, u64 rss, i64 live} */
    uint64_t peak_rss;
    int64_t peak_live;
};

static void take_sample(struct sampler *s)
{
    int64_t live = 0;
    for (uint32_t i = 0; i < s->n; i++)
        live += atomic_load_explicit(&s->workers[i].live, memory_order_relaxed);
    uint64_t rss = rss_now(s->fd);
    uint64_t *x = arr_grow(&s->samples, 24);
    x[0] = now_ns() - start_ns;
    x[1] = rss;
    memcpy(&x[2], &live, 8);
    if (rss > s->peak_rss)
        s->peak_rss = rss;
    if (live > s->peak_live)
        s->peak_live = live;
}

static void *sampler_main(void *arg)
{
    struct sampler *s = arg;
    uint64_t period = (uint64_t)(opt.sample_ms * 1e6);
    uint64_t next = now_ns();
    while (!atomic_load(&finished)) {
        take_sample(s);
        next += period;
        sleep_until(next);
    }
    return NULL;
}

/* The kernel's high-water mark of this process's RSS (VmHWM), and its reset ("5" into
 * clear_refs, Linux 4.0+): an exact peak over the replay, where the sampler can miss a
 * spike shorter than its period. */
static int reset_hwm(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

static uint64_t read_hwm(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (f == NULL)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024u;
}

static double tv(struct timeval t)
{
    return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* "key=value\n" lines as a JSON object */
static void json_kv(const char *text)
{
    char line[1024];
    int first = 1;
    putchar('{');
    while (*text) {
        size_t len = strcspn(text, "\n");
        snprintf(line, sizeof line, "%.*s", (int)len, text);
        text += len + (text[len] == '\n');
        char *eq = strchr(line, '=');
        if (eq == NULL)
            continue;
        *eq = 0;
        printf("%s", first ? "" : ", ");
        first = 0;
        json_str(line);
        printf(": ");
        json_str(eq + 1);
    }
    putchar('}');
}

static const char *malloc_library(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    if (sym != NULL && dladdr(sym, &info) != 0 && info.dli_fname != NULL)
        return info.dli_fname;
    return "unknown";
}

static void print_trace_json(uint32_t nthreads)
{
    printf("{\n  \"trace\": ");
    json_str(trace_path);
    printf(",\n  \"format_version\": %u,\n  \"status\": ", tr.version);
    json_str(tr.status);
    printf(",\n  \"info\": ");
    json_kv(tr.info);
    printf(",\n  \"end\": ");
    json_kv(tr.end);
    printf(",\n  \"bytes\": %llu,\n  \"frames\": %llu,\n  \"events\": %llu,\n  \"calls\": {",
           (unsigned long long)tr.bytes, (unsigned long long)tr.frames,
           (unsigned long long)tr.events);
    for (int k = MB_MALLOC; k <= MB_USABLE; k++)
        if (k != MB_REALLOC_FREE)
            printf("%s\"%s\": %llu", k == MB_MALLOC ? "" : ", ", kind_names[k],
                   (unsigned long long)tr.counts[k]);
    printf("},\n  \"end_frame\": %s,\n  \"calls_present\": %llu,\n  \"header_events\": %lld,\n",
           tr.end_frame ? "true" : "false", (unsigned long long)tr.read_events, header_events());
    printf("  \"threads\": %u,\n  \"snapshot_blocks\": %llu,\n  \"blocks\": %u,\n", nthreads,
           (unsigned long long)(tr.snapshot.len / 16), b.nblocks);
    printf("  \"skipped_frees\": %llu,\n  \"unknown_reallocs\": %llu,\n"
           "  \"implicit_frees\": %llu,\n  \"failed_reallocs\": %llu,\n",
           (unsigned long long)b.skipped_frees, (unsigned long long)b.unknown_reallocs,
           (unsigned long long)b.implicit_frees, (unsigned long long)b.failed_reallocs);
    if (until_ns)
        printf("  \"until_s\": %.6f,\n", (double)until_ns / 1e9);
    printf("  \"snapshot_live\": %lld,\n", (long long)b.snapshot_live);
    printf("  \"duration_s\": %.6f,\n  \"ideal_peak_live\": %lld,\n  \"ideal_peak_at_s\": %.6f,\n"
           "  \"final_live\": %lld,\n  \"ops\": %llu,\n  \"ideal_curve\": [",
           (double)b.duration_ns / 1e9, (long long)b.peak_live, (double)b.peak_live_ts / 1e9,
           (long long)b.final_live, (unsigned long long)b.nops);
    const int64_t *c = (const int64_t *)b.curve.data;
    for (size_t i = 0; i < b.curve.len / 16; i++)
        printf("%s[%.6f, %lld]", i ? ", " : "", (double)c[2 * i] / 1e9, (long long)c[2 * i + 1]);
    printf("]");
}

static void replay(uint32_t nthreads)
{
    struct rthread *threads = (struct rthread *)tr.threads.data;
    blocks = zmap(sizeof *blocks * (b.nblocks ? b.nblocks : 1));
    struct worker *workers = zmap(sizeof *workers * (nthreads ? nthreads : 1));
    for (uint32_t i = 0; i < nthreads; i++)
        workers[i].t = &threads[i];
    report_crashes(workers, nthreads);
    struct sampler s = {.workers = workers, .n = nthreads};
    s.fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    arr_grow(&s.samples, 24 * 100000); /* resident up front: no growth during the replay */
    memset(s.samples.data, 0, s.samples.len);
    s.samples.len = 0;
    uint64_t baseline = rss_now(s.fd);
    int64_t snap_live = 0;
    for (uint32_t id = 0; id < b.nblocks && b.creator[id] == NONE; id++) {
        struct op o = {0, b.size[id], id, NONE, MB_MALLOC, 0, 0, 0};
        blocks[id] = fresh(&o);
        snap_live += (int64_t)b.size[id];
    }
    pthread_t *tids = zmap(sizeof *tids * (nthreads + 1));
    for (uint32_t i = 0; i < nthreads; i++) {
        workers[i].t = &threads[i];
        workers[i].index = i;
        if (pthread_create(&tids[i], NULL, worker_main, &workers[i]) != 0)
            fail("cannot start replay thread %u of %u: %s", i + 1, nthreads, strerror(errno));
    }
    workers[0].live = snap_live; /* the snapshot's blocks count as live from the start */
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    start_ns = now_ns();
    pthread_t sampler;
    if (pthread_create(&sampler, NULL, sampler_main, &s) != 0)
        fail("cannot start the RSS sampler: %s", strerror(errno));
    int exact = reset_hwm();
    atomic_store(&go, 1);
    for (uint32_t i = 0; i < nthreads; i++)
        pthread_join(tids[i], NULL);
    uint64_t wall = now_ns() - start_ns;
    getrusage(RUSAGE_SELF, &ru1);
    atomic_store(&finished, 1);
    pthread_join(sampler, NULL);
    take_sample(&s);
    uint64_t hwm = exact ? read_hwm() : 0;
    if (hwm > s.peak_rss)
        s.peak_rss = hwm; /* a spike between two samples */
    double user = tv(ru1.ru_utime) - tv(ru0.ru_utime), sys = tv(ru1.ru_stime) - tv(ru0.ru_stime);
    uint64_t peak_heap = s.peak_rss > baseline ? s.peak_rss - baseline : 0;
    /* The steady peak: the sampled peak over the replay's second half. Its start makes the
     * blocks live when the window opened all at once, into a fresh heap, and some
     * allocators peak there (jemalloc 1.15x the base's at 2 s of a 60 s window, 1.09x from
     * 6 s on): a transient of the replay, not of the recorded server. */
    uint64_t steady_from = wall / 2, steady_peak = 0;
    const uint64_t *x = (const uint64_t *)s.samples.data;
    size_t ns = s.samples.len / 24;
    for (size_t i = 0; i < ns; i++)
        if (x[3 * i] >= steady_from && x[3 * i + 1] > steady_peak)
            steady_peak = x[3 * i + 1];
    printf(",\n  \"timing\": \"%s\",\n  \"speed\": %g,\n  \"order\": \"%s\",\n"
           "  \"malloc_library\": ",
           opt.timing ? "recorded" : "none", opt.speed, strict_order ? "recorded" : "threads");
    json_str(malloc_library());
    printf(",\n  \"wall_s\": %.6f,\n  \"user_s\": %.6f,\n  \"sys_s\": %.6f,\n  \"cpu_s\": %.6f,\n",
           (double)wall / 1e9, user, sys, user + sys);
    printf("  \"calls_per_s\": %.1f,\n  \"baseline_rss\": %llu,\n  \"peak_rss\": %llu,\n"
           "  \"peak_heap_rss\": %llu,\n  \"max_rss_kernel\": %llu,\n  \"peak_exact\": %s,\n",
           wall ? (double)b.nops / ((double)wall / 1e9) : 0.0, (unsigned long long)baseline,
           (unsigned long long)s.peak_rss, (unsigned long long)peak_heap,
           (unsigned long long)ru1.ru_maxrss * 1024ull, exact && hwm ? "true" : "false");
    printf("  \"peak_heap_rss_steady\": %llu,\n  \"steady_from_s\": %.6f,\n",
           (unsigned long long)(steady_peak > baseline ? steady_peak - baseline : 0),
           (double)steady_from / 1e9);
    printf("  \"replay_peak_live\": %lld,\n  \"rss_over_live\": %.4f,\n  \"malloc_failures\": "
           "%llu,\n  \"waits\": %llu,\n  \"samples\": [",
           (long long)s.peak_live, b.peak_live > 0 ? (double)peak_heap / (double)b.peak_live : 0.0,
           (unsigned long long)malloc_failures, (unsigned long long)waits);
    size_t stride = ns / 2000 + 1;
    for (size_t i = 0; i < ns; i++) {
        if (i % stride != 0 && i + 1 != ns)
            continue;
        int64_t live;
        memcpy(&live, &x[3 * i + 2], 8);
        printf("%s[%.4f, %llu, %lld]", i ? ", " : "", (double)x[3 * i] / 1e9,
               (unsigned long long)(x[3 * i + 1] > baseline ? x[3 * i + 1] - baseline : 0),
               (long long)live);
    }
    printf("]");
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mbreplay TRACE [--check] [--timing recorded|none] [--speed N] "
            "[--order threads|recorded] [--until SECONDS] [--sample-ms MS]\n"
            "Replays an mbrecord trace under the allocator this process runs with; JSON on "
            "stdout.\n");
    exit(2);
}

/* A trace with nothing to replay is refused; one cut short (no END frame, or fewer calls
 * than its header counts) is replayed, and print_trace_json says how much is there. */
static void check_calls(void)
{
    if (tr.read_events > 0)
        return;
    if (tr.frames == 0)
        fail("%s: header only, no calls to replay (the recorder wrote no frame; its status "
             "says \"%s\"): record again, for a window in which the process runs",
             trace_path, tr.status);
    fail("%s: no calls to replay (the recorded window caught none; its status says \"%s\"): "
         "record again while the process is busy", trace_path, tr.status);
}

/* One replay at --timing recorded lasts the trace's span over --speed: more than a day is
 * refused (a 1e15 ns gap would otherwise sleep for weeks, and its deadline overflows). */
#define MAX_REPLAY_NS 86400e9

static void check_span(uint64_t span_ns)
{
    if (!opt.timing || opt.check || (double)span_ns / opt.speed <= MAX_REPLAY_NS)
        return;
    fail("%s: spans %.0f s; at --speed %g one replay would take %.1f days, over the bound of "
         "1 day: give --speed %.3g or more, or --timing none", trace_path, (double)span_ns / 1e9,
         opt.speed, (double)span_ns / opt.speed / 86400e9, (double)span_ns / MAX_REPLAY_NS);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--check") == 0)
            opt.check = 1;
        else if (strcmp(a, "--timing") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "recorded") != 0 && strcmp(v, "none") != 0)
                fail("--timing must be recorded or none, not %s", v);
            opt.timing = strcmp(v, "recorded") == 0;
        } else if (strcmp(a, "--speed") == 0 && i + 1 < argc) {
            opt.speed = strtod(argv[++i], NULL);
            if (!(opt.speed > 0 && opt.speed < 1e6))
                fail("--speed must be a positive number, like 2 (twice as fast)");
        } else if (strcmp(a, "--order") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "recorded") != 0 && strcmp(v, "threads") != 0)
                fail("--order must be threads or recorded, not %s", v);
            strict_order = strcmp(v, "recorded") == 0;
        } else if (strcmp(a, "--until") == 0 && i + 1 < argc) {
            double until = strtod(argv[++i], NULL);
            if (!(until > 0 && until < 1e9))
                fail("--until must be a positive number of seconds, like 20");
            until_ns = (uint64_t)(until * 1e9);
        } else if (strcmp(a, "--sample-ms") == 0 && i + 1 < argc) {
            opt.sample_ms = strtod(argv[++i], NULL);
            if (!(opt.sample_ms >= 1 && opt.sample_ms <= 10000))
                fail("--sample-ms must be between 1 and 10000");
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            usage();
        else if (a[0] == '-' || path != NULL)
            fail("unknown argument %s (see mbreplay --help)", a);
        else
            path = a;
    }
    if (path == NULL)
        usage();
    page_size = sysconf(_SC_PAGESIZE);
    load(path);
    check_calls();
    build();
    check_span(b.duration_ns);
    uint32_t nthreads = (uint32_t)(tr.threads.len / sizeof(struct rthread));
    print_trace_json(nthreads);
    if (!opt.check) {
        fflush(stdout);
        replay(nthreads);
    }
    printf("\n}\n");
    return 0;
}
