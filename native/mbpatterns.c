/*
 * mbpatterns: replay database-shaped allocation patterns under whatever malloc the
 * process was started with (choose one with LD_PRELOAD), and report ops/s, peak RSS and
 * RSS per live byte as one JSON object on stdout.
 *
 * The binary must not be linked against any allocator and is compiled with
 * -fno-builtin-malloc/-calloc/-memset, so that malloc+memset stays malloc+memset: the
 * compiler folding it into calloc is one of the effects this driver demonstrates, and
 * `sortbuf --init` makes that choice explicit instead.
 *
 * Accounting: every allocation goes through mb_alloc/mb_free, which add the requested
 * size to per-thread counters. Each counter has one writer, so updates are plain relaxed
 * stores (no lock prefix, no shared cache line) and do not distort the allocator being
 * measured; the monitor thread sums them. A block freed by another thread is counted
 * by the freeing thread, so the sum stays exact.
 */
#include "mbcommon.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 1024
#define WORKER_STACK (512 * 1024)

/* ---------------------------------------------------------------------------------- */
/* errors                                                                              */

static void usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("mbpatterns: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see mbpatterns --help)\n", stderr);
    exit(2);
}

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("mbpatterns: fatal: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(3);
}

/* ---------------------------------------------------------------------------------- */
/* per-thread state and accounting                                                     */

typedef struct {
    _Alignas(64) _Atomic uint64_t alloc_bytes;
    _Atomic uint64_t freed_bytes;
    _Atomic uint64_t allocs;
    _Atomic uint64_t frees;
    _Atomic uint64_t ops;
    _Atomic uint64_t remote_frees; /* xthread: blocks freed by a thread other than their allocator */
    _Atomic uint64_t local_frees;  /* xthread: queue full, freed by the allocating thread */
    int64_t own_live; /* bytes this thread allocated minus bytes it freed */
    int64_t own_peak;
    uint64_t rng;
    double start_time; /* each worker's own: main may run late after the barrier */
    double end_time;
    int index;
    pthread_t tid;
    void *pattern_state;
} thread_state;

/* Slot `threads` belongs to the main thread (shared structures, teardown). */
static thread_state states[MAX_THREADS + 1];

static inline void counter_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* Where no block is freed by another thread, each thread's own live bytes never exceed
 * the process total, so their peaks are exact lower bounds on the peak that the sampler
 * can miss between two samples (a sort buffer lives for microseconds). */
static inline void own_add(thread_state *ts, int64_t delta)
{
    ts->own_live += delta;
    if (ts->own_live > ts->own_peak)
        ts->own_peak = ts->own_live;
}

/* sortbuf makes one large allocation per operation, so a shared counter costs nothing
 * there and gives the exact peak over all threads (buffers of several threads overlap
 * for microseconds, which sampling would miss). Other patterns make millions of small
 * allocations, where a shared counter would be the bottleneck being measured. */
static _Atomic uint64_t shared_live, shared_peak;
static int exact_peak;

static inline void shared_add(uint64_t size)
{
    uint64_t now_live = atomic_fetch_add(&shared_live, size) + size;
    uint64_t peak = atomic_load_explicit(&shared_peak, memory_order_relaxed);
    while (now_live > peak && !atomic_compare_exchange_weak(&shared_peak, &peak, now_live))
        ;
}

static void *mb_alloc(thread_state *ts, size_t size)
{
    void *p = malloc(size);
    if (p == NULL)
        die("malloc(%zu) failed: out of memory", size);
    own_add(ts, (int64_t)size);
    if (exact_peak)
        shared_add(size);
    counter_add(&ts->alloc_bytes, size);
    counter_add(&ts->allocs, 1);
    return p;
}

static void *mb_calloc(thread_state *ts, size_t size)
{
    void *p = calloc(1, size);
    if (p == NULL)
        die("calloc(%zu) failed: out of memory", size);
    own_add(ts, (int64_t)size);
    if (exact_peak)
        shared_add(size);
    counter_add(&ts->alloc_bytes, size);
    counter_add(&ts->allocs, 1);
    return p;
}

static void mb_free(thread_state *ts, void *p, size_t size)
{
    if (p == NULL)
        return;
    free(p);
    own_add(ts, -(int64_t)size);
    if (exact_peak)
        atomic_fetch_sub(&shared_live, size);
    counter_add(&ts->freed_bytes, size);
    counter_add(&ts->frees, 1);
}

/* ---------------------------------------------------------------------------------- */
/* random numbers: splitmix64, one stream per thread, so --seed makes runs repeatable  */

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((__uint128_t)rng_next(s) * n) >> 64);
}

static inline double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static inline size_t rng_uniform_size(uint64_t *s, size_t lo, size_t hi)
{
    return lo + (size_t)rng_below(s, (uint64_t)(hi - lo + 1));
}

/* Log-uniform: small objects dominate, as in per-query heaps. */
static inline size_t rng_log_size(uint64_t *s, size_t lo, size_t hi)
{
    if (lo == hi)
        return lo;
    double v = exp(log((double)lo) + rng_unit(s) * (log((double)hi + 1.0) - log((double)lo)));
    size_t r = (size_t)v;
    return r < lo ? lo : (r > hi ? hi : r);
}

static inline uint64_t hash64(uint64_t x)
{
    uint64_t s = x;
    return rng_next(&s);
}

/* ---------------------------------------------------------------------------------- */
/* options                                                                             */

enum { P_SORTBUF = 1, P_BLOCKCACHE = 2, P_OLTP = 4, P_XTHREAD = 8, P_ALL = 15 };
enum { INIT_MEMSET, INIT_CALLOC, INIT_NONE };

static const char *const pattern_names[] = {"sortbuf", "blockcache", "oltp", "xthread"};

typedef struct {
    int pattern; /* one P_* bit */
    int threads;
    double seconds;
    uint64_t ops; /* per thread; 0: run for `seconds` */
    uint64_t seed;
    int sample_ms;
    /* sortbuf */
    size_t size;
    int init;
    size_t touch;
    /* blockcache, oltp, xthread */
    size_t min_size, max_size;
    /* blockcache */
    size_t capacity;
    uint64_t keys;
    double pinned;
    uint64_t pin_ops;
    int shards;
    /* oltp */
    int allocs;
    uint64_t long_lived;
    double long_rate;
    /* xthread */
    int batch;
    int queue;
} options;

static options opt;

static const char help_text[] =
    "usage: mbpatterns PATTERN [options]\n"
    "\n"
    "Replay a database-shaped allocation pattern under the malloc this process runs with\n"
    "and print one JSON object: ops/s, peak and final RSS, live bytes requested and not\n"
    "yet freed, and RSS divided by live bytes. Choose the allocator at run time:\n"
    "\n"
    "  mbpatterns blockcache --threads 4 --seconds 2\n"
    "  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 mbpatterns blockcache ...\n"
    "  MALLOC_MMAP_MAX_=0 mbpatterns sortbuf --size 32M --threads 2\n"
    "\n"
    "patterns:\n"
    "  sortbuf     per operation: allocate a SIZE buffer, initialise it (--init), write\n"
    "              --touch bytes of it, free it. A per-query sort/join buffer. With glibc,\n"
    "              32M is above the largest dynamic mmap threshold, so every operation\n"
    "              maps and unmaps (compare MALLOC_MMAP_MAX_=0).\n"
    "  blockcache  a sharded LRU cache of variable-size blocks with a capacity in bytes;\n"
    "              a read that misses allocates a temporary read buffer and the block,\n"
    "              inserts it and evicts least recently used blocks (often allocated by\n"
    "              another thread). A fraction of reads pin their block for --pin-ops\n"
    "              operations, so lifetimes mix: RocksDB's block cache.\n"
    "  oltp        per operation: --allocs small objects (log-uniform sizes) freed at its\n"
    "              end, and now and then one long-lived object replaced in a per-thread\n"
    "              pool of --long-lived objects: a query's heap amid session state.\n"
    "  xthread     each thread allocates --batch blocks per operation and hands them to\n"
    "              the next thread, which frees them: producer/consumer frees.\n"
    "\n"
    "common options:\n"
    "  --threads N       worker threads (default 1)\n"
    "  --seconds S       run for S seconds (default 1)\n"
    "  --ops N           instead run exactly N operations per thread (deterministic with\n"
    "                    one thread)\n"
    "  --seed N          random seed (default 1); thread i uses its own stream\n"
    "  --sample-ms N     RSS and live-bytes sampling interval (default 10)\n"
    "\n"
    "sortbuf:\n"
    "  --size BYTES      buffer size (default 2M); sizes take K, M, G suffixes (x1024)\n"
    "  --init MODE       memset: malloc then memset to zero (default); calloc: calloc;\n"
    "                    none: malloc only\n"
    "  --touch BYTES     bytes written per operation after init (default 64K, at most SIZE)\n"
    "\n"
    "blockcache:\n"
    "  --capacity BYTES  cache capacity (default 64M)\n"
    "  --min-size BYTES  smallest block (default 4K)\n"
    "  --max-size BYTES  largest block (default 64K)\n"
    "  --keys N          distinct blocks read, uniformly (default: 2 x capacity / mean size,\n"
    "                    about a 50%% hit rate)\n"
    "  --pinned F        fraction of reads that pin their block (default 0.02)\n"
    "  --pin-ops N       operations a pinned block stays pinned (default 2000)\n"
    "  --shards N        cache shards, each with its own lock (default 16)\n"
    "\n"
    "oltp:\n"
    "  --allocs N        short-lived allocations per operation (default 50)\n"
    "  --min-size BYTES  smallest object (default 16)\n"
    "  --max-size BYTES  largest object (default 512)\n"
    "  --long-lived N    long-lived objects per thread (default 4096)\n"
    "  --long-rate F     long-lived objects replaced per operation (default 0.1)\n"
    "\n"
    "xthread:\n"
    "  --batch N         blocks handed over per operation (default 32)\n"
    "  --queue N         blocks a thread's queue holds; when full the producer frees the\n"
    "                    block itself, counted as local_frees (default 4096)\n"
    "  --min-size BYTES  smallest block (default 16)\n"
    "  --max-size BYTES  largest block (default 4K)\n"
    "\n"
    "output (JSON on stdout): ops_per_sec, peak_rss_bytes (VmHWM), final_rss_bytes (after\n"
    "the run, before teardown), live_bytes (requested and not freed at the end),\n"
    "peak_live_bytes (sampled every --sample-ms), rss_per_live = final RSS / live bytes, peak_rss_per_live =\n"
    "peak RSS / peak live bytes, baseline_rss_bytes (before the pattern allocated), and\n"
    "malloc_library: the file whose malloc() this process actually calls.\n"
    "Bad options print one line on stderr and exit with status 2.\n";

static size_t parse_size(const char *name, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || v < 0 || !isfinite(v))
        usage_error("%s expects a size like 4096, 64K, 2M or 1G, not '%s'", name, s);
    double mult = 1;
    switch (*end) {
    case 'k': case 'K': mult = 1024.0; end++; break;
    case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        usage_error("%s expects a size like 4096, 64K, 2M or 1G, not '%s'", name, s);
    v *= mult;
    if (v > (double)(SIZE_MAX / 4))
        usage_error("%s %s is too large", name, s);
    return (size_t)v;
}

static uint64_t parse_count(const char *name, const char *s, uint64_t lo, uint64_t hi)
{
    char *end;
    errno = 0;
    if (*s == '-' || *s == '\0')
        usage_error("%s expects a whole number from %" PRIu64 " to %" PRIu64 ", not '%s'",
                    name, lo, hi, s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        usage_error("%s expects a whole number from %" PRIu64 " to %" PRIu64 ", not '%s'",
                    name, lo, hi, s);
    return (uint64_t)v;
}

static double parse_real(const char *name, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v < lo || v > hi)
        usage_error("%s expects a number from %g to %g, not '%s'", name, lo, hi, s);
    return v;
}

static int parse_init(const char *name, const char *s)
{
    if (strcmp(s, "memset") == 0)
        return INIT_MEMSET;
    if (strcmp(s, "calloc") == 0)
        return INIT_CALLOC;
    if (strcmp(s, "none") == 0)
        return INIT_NONE;
    usage_error("%s expects memset, calloc or none, not '%s'", name, s);
}

enum { OPT_INT, OPT_U64, OPT_SIZE, OPT_REAL, OPT_INIT };

/* One row per option: which patterns accept it, how its value is read and where it is
 * stored. The typed union lets the compiler check each target against its kind. */
typedef struct {
    const char *name;
    int patterns; /* which patterns accept it */
    int kind;     /* OPT_*: the member of `to` and the bounds that apply */
    union {
        int *i;      /* OPT_INT, OPT_INIT */
        uint64_t *u; /* OPT_U64 */
        size_t *z;   /* OPT_SIZE */
        double *d;   /* OPT_REAL */
    } to;
    uint64_t lo, hi; /* OPT_INT, OPT_U64 */
    double rlo, rhi; /* OPT_REAL */
} option_def;

#define INT_OPT(n, p, field, l, h) {n, p, OPT_INT, {.i = &opt.field}, l, h, 0, 0}
#define U64_OPT(n, p, field, l, h) {n, p, OPT_U64, {.u = &opt.field}, l, h, 0, 0}
#define SIZE_OPT(n, p, field) {n, p, OPT_SIZE, {.z = &opt.field}, 0, 0, 0, 0}
#define REAL_OPT(n, p, field, l, h) {n, p, OPT_REAL, {.d = &opt.field}, 0, 0, l, h}

enum { P_SIZED = P_BLOCKCACHE | P_OLTP | P_XTHREAD };

static const option_def option_defs[] = {
    INT_OPT("--threads", P_ALL, threads, 1, MAX_THREADS),
    REAL_OPT("--seconds", P_ALL, seconds, 0.001, 86400),
    U64_OPT("--ops", P_ALL, ops, 1, UINT64_MAX / 2),
    U64_OPT("--seed", P_ALL, seed, 0, UINT64_MAX),
    INT_OPT("--sample-ms", P_ALL, sample_ms, 1, 1000),
    SIZE_OPT("--size", P_SORTBUF, size),
    {"--init", P_SORTBUF, OPT_INIT, {.i = &opt.init}, 0, 0, 0, 0},
    SIZE_OPT("--touch", P_SORTBUF, touch),
    SIZE_OPT("--capacity", P_BLOCKCACHE, capacity),
    U64_OPT("--keys", P_BLOCKCACHE, keys, 1, 1ULL << 32),
    REAL_OPT("--pinned", P_BLOCKCACHE, pinned, 0, 1),
    U64_OPT("--pin-ops", P_BLOCKCACHE, pin_ops, 1, 1u << 24),
    INT_OPT("--shards", P_BLOCKCACHE, shards, 1, 1024),
    INT_OPT("--allocs", P_OLTP, allocs, 1, 1u << 20),
    U64_OPT("--long-lived", P_OLTP, long_lived, 0, 1u << 24),
    REAL_OPT("--long-rate", P_OLTP, long_rate, 0, 1),
    INT_OPT("--batch", P_XTHREAD, batch, 1, 1u << 16),
    INT_OPT("--queue", P_XTHREAD, queue, 1, 1u << 24),
    SIZE_OPT("--min-size", P_SIZED, min_size),
    SIZE_OPT("--max-size", P_SIZED, max_size),
};

#define N_OPTIONS (sizeof option_defs / sizeof option_defs[0])

/* Which options the command line set, for checks that treat a default differently. */
static char option_given[N_OPTIONS];

static const option_def *find_option(const char *name)
{
    for (size_t k = 0; k < N_OPTIONS; k++)
        if (strcmp(option_defs[k].name, name) == 0)
            return &option_defs[k];
    return NULL;
}

static int given(const char *name)
{
    return option_given[find_option(name) - option_defs];
}

static void set_option(const option_def *def, const char *value)
{
    option_given[def - option_defs] = 1;
    switch (def->kind) {
    case OPT_INT: *def->to.i = (int)parse_count(def->name, value, def->lo, def->hi); break;
    case OPT_U64: *def->to.u = parse_count(def->name, value, def->lo, def->hi); break;
    case OPT_SIZE: *def->to.z = parse_size(def->name, value); break;
    case OPT_REAL: *def->to.d = parse_real(def->name, value, def->rlo, def->rhi); break;
    case OPT_INIT: *def->to.i = parse_init(def->name, value); break;
    default: die("option %s has no kind", def->name);
    }
}

static void accepted_by(int mask, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < 4; i++) {
        if (mask & (1 << i)) {
            if (buf[0] != '\0')
                strncat(buf, ", ", len - strlen(buf) - 1);
            strncat(buf, pattern_names[i], len - strlen(buf) - 1);
        }
    }
}

static void parse_options(int argc, char **argv)
{
    if (argc < 2)
        usage_error("name a pattern: sortbuf, blockcache, oltp or xthread");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(help_text, stdout);
            exit(0);
        }
    }
    const char *pname = argv[1];
    opt.pattern = 0;
    for (int i = 0; i < 4; i++)
        if (strcmp(pname, pattern_names[i]) == 0)
            opt.pattern = 1 << i;
    if (opt.pattern == 0)
        usage_error("unknown pattern '%s': use sortbuf, blockcache, oltp or xthread", pname);

    opt.threads = 1;
    opt.seconds = 1.0;
    opt.ops = 0;
    opt.seed = 1;
    opt.sample_ms = 10;
    opt.size = 2u << 20;
    opt.init = INIT_MEMSET;
    opt.touch = 64u << 10;
    opt.capacity = 64u << 20;
    opt.keys = 0;
    opt.pinned = 0.02;
    opt.pin_ops = 2000;
    opt.shards = 16;
    opt.allocs = 50;
    opt.long_lived = 4096;
    opt.long_rate = 0.1;
    opt.batch = 32;
    opt.queue = 4096;
    switch (opt.pattern) {
    case P_BLOCKCACHE: opt.min_size = 4u << 10; opt.max_size = 64u << 10; break;
    case P_OLTP: opt.min_size = 16; opt.max_size = 512; break;
    default: opt.min_size = 16; opt.max_size = 4096; break;
    }

    for (int i = 2; i < argc; i++) {
        char name[64];
        const char *arg = argv[i];
        const char *value;
        if (strncmp(arg, "--", 2) != 0)
            usage_error("unexpected argument '%s': options look like --threads 4", arg);
        const char *eq = strchr(arg, '=');
        if (eq != NULL) {
            size_t n = (size_t)(eq - arg);
            if (n >= sizeof name)
                usage_error("unknown option '%s'", arg);
            memcpy(name, arg, n);
            name[n] = '\0';
            value = eq + 1;
        } else {
            if (strlen(arg) >= sizeof name)
                usage_error("unknown option '%s'", arg);
            strcpy(name, arg);
            value = NULL;
        }
        const option_def *def = find_option(name);
        if (def == NULL)
            usage_error("unknown option '%s'", name);
        if (!(def->patterns & opt.pattern)) {
            char which[64];
            accepted_by(def->patterns, which, sizeof which);
            usage_error("%s applies to %s, not to %s", name, which, pname);
        }
        if (value == NULL) {
            if (i + 1 >= argc)
                usage_error("%s needs a value", name);
            value = argv[++i];
        }

        set_option(def, value);
    }

    if (opt.ops != 0 && given("--seconds"))
        usage_error("give either --seconds or --ops, not both");
    if (opt.pattern == P_SORTBUF) {
        if (opt.size == 0)
            usage_error("--size must be at least 1 byte");
        if (given("--touch") && opt.touch > opt.size)
            usage_error("--touch (%zu) cannot exceed --size (%zu)", opt.touch, opt.size);
        if (opt.touch > opt.size)
            opt.touch = opt.size;
    } else {
        if (opt.min_size == 0)
            usage_error("--min-size must be at least 1 byte");
        if (opt.min_size > opt.max_size)
            usage_error("--min-size (%zu) is larger than --max-size (%zu)", opt.min_size,
                        opt.max_size);
    }
    if (opt.pattern == P_BLOCKCACHE) {
        if (opt.capacity < opt.max_size)
            usage_error("--capacity (%zu) must hold at least one block of --max-size (%zu)",
                        opt.capacity, opt.max_size);
        if (opt.keys == 0) {
            uint64_t mean = (opt.min_size + opt.max_size) / 2;
            opt.keys = 2 * (opt.capacity / mean) + 1;
        }
    }
}

/* ---------------------------------------------------------------------------------- */
/* time, RSS                                                                           */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long page_size;

/* /proc reads use read(2) into a stack buffer: stdio would malloc and disturb both the
 * allocator under test and the live-byte audit. */
static ssize_t read_proc(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t total = 0;
    while ((size_t)total < len - 1) {
        ssize_t n = read(fd, buf + total, len - 1 - (size_t)total);
        if (n <= 0)
            break;
        total += n;
    }
    close(fd);
    buf[total] = '\0';
    return total;
}

static void read_statm(uint64_t *vsz, uint64_t *rss)
{
    char buf[256];
    unsigned long long size = 0, resident = 0;
    if (read_proc("/proc/self/statm", buf, sizeof buf) > 0)
        sscanf(buf, "%llu %llu", &size, &resident);
    *vsz = size * (uint64_t)page_size;
    *rss = resident * (uint64_t)page_size;
}

static uint64_t status_kb(const char *field)
{
    char buf[4096];
    if (read_proc("/proc/self/status", buf, sizeof buf) <= 0)
        return 0;
    const char *p = strstr(buf, field);
    if (p == NULL)
        return 0;
    p += strlen(field);
    while (*p == ' ' || *p == '\t' || *p == ':')
        p++;
    return strtoull(p, NULL, 10) * 1024;
}

/* ---------------------------------------------------------------------------------- */
/* run control                                                                         */

static _Atomic int stop_flag;
static pthread_barrier_t barrier;

static inline int keep_going(uint64_t done)
{
    if (opt.ops != 0)
        return done < opt.ops;
    return !atomic_load_explicit(&stop_flag, memory_order_relaxed);
}

static uint64_t sum_live(void)
{
    uint64_t a = 0, f = 0;
    for (int i = 0; i <= opt.threads; i++) {
        /* read frees first: a block allocated and freed between the two reads then
         * counts as live instead of making the difference go negative */
        f += atomic_load_explicit(&states[i].freed_bytes, memory_order_relaxed);
    }
    for (int i = 0; i <= opt.threads; i++)
        a += atomic_load_explicit(&states[i].alloc_bytes, memory_order_relaxed);
    return a > f ? a - f : 0;
}

/* ---------------------------------------------------------------------------------- */
/* sortbuf                                                                             */

static uint64_t sink; /* keeps reads from being optimised away */

static void sortbuf_run(thread_state *ts)
{
    uint64_t done = 0, sum = 0;
    size_t size = opt.size, touch = opt.touch;
    while (keep_going(done)) {
        unsigned char *p;
        if (opt.init == INIT_CALLOC) {
            p = mb_calloc(ts, size);
        } else {
            p = mb_alloc(ts, size);
            if (opt.init == INIT_MEMSET)
                memset(p, 0, size);
        }
        if (touch > 0) {
            memset(p, (int)(done & 0xff) | 1, touch);
            for (size_t off = 0; off < touch; off += 4096)
                sum += p[off];
        }
        sum += p[size - 1];
        mb_free(ts, p, size);
        done++;
        counter_add(&ts->ops, 1);
    }
    __atomic_fetch_add(&sink, sum, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------------------------- */
/* blockcache                                                                          */

typedef struct entry {
    struct entry *hnext;
    struct entry *prev, *next; /* LRU list, most recent after the head */
    uint64_t key;
    size_t size;
    int refs; /* the cache's own reference plus readers and pins; under the shard lock */
    int in_cache;
    unsigned char *data;
} entry;

typedef struct {
    _Alignas(64) pthread_mutex_t lock;
    entry **buckets;
    size_t nbuckets; /* power of two */
    entry lru;       /* sentinel */
    size_t usage, capacity;
} shard;

static shard *shards;
static int nshards;

typedef struct {
    entry **pins;
    uint64_t *pin_release_at;
    size_t head, count, cap;
} bc_thread;

static size_t block_size_of(uint64_t key)
{
    uint64_t h = hash64(key ^ 0x5bd1e995ULL);
    return opt.min_size + (size_t)(h % (opt.max_size - opt.min_size + 1));
}

static void entry_free(thread_state *ts, entry *e)
{
    mb_free(ts, e->data, e->size);
    mb_free(ts, e, sizeof *e);
}

/* High bits pick the shard, low bits the bucket, so the two choices are independent. */
static inline shard *shard_of(uint64_t h)
{
    return &shards[(h >> 40) % (uint64_t)nshards];
}

static void lru_unlink(entry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push_front(shard *s, entry *e)
{
    e->next = s->lru.next;
    e->prev = &s->lru;
    s->lru.next->prev = e;
    s->lru.next = e;
}

static void hash_remove(shard *s, entry *e)
{
    entry **pp = &s->buckets[hash64(e->key) & (s->nbuckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
}

static void blockcache_setup(thread_state *main_ts)
{
    nshards = opt.shards;
    shards = mb_alloc(main_ts, sizeof(shard) * (size_t)nshards);
    size_t per_shard_keys = (size_t)(opt.keys / (uint64_t)nshards) + 1;
    size_t nb = 16;
    while (nb < per_shard_keys)
        nb <<= 1;
    for (int i = 0; i < nshards; i++) {
        shard *s = &shards[i];
        memset(s, 0, sizeof *s);
        pthread_mutex_init(&s->lock, NULL);
        s->nbuckets = nb;
        s->buckets = mb_calloc(main_ts, nb * sizeof(entry *));
        s->lru.next = s->lru.prev = &s->lru;
        s->capacity = opt.capacity / (size_t)nshards;
        if (s->capacity < opt.max_size)
            s->capacity = opt.max_size;
    }
}

/* Drop one reference; the last one frees the block. Caller holds the shard lock and
 * frees *victim after unlocking, so allocator work stays outside the critical section. */
static entry *unref_locked(entry *e)
{
    return --e->refs == 0 ? e : NULL;
}

static void release(thread_state *ts, entry *e)
{
    shard *s = shard_of(hash64(e->key));
    pthread_mutex_lock(&s->lock);
    entry *dead = unref_locked(e);
    pthread_mutex_unlock(&s->lock);
    if (dead != NULL)
        entry_free(ts, dead);
}

static void bc_thread_setup(thread_state *ts)
{
    bc_thread *bt = mb_alloc(ts, sizeof *bt);
    memset(bt, 0, sizeof *bt);
    bt->cap = (size_t)opt.pin_ops;
    bt->pins = mb_alloc(ts, bt->cap * sizeof(entry *));
    bt->pin_release_at = mb_alloc(ts, bt->cap * sizeof(uint64_t));
    ts->pattern_state = bt;
}

static void bc_thread_teardown(thread_state *ts, thread_state *main_ts)
{
    bc_thread *bt = ts->pattern_state;
    while (bt->count > 0) {
        release(main_ts, bt->pins[bt->head]);
        bt->head = (bt->head + 1) % bt->cap;
        bt->count--;
    }
    mb_free(main_ts, bt->pins, bt->cap * sizeof(entry *));
    mb_free(main_ts, bt->pin_release_at, bt->cap * sizeof(uint64_t));
    mb_free(main_ts, bt, sizeof *bt);
}

static void blockcache_run(thread_state *ts)
{
    bc_thread *bt = ts->pattern_state;
    uint64_t done = 0, sum = 0;
    entry *victims[64];
    while (keep_going(done)) {
        /* unpin what has been held long enough */
        while (bt->count > 0 && bt->pin_release_at[bt->head] <= done) {
            release(ts, bt->pins[bt->head]);
            bt->head = (bt->head + 1) % bt->cap;
            bt->count--;
        }

        uint64_t key = rng_below(&ts->rng, opt.keys);
        uint64_t h = hash64(key);
        shard *s = shard_of(h);
        size_t bucket = h & (s->nbuckets - 1);

        pthread_mutex_lock(&s->lock);
        entry *e = s->buckets[bucket];
        while (e != NULL && e->key != key)
            e = e->hnext;
        if (e != NULL) {
            lru_unlink(e);
            lru_push_front(s, e);
            e->refs++;
        }
        pthread_mutex_unlock(&s->lock);

        if (e == NULL) {
            /* miss: read the (compressed) block into a temporary buffer, then build the
             * cached block from it; the short-lived buffer lands between long-lived
             * blocks, as in a real block cache */
            size_t size = block_size_of(key);
            size_t raw = size / 2 + (size_t)rng_below(&ts->rng, size / 2 + 1);
            if (raw == 0)
                raw = 1;
            unsigned char *tmp = mb_alloc(ts, raw);
            memset(tmp, (int)(key & 0xff), raw);
            entry *fresh = mb_alloc(ts, sizeof *fresh);
            memset(fresh, 0, sizeof *fresh);
            fresh->key = key;
            fresh->size = size;
            fresh->data = mb_alloc(ts, size);
            for (size_t off = 0; off < size; off += raw)
                memcpy(fresh->data + off, tmp, size - off < raw ? size - off : raw);
            mb_free(ts, tmp, raw);

            int nvictims = 0;
            pthread_mutex_lock(&s->lock);
            e = s->buckets[bucket];
            while (e != NULL && e->key != key)
                e = e->hnext;
            if (e != NULL) {
                /* another thread inserted it meanwhile: use theirs */
                lru_unlink(e);
                lru_push_front(s, e);
                e->refs++;
            } else {
                e = fresh;
                fresh = NULL;
                e->refs = 2; /* the cache's and ours */
                e->in_cache = 1;
                e->hnext = s->buckets[bucket];
                s->buckets[bucket] = e;
                lru_push_front(s, e);
                s->usage += e->size;
                while (s->usage > s->capacity && s->lru.prev != e && nvictims < 64) {
                    entry *v = s->lru.prev;
                    lru_unlink(v);
                    hash_remove(s, v);
                    v->in_cache = 0;
                    s->usage -= v->size;
                    entry *dead = unref_locked(v);
                    if (dead != NULL)
                        victims[nvictims++] = dead;
                }
            }
            pthread_mutex_unlock(&s->lock);
            for (int i = 0; i < nvictims; i++)
                entry_free(ts, victims[i]);
            if (fresh != NULL)
                entry_free(ts, fresh);
        }

        /* read the block: a few cache lines spread over it */
        for (size_t off = 0; off < e->size; off += e->size / 4 + 1)
            sum += e->data[off];

        done++;
        if (opt.pinned > 0 && rng_unit(&ts->rng) < opt.pinned && bt->count < bt->cap) {
            size_t slot = (bt->head + bt->count) % bt->cap;
            bt->pins[slot] = e;
            bt->pin_release_at[slot] = done + opt.pin_ops;
            bt->count++;
        } else {
            release(ts, e);
        }
        counter_add(&ts->ops, 1);
    }
    __atomic_fetch_add(&sink, sum, __ATOMIC_RELAXED);
}

static void blockcache_teardown(thread_state *main_ts)
{
    for (int i = 0; i < opt.threads; i++)
        bc_thread_teardown(&states[i], main_ts);
    for (int i = 0; i < nshards; i++) {
        shard *s = &shards[i];
        while (s->lru.next != &s->lru) {
            entry *v = s->lru.next;
            lru_unlink(v);
            hash_remove(s, v);
            v->in_cache = 0;
            entry *dead = unref_locked(v);
            if (dead == NULL)
                die("internal error: block %" PRIu64 " still referenced at teardown", v->key);
            entry_free(main_ts, dead);
        }
        mb_free(main_ts, s->buckets, s->nbuckets * sizeof(entry *));
        pthread_mutex_destroy(&s->lock);
    }
    mb_free(main_ts, shards, sizeof(shard) * (size_t)nshards);
}

/* ---------------------------------------------------------------------------------- */
/* oltp                                                                                */

typedef struct {
    void **ptr;
    size_t *size;
    void **long_ptr;
    size_t *long_size;
} oltp_thread;

static void oltp_thread_setup(thread_state *ts)
{
    oltp_thread *ot = mb_alloc(ts, sizeof *ot);
    size_t n = (size_t)opt.allocs, m = (size_t)opt.long_lived;
    ot->ptr = mb_alloc(ts, n * sizeof(void *));
    ot->size = mb_alloc(ts, n * sizeof(size_t));
    ot->long_ptr = m ? mb_alloc(ts, m * sizeof(void *)) : NULL;
    ot->long_size = m ? mb_alloc(ts, m * sizeof(size_t)) : NULL;
    /* start with the long-lived pool full, as a server that has been up for a while */
    for (size_t i = 0; i < m; i++) {
        ot->long_size[i] = rng_log_size(&ts->rng, opt.min_size, opt.max_size);
        ot->long_ptr[i] = mb_alloc(ts, ot->long_size[i]);
        memset(ot->long_ptr[i], 0x5a, ot->long_size[i]);
    }
    ts->pattern_state = ot;
}

static void oltp_run(thread_state *ts)
{
    oltp_thread *ot = ts->pattern_state;
    size_t n = (size_t)opt.allocs, m = (size_t)opt.long_lived;
    uint64_t done = 0;
    while (keep_going(done)) {
        for (size_t i = 0; i < n; i++) {
            size_t sz = rng_log_size(&ts->rng, opt.min_size, opt.max_size);
            ot->ptr[i] = mb_alloc(ts, sz);
            ot->size[i] = sz;
            memset(ot->ptr[i], (int)i, sz);
            if (i == n / 2 && m > 0 && rng_unit(&ts->rng) < opt.long_rate) {
                size_t slot = (size_t)rng_below(&ts->rng, m);
                mb_free(ts, ot->long_ptr[slot], ot->long_size[slot]);
                ot->long_size[slot] = rng_log_size(&ts->rng, opt.min_size, opt.max_size);
                ot->long_ptr[slot] = mb_alloc(ts, ot->long_size[slot]);
                memset(ot->long_ptr[slot], 0x5a, ot->long_size[slot]);
            }
        }
        for (size_t i = 0; i < n; i++)
            mb_free(ts, ot->ptr[i], ot->size[i]);
        done++;
        counter_add(&ts->ops, 1);
    }
}

static void oltp_teardown(thread_state *main_ts)
{
    for (int t = 0; t < opt.threads; t++) {
        oltp_thread *ot = states[t].pattern_state;
        size_t n = (size_t)opt.allocs, m = (size_t)opt.long_lived;
        for (size_t i = 0; i < m; i++)
            mb_free(main_ts, ot->long_ptr[i], ot->long_size[i]);
        mb_free(main_ts, ot->ptr, n * sizeof(void *));
        mb_free(main_ts, ot->size, n * sizeof(size_t));
        if (m) {
            mb_free(main_ts, ot->long_ptr, m * sizeof(void *));
            mb_free(main_ts, ot->long_size, m * sizeof(size_t));
        }
        mb_free(main_ts, ot, sizeof *ot);
    }
}

/* ---------------------------------------------------------------------------------- */
/* xthread: thread i hands blocks to thread (i+1) % threads through a single-producer,  */
/* single-consumer ring                                                                 */

typedef struct {
    void *ptr;
    size_t size;
} block;

typedef struct {
    _Alignas(64) _Atomic size_t head; /* consumer position */
    _Alignas(64) _Atomic size_t tail; /* producer position */
    _Alignas(64) block *slots;
    size_t cap;
} ring;

static ring *rings;

static void xthread_setup(thread_state *main_ts)
{
    rings = mb_alloc(main_ts, sizeof(ring) * (size_t)opt.threads);
    for (int i = 0; i < opt.threads; i++) {
        ring *r = &rings[i];
        memset(r, 0, sizeof *r);
        r->cap = (size_t)opt.queue;
        r->slots = mb_alloc(main_ts, r->cap * sizeof(block));
    }
}

static int ring_push(ring *r, block b)
{
    size_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    size_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    if (tail - head >= r->cap)
        return 0;
    r->slots[tail % r->cap] = b;
    atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
    return 1;
}

static void ring_drain(thread_state *ts, ring *r, int remote)
{
    size_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    size_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    for (; head != tail; head++) {
        block b = r->slots[head % r->cap];
        mb_free(ts, b.ptr, b.size);
        if (remote)
            counter_add(&ts->remote_frees, 1);
    }
    atomic_store_explicit(&r->head, head, memory_order_release);
}

static void xthread_run(thread_state *ts)
{
    ring *mine = &rings[ts->index];
    ring *next = &rings[(ts->index + 1) % opt.threads];
    int remote = opt.threads > 1;
    uint64_t done = 0;
    while (keep_going(done)) {
        for (int i = 0; i < opt.batch; i++) {
            block b;
            b.size = rng_log_size(&ts->rng, opt.min_size, opt.max_size);
            b.ptr = mb_alloc(ts, b.size);
            memset(b.ptr, i, b.size);
            if (!ring_push(next, b)) {
                mb_free(ts, b.ptr, b.size);
                counter_add(&ts->local_frees, 1);
            }
        }
        ring_drain(ts, mine, remote);
        done++;
        counter_add(&ts->ops, 1);
    }
}

static void xthread_teardown(thread_state *main_ts)
{
    for (int i = 0; i < opt.threads; i++) {
        ring_drain(main_ts, &rings[i], 0);
        mb_free(main_ts, rings[i].slots, rings[i].cap * sizeof(block));
    }
    mb_free(main_ts, rings, sizeof(ring) * (size_t)opt.threads);
}

/* ---------------------------------------------------------------------------------- */
/* workers and the monitor                                                             */

static void *worker(void *arg)
{
    thread_state *ts = arg;
    pthread_barrier_wait(&barrier); /* main has taken its baseline */
    if (opt.pattern == P_BLOCKCACHE)
        bc_thread_setup(ts);
    else if (opt.pattern == P_OLTP)
        oltp_thread_setup(ts);
    pthread_barrier_wait(&barrier); /* everyone set up: go */
    ts->start_time = now();
    switch (opt.pattern) {
    case P_SORTBUF: sortbuf_run(ts); break;
    case P_BLOCKCACHE: blockcache_run(ts); break;
    case P_OLTP: oltp_run(ts); break;
    case P_XTHREAD: xthread_run(ts); break;
    default: break;
    }
    ts->end_time = now();
    return NULL;
}

static _Atomic int workers_done;

static void *worker_main(void *arg)
{
    worker(arg);
    atomic_fetch_add(&workers_done, 1);
    return NULL;
}

static void json_ratio(const char *name, uint64_t num, uint64_t den)
{
    if (den == 0)
        printf("  \"%s\": null,\n", name);
    else
        printf("  \"%s\": %.4f,\n", name, (double)num / (double)den);
}

typedef uint64_t (*live_probe_fn)(void);

int main(int argc, char **argv)
{
    parse_options(argc, argv);
    page_size = sysconf(_SC_PAGESIZE);
    exact_peak = opt.pattern == P_SORTBUF;

    /* Present only under the test interposer (native/mbcount.c): the bytes malloc itself
     * sees live, an independent check on this program's own accounting. */
    live_probe_fn interposer_live = (live_probe_fn)(uintptr_t)dlsym(RTLD_DEFAULT,
                                                                   "mbcount_live_bytes");

    int n = opt.threads;
    thread_state *main_ts = &states[n];
    for (int i = 0; i <= n; i++) {
        states[i].index = i;
        states[i].rng = opt.seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1));
    }

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    /* small stacks: many threads must not look like heap RSS, and glibc's stack cache
     * must not free thread descriptors (with malloc) during the measured window */
    pthread_attr_setstacksize(&attr, WORKER_STACK);
    if (pthread_barrier_init(&barrier, NULL, (unsigned)n + 1) != 0)
        die("pthread_barrier_init failed");
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&states[i].tid, &attr, worker_main, &states[i]);
        if (rc != 0)
            die("cannot start thread %d: %s", i, strerror(rc));
    }
    pthread_attr_destroy(&attr);

    uint64_t base_vsz, base_rss;
    read_statm(&base_vsz, &base_rss);
    uint64_t interposer_before = interposer_live ? interposer_live() : 0;

    if (opt.pattern == P_BLOCKCACHE)
        blockcache_setup(main_ts);
    else if (opt.pattern == P_XTHREAD)
        xthread_setup(main_ts);
    pthread_barrier_wait(&barrier);
    pthread_barrier_wait(&barrier);
    double start = now();

    uint64_t peak_live = 0, peak_rss_sampled = 0, samples = 0;
    struct timespec interval = {opt.sample_ms / 1000, (long)(opt.sample_ms % 1000) * 1000000L};
    for (;;) {
        int finished = atomic_load(&workers_done) == n;
        uint64_t vsz, rss, live = sum_live();
        read_statm(&vsz, &rss);
        samples++;
        if (live > peak_live)
            peak_live = live;
        if (rss > peak_rss_sampled)
            peak_rss_sampled = rss;
        if (finished)
            break;
        if (opt.ops == 0 && now() - start >= opt.seconds)
            atomic_store(&stop_flag, 1);
        nanosleep(&interval, NULL);
    }
    for (int i = 0; i < n; i++)
        pthread_join(states[i].tid, NULL);

    /* Timed from the workers' own clocks: on a busy machine the main thread may take
       its start after a short run has already ended, which made elapsed 0. */
    double first = n > 0 ? states[0].start_time : start, end = first;
    uint64_t ops = 0, allocs = 0, frees = 0, requested = 0, remote = 0, local = 0;
    for (int i = 0; i <= n; i++) {
        if (i < n && states[i].start_time < first)
            first = states[i].start_time;
        if (i < n && states[i].end_time > end)
            end = states[i].end_time;
        ops += atomic_load(&states[i].ops);
        allocs += atomic_load(&states[i].allocs);
        frees += atomic_load(&states[i].frees);
        requested += atomic_load(&states[i].alloc_bytes);
        remote += atomic_load(&states[i].remote_frees);
        local += atomic_load(&states[i].local_frees);
    }
    double elapsed = end - first;
    uint64_t live = sum_live();
    if (live > peak_live)
        peak_live = live;
    if (exact_peak && atomic_load(&shared_peak) > peak_live)
        peak_live = atomic_load(&shared_peak);
    if (opt.pattern == P_SORTBUF || opt.pattern == P_OLTP) {
        /* shared set-up done by main comes first and stays live for the whole run */
        uint64_t shared = (uint64_t)main_ts->own_live;
        for (int i = 0; i < n; i++)
            if ((uint64_t)states[i].own_peak + shared > peak_live)
                peak_live = (uint64_t)states[i].own_peak + shared;
    }
    uint64_t final_vsz, final_rss;
    read_statm(&final_vsz, &final_rss);
    uint64_t peak_rss = status_kb("VmHWM:");
    uint64_t peak_vsz = status_kb("VmPeak:");
    if (peak_rss < peak_rss_sampled)
        peak_rss = peak_rss_sampled;
    uint64_t interposer_after = interposer_live ? interposer_live() : 0;

    switch (opt.pattern) {
    case P_BLOCKCACHE: blockcache_teardown(main_ts); break;
    case P_OLTP: oltp_teardown(main_ts); break;
    case P_XTHREAD: xthread_teardown(main_ts); break;
    default: break;
    }
    uint64_t leaked = sum_live();

    const char *preload = getenv("LD_PRELOAD");
    printf("{\n");
    printf("  \"driver\": \"mbpatterns\",\n");
    printf("  \"pattern\": \"%s\",\n", argv[1]);
    printf("  \"threads\": %d,\n", n);
    printf("  \"seed\": %" PRIu64 ",\n", opt.seed);
    printf("  \"mode\": \"%s\",\n", opt.ops ? "ops" : "seconds");
    printf("  \"options\": {");
    switch (opt.pattern) {
    case P_SORTBUF:
        printf("\"size\": %zu, \"init\": \"%s\", \"touch\": %zu", opt.size,
               opt.init == INIT_MEMSET ? "memset" : opt.init == INIT_CALLOC ? "calloc" : "none",
               opt.touch);
        break;
    case P_BLOCKCACHE:
        printf("\"capacity\": %zu, \"min_size\": %zu, \"max_size\": %zu, \"keys\": %" PRIu64
               ", \"pinned\": %g, \"pin_ops\": %" PRIu64 ", \"shards\": %d",
               opt.capacity, opt.min_size, opt.max_size, opt.keys, opt.pinned, opt.pin_ops,
               opt.shards);
        break;
    case P_OLTP:
        printf("\"allocs\": %d, \"min_size\": %zu, \"max_size\": %zu, \"long_lived\": %" PRIu64
               ", \"long_rate\": %g",
               opt.allocs, opt.min_size, opt.max_size, opt.long_lived, opt.long_rate);
        break;
    case P_XTHREAD:
        printf("\"batch\": %d, \"queue\": %d, \"min_size\": %zu, \"max_size\": %zu", opt.batch,
               opt.queue, opt.min_size, opt.max_size);
        break;
    default: break;
    }
    printf("},\n");
    printf("  \"ops\": %" PRIu64 ",\n", ops);
    printf("  \"seconds\": %.6f,\n", elapsed);
    printf("  \"ops_per_sec\": %.3f,\n", elapsed > 0 ? (double)ops / elapsed : 0.0);
    printf("  \"allocations\": %" PRIu64 ",\n", allocs);
    printf("  \"frees\": %" PRIu64 ",\n", frees);
    printf("  \"requested_bytes\": %" PRIu64 ",\n", requested);
    printf("  \"live_bytes\": %" PRIu64 ",\n", live);
    printf("  \"peak_live_bytes\": %" PRIu64 ",\n", peak_live);
    printf("  \"baseline_rss_bytes\": %" PRIu64 ",\n", base_rss);
    printf("  \"peak_rss_bytes\": %" PRIu64 ",\n", peak_rss);
    printf("  \"final_rss_bytes\": %" PRIu64 ",\n", final_rss);
    printf("  \"peak_vsz_bytes\": %" PRIu64 ",\n", peak_vsz);
    printf("  \"final_vsz_bytes\": %" PRIu64 ",\n", final_vsz);
    json_ratio("rss_per_live", final_rss, live);
    json_ratio("peak_rss_per_live", peak_rss, peak_live);
    if (opt.pattern == P_XTHREAD) {
        printf("  \"remote_frees\": %" PRIu64 ",\n", remote);
        printf("  \"local_frees\": %" PRIu64 ",\n", local);
    }
    printf("  \"samples\": %" PRIu64 ",\n", samples);
    printf("  \"leaked_bytes\": %" PRIu64 ",\n", leaked);
    if (interposer_live)
        printf("  \"interposer_live_bytes\": %" PRIu64 ",\n",
               interposer_after - interposer_before);
    printf("  \"preload\": ");
    json_str(preload ? preload : "");
    printf(",\n  \"malloc_library\": ");
    json_str(malloc_library());
    printf(",\n  \"pid\": %d\n}\n", (int)getpid());
    return 0;
}
