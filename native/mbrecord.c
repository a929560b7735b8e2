/* mbrecord: an LD_PRELOAD shim that records a process's allocation calls (no data) to a
 * compressed trace, armed and disarmed from outside through a control file.
 *
 * Rules it keeps so that the host process never suffers:
 * - it never calls malloc on the recording path: per-thread buffers, the live-block table
 *   and the writer's buffers are mmap'd; only the writer thread (whose own calls are not
 *   recorded) uses zstd, which mallocs;
 * - TLS is initial-exec, so touching it never allocates;
 * - dlsym may call calloc before the real functions are known: those calls are served
 *   from a static bootstrap arena;
 * - the writer thread blocks every signal, so a server's signal handling is unchanged;
 * - any write error (a full disk) stops recording: the trace is cut back to its last
 *   whole frame, its in-place status says where and why, one line goes to stderr;
 * - its buffers (chunks waiting for the writer, the writer's own buffers and zstd's) are
 *   capped (MBRECORD_MAX_BUFFER bytes, default 64 MiB; 0: no cap): a writer that falls
 *   behind (a busy host, a slow disk) would otherwise let them grow with the event rate.
 *   At the cap recording stops at a consistent cut (see overflow()), the trace is closed
 *   with its status saying why, the memory is returned, and no recorded thread waits;
 * - a forked child stops recording (its parent's trace stays the parent's);
 * - a long recording is a segmented trace: a directory of segments 0001.mbt, 0002.mbt,
 *   ..., each a whole trace that starts with the live-block table at its start, so it
 *   replays alone, and the set replays joined. The writer rotates (see rotate()) by size
 *   or age; no recorded thread waits for it. A disk budget for the whole recording stops
 *   it cleanly, with room kept for the closing frame, so what was written stays whole.
 *
 * Control file (MBRECORD_CONTROL, default /tmp/mbrecord-PID.control), polled by the
 * writer every 100 ms: "on [cap=BYTES] [seg=BYTES] [segsec=SECONDS] [budget=BYTES] [PATH]"
 * arms (a new trace at PATH, default MBRECORD_OUT or /tmp/mbrecord-PID-N.mbt; cap= sets
 * this window's buffer cap, since a running server's environment cannot change; seg= and
 * segsec=, either non-zero, make PATH a directory of segments rotated at that size or
 * age; budget= caps the bytes of the whole recording; their defaults come from
 * MBRECORD_SEGMENT, MBRECORD_SEGMENT_SECONDS and MBRECORD_MAX_SIZE), "off" disarms and
 * closes the trace. A file was chosen over a
 * signal because servers install handlers of their own (a SIGUSR2 sent to a process that
 * lacks the shim kills it), while a file needs no handler, harms nothing when the shim is
 * absent, and carries the output path. It is obeyed only when owned by the process's user
 * or root and writable by nobody else, so no other user can make the process write a file.
 * The writer answers in CONTROL.status: "recording PATH", "complete PATH ...", "error ...",
 * "stopped PATH: why" (the buffer cap or the disk budget was reached; the trace is whole
 * up to its cut).
 * MBRECORD_ARMED=1 arms at start (to record a process from its first call); "pid:N" arms
 * only in process N.
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
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
/* ZSTD_createCCtx_advanced: the writer's zstd buffers are mmap'd and counted as the shim's */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#define TLS_IE _Thread_local __attribute__((tls_model("initial-exec")))
#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*aligned_alloc_fn)(size_t, size_t);
typedef void *(*valloc_fn)(size_t);
typedef size_t (*usable_fn)(void *);

static malloc_fn real_malloc;
static free_fn real_free;
static calloc_fn real_calloc;
static realloc_fn real_realloc;
static posix_memalign_fn real_posix_memalign;
static aligned_alloc_fn real_aligned_alloc;
static aligned_alloc_fn real_memalign;
static valloc_fn real_valloc;
static valloc_fn real_pvalloc;
static usable_fn real_usable;

/* ---- bootstrap arena: allocations made while dlsym resolves the real functions ---- */
static _Alignas(64) char boot_arena[256 * 1024];
static atomic_size_t boot_used;
static int resolving;

static void *boot_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    size_t start = atomic_load(&boot_used);
    for (;;) {
        size_t at = (start + 16 + align - 1) & ~(align - 1);
        size_t end = at + size;
        if (end > sizeof boot_arena)
            return NULL;
        if (atomic_compare_exchange_weak(&boot_used, &start, end)) {
            memcpy(boot_arena + at - sizeof size, &size, sizeof size);
            return boot_arena + at;
        }
    }
}

static int is_boot(const void *p)
{
    return (const char *)p >= boot_arena && (const char *)p < boot_arena + sizeof boot_arena;
}

static size_t boot_size(const void *p)
{
    size_t size;
    memcpy(&size, (const char *)p - sizeof size, sizeof size);
    return size;
}

/* ---- state ---- */
static atomic_int armed;     /* hooks record events */
static atomic_uint gen;      /* trace window number; stamps chunks */
static int disabled;         /* forked child, or set-up failed: pass everything through */
static uint64_t t0_ns;       /* CLOCK_MONOTONIC at arming */
static uint64_t ptr_key;     /* pointer tokens are address ^ key: no raw address leaves */
static atomic_uint next_thread = 1;
static atomic_ullong dropped; /* events lost for want of a buffer */
#define DEFAULT_MAX_BUFFER (64ull << 20)
static unsigned long long env_max_buffer = DEFAULT_MAX_BUFFER; /* MBRECORD_MAX_BUFFER */
static atomic_ullong max_buffer;  /* this window's cap in bytes; 0: none */
static atomic_ullong cut_ns;      /* 1 + the cut's time since arming; 0: no cut */
/* MBRECORD_SEGMENT, MBRECORD_SEGMENT_SECONDS, MBRECORD_MAX_SIZE: a window's defaults */
static unsigned long long env_seg_bytes, env_seg_ns, env_budget;
static pthread_key_t exit_key;
static int tracking = 1;     /* keep the live-block table */
static atomic_int table_broken;

static TLS_IE int in_hook;
static TLS_IE uint32_t t_token;
static TLS_IE int t_slot; /* 1-based; 0 = not registered (yet, or any more) */
static TLS_IE struct chunk *t_chunk;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t token(const void *p)
{
    return p == NULL ? 0 : ((uint64_t)(uintptr_t)p ^ ptr_key);
}

static void spin_lock(atomic_int *lock)
{
    int spins = 0;
    while (atomic_exchange_explicit(lock, 1, memory_order_acquire)) {
        if (++spins > 100) {
            sched_yield();
            spins = 0;
        }
    }
}

static void spin_unlock(atomic_int *lock)
{
    atomic_store_explicit(lock, 0, memory_order_release);
}

/* The shim's own mappings, so that whoever measures the host's heap while it records can
 * take them out: they are anonymous memory the allocator never made. */
static atomic_ullong own_bytes, own_peak;
/* The part that is buffers (everything but the live-block table, which is as large as
 * the heap it describes and is not a backlog): this is what the cap limits. */
static atomic_ullong buf_bytes, buf_peak;
enum { TABLE = 0, BUFFER = 1 };

static void peak_up(atomic_ullong *peak, unsigned long long now)
{
    unsigned long long was = atomic_load(peak);
    while (now > was && !atomic_compare_exchange_weak(peak, &was, now)) {
    }
}

static void own_add(size_t add, size_t sub, int buffer)
{
    atomic_ullong *count[2] = {&own_bytes, &buf_bytes}, *peak[2] = {&own_peak, &buf_peak};
    for (int i = 0; i <= buffer; i++) {
        unsigned long long now = add >= sub
                                     ? atomic_fetch_add(count[i], add - sub) + (add - sub)
                                     : atomic_fetch_sub(count[i], sub - add) - (sub - add);
        peak_up(peak[i], now);
    }
}

static void *map(size_t size, int buffer)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    own_add(size, 0, buffer);
    return p;
}

static void unmap(void *p, size_t size, int buffer)
{
    munmap(p, size);
    own_add(0, size, buffer);
}

/* ---- live-block table: pointer -> size of every block, kept while disarmed too so that
 * arming can emit the blocks already live. Sharded, each shard an open-addressed table
 * with its own spinlock, all mmap'd. ---- */
#define SHARDS 1024u
struct entry {
    uint64_t key;
    uint64_t size;
};
struct shard {
    atomic_int lock;
    uint32_t cap;
    uint32_t count;
    struct entry *e;
} __attribute__((aligned(64)));
static struct shard shards[SHARDS];

static uint64_t hash_ptr(uint64_t p)
{
    return (p >> 4) * 0x9E3779B97F4A7C15ull;
}

static int shard_grow(struct shard *s)
{
    uint32_t cap = s->cap ? s->cap * 2 : 256;
    struct entry *e = map(sizeof *e * cap, TABLE);
    if (e == NULL)
        return -1;
    for (uint32_t i = 0; i < s->cap; i++) {
        if (s->e[i].key == 0)
            continue;
        uint32_t j = (uint32_t)(hash_ptr(s->e[i].key) >> 20) & (cap - 1);
        while (e[j].key != 0)
            j = (j + 1) & (cap - 1);
        e[j] = s->e[i];
    }
    if (s->e != NULL)
        unmap(s->e, sizeof *s->e * s->cap, TABLE);
    s->e = e;
    s->cap = cap;
    return 0;
}

static void live_insert(const void *p, uint64_t size)
{
    uint64_t key = (uint64_t)(uintptr_t)p;
    uint64_t h = hash_ptr(key);
    struct shard *s = &shards[h >> 54];
    spin_lock(&s->lock);
    if ((s->count + 1) * 4 > s->cap * 3 && shard_grow(s) != 0) {
        atomic_store(&table_broken, 1);
        spin_unlock(&s->lock);
        return;
    }
    uint32_t mask = s->cap - 1, j = (uint32_t)(h >> 20) & mask;
    while (s->e[j].key != 0 && s->e[j].key != key)
        j = (j + 1) & mask;
    if (s->e[j].key == 0)
        s->count++;
    s->e[j].key = key;
    s->e[j].size = size;
    spin_unlock(&s->lock);
}

static void live_remove(const void *p)
{
    uint64_t key = (uint64_t)(uintptr_t)p;
    uint64_t h = hash_ptr(key);
    struct shard *s = &shards[h >> 54];
    spin_lock(&s->lock);
    if (s->cap == 0) {
        spin_unlock(&s->lock);
        return;
    }
    uint32_t mask = s->cap - 1, j = (uint32_t)(h >> 20) & mask;
    while (s->e[j].key != 0 && s->e[j].key != key)
        j = (j + 1) & mask;
    if (s->e[j].key == key) {
        /* backward-shift deletion keeps every probe chain unbroken without tombstones */
        uint32_t hole = j;
        for (uint32_t k = (j + 1) & mask; s->e[k].key != 0; k = (k + 1) & mask) {
            uint32_t home = (uint32_t)(hash_ptr(s->e[k].key) >> 20) & mask;
            if (((k - home) & mask) >= ((k - hole) & mask)) {
                s->e[hole] = s->e[k];
                hole = k;
            }
        }
        s->e[hole].key = 0;
        s->count--;
    }
    spin_unlock(&s->lock);
}

/* ---- per-thread chunks, handed to the writer through a lock-free stack ---- */
#define CHUNK_BYTES 65536u
#define CHUNK_RECS ((CHUNK_BYTES - 32u) / sizeof(struct mb_rec))
struct chunk {
    struct chunk *next;
    uint32_t thread;
    uint32_t gen;
    _Atomic uint32_t count; /* committed records; written by the owner only */
    uint32_t taken;         /* records already copied by the writer; writer only */
    uint64_t pad;
    struct mb_rec rec[CHUNK_RECS];
};
_Static_assert(sizeof(struct chunk) <= CHUNK_BYTES, "chunk fits its mapping");

#define MAX_SLOTS 8192
static _Atomic(struct chunk *) full_list;        /* pushed by threads, taken whole by writer */
static _Atomic(struct chunk *) slots[MAX_SLOTS]; /* each thread's current chunk */
static atomic_int next_slot;
static atomic_int pool_lock;
static struct chunk *pool;
static int free_slots[MAX_SLOTS];
static int free_slot_count;

/* The cap is reached: stop recording at a consistent cut. The cut's time is read before
 * `armed` is cleared, so a call that sees armed=0 is stamped after the cut, and every
 * call stamped before it saw armed=1 and is recorded: chunk_get still maps a chunk for a
 * call already under way (at most one per thread, so the overshoot is bounded), and the
 * writer keeps only records stamped before the cut. No event is lost from the middle of
 * the trace (a lost free would be a leak in the replay), and no recorded thread waits. */
static void overflow(void)
{
    unsigned long long none = 0, t = now_ns();
    t = t > t0_ns ? t - t0_ns : 0;
    if (atomic_compare_exchange_strong(&cut_ns, &none, t + 1))
        atomic_store(&armed, 0);
}

static struct chunk *chunk_get(uint32_t g)
{
    spin_lock(&pool_lock);
    struct chunk *c = pool;
    if (c != NULL)
        pool = c->next;
    spin_unlock(&pool_lock);
    if (c == NULL) {
        unsigned long long cap = atomic_load_explicit(&max_buffer, memory_order_relaxed);
        if (cap != 0 && atomic_load_explicit(&buf_bytes, memory_order_relaxed) + CHUNK_BYTES > cap)
            overflow();
        c = map(CHUNK_BYTES, BUFFER);
    }
    if (c == NULL)
        return NULL;
    c->next = NULL;
    c->thread = t_token;
    c->gen = g;
    c->taken = 0;
    atomic_store_explicit(&c->count, 0, memory_order_relaxed);
    return c;
}

static void chunk_push(struct chunk *c)
{
    struct chunk *head = atomic_load_explicit(&full_list, memory_order_relaxed);
    do
        c->next = head;
    while (!atomic_compare_exchange_weak_explicit(&full_list, &head, c, memory_order_release,
                                                  memory_order_relaxed));
}

static void thread_exit(void *unused)
{
    (void)unused;
    in_hook++;
    if (t_slot > 0) {
        atomic_store(&slots[t_slot - 1], NULL);
        if (t_chunk != NULL)
            chunk_push(t_chunk);
        t_chunk = NULL;
        spin_lock(&pool_lock);
        free_slots[free_slot_count++] = t_slot - 1;
        spin_unlock(&pool_lock);
        /* frees made by later destructors (other keys, the C++ runtime) register again
         * under the same thread token: a free lost here would be a leak in the replay */
        t_slot = 0;
    }
    in_hook--;
}

static int thread_register(void)
{
    int slot = -1;
    spin_lock(&pool_lock);
    if (free_slot_count > 0)
        slot = free_slots[--free_slot_count];
    spin_unlock(&pool_lock);
    if (slot < 0) {
        slot = atomic_fetch_add(&next_slot, 1);
        if (slot >= MAX_SLOTS)
            return -1;
    }
    t_slot = slot + 1;
    if (t_token == 0)
        t_token = atomic_fetch_add(&next_thread, 1);
    pthread_setspecific(exit_key, (void *)1); /* may calloc: in_hook is set by the caller */
    return 0;
}

static struct chunk *thread_chunk(uint32_t g)
{
    if (t_slot == 0 && thread_register() != 0)
        return NULL;
    struct chunk *old = t_chunk, *c = chunk_get(g);
    atomic_store(&slots[t_slot - 1], c);
    t_chunk = c;
    if (old != NULL)
        chunk_push(old); /* after the slot moved on: the writer never sees it twice */
    return c;
}

static void emit(unsigned kind, uint64_t when, uint64_t ptr, uint64_t size, uint64_t aux)
{
    uint32_t g = atomic_load_explicit(&gen, memory_order_acquire);
    struct chunk *c = t_chunk;
    if (UNLIKELY(c == NULL || c->gen != g)) {
        c = thread_chunk(g);
        if (c == NULL) {
            atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
            return;
        }
    }
    uint32_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
    struct mb_rec *r = &c->rec[n];
    uint64_t t = when > t0_ns ? when - t0_ns : 0;
    r->w0 = t << 8 | kind;
    r->ptr = ptr;
    r->size = size;
    r->aux = aux;
    atomic_store_explicit(&c->count, n + 1, memory_order_release);
    if (n + 1 < CHUNK_RECS)
        return;
    if (atomic_load_explicit(&armed, memory_order_relaxed)) {
        if (thread_chunk(g) == NULL)
            t_chunk = NULL;
        return;
    }
    /* stopped: hand the full chunk over without mapping one this thread may never use */
    atomic_store(&slots[t_slot - 1], NULL);
    chunk_push(c);
    t_chunk = NULL;
}

static void after_alloc(unsigned kind, void *p, size_t size, size_t align)
{
    if (tracking)
        live_insert(p, size);
    if (atomic_load_explicit(&armed, memory_order_acquire))
        emit(kind, now_ns(), token(p), size, align);
}

/* ---- resolving the real functions ---- */
static void resolve(void)
{
    resolving = 1;
    real_malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
    real_free = (free_fn)dlsym(RTLD_NEXT, "free");
    real_calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
    real_realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
    real_posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = (aligned_alloc_fn)dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = (aligned_alloc_fn)dlsym(RTLD_NEXT, "memalign");
    real_valloc = (valloc_fn)dlsym(RTLD_NEXT, "valloc");
    real_pvalloc = (valloc_fn)dlsym(RTLD_NEXT, "pvalloc");
    real_usable = (usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
    resolving = 0;
    if (real_malloc == NULL || real_free == NULL || real_calloc == NULL || real_realloc == NULL)
        abort(); /* no malloc to forward to: nothing could run anyway */
}

#define ENSURE(boot)                                                                          \
    do {                                                                                      \
        if (UNLIKELY(real_malloc == NULL)) {                                                  \
            if (resolving)                                                                    \
                return boot;                                                                  \
            resolve();                                                                        \
        }                                                                                     \
    } while (0)

#define PASS() (in_hook || disabled)

EXPORT void *malloc(size_t size)
{
    ENSURE(boot_alloc(size, 16));
    if (PASS())
        return real_malloc(size);
    in_hook++;
    void *p = real_malloc(size);
    if (p != NULL)
        after_alloc(MB_MALLOC, p, size, 0);
    in_hook--;
    return p;
}

EXPORT void *calloc(size_t n, size_t size)
{
    ENSURE(n && size > SIZE_MAX / n ? NULL : boot_alloc(n * size, 16)); /* static: zeroed */
    if (PASS())
        return real_calloc(n, size);
    in_hook++;
    void *p = real_calloc(n, size);
    if (p != NULL)
        after_alloc(MB_CALLOC, p, n * size, 0);
    in_hook--;
    return p;
}

EXPORT void free(void *p)
{
    if (p == NULL || is_boot(p))
        return;
    ENSURE();
    if (PASS()) {
        /* a tracked block freed from inside a hook must still leave the table, or a later
         * block at the same address would be snapshot with a stale size */
        if (tracking && !disabled)
            live_remove(p);
        real_free(p);
        return;
    }
    in_hook++;
    if (atomic_load_explicit(&armed, memory_order_acquire))
        emit(MB_FREE, now_ns(), token(p), 0, 0);
    if (tracking)
        live_remove(p);
    real_free(p);
    in_hook--;
}

EXPORT void *realloc(void *old, size_t size)
{
    ENSURE(NULL);
    if (old != NULL && is_boot(old)) {
        void *p = malloc(size);
        if (p != NULL) {
            size_t have = boot_size(old);
            memcpy(p, old, have < size ? have : size);
        }
        return p;
    }
    if (PASS()) {
        void *p = real_realloc(old, size);
        if (tracking && !disabled && old != NULL && (p != NULL || size == 0))
            live_remove(old);
        return p;
    }
    in_hook++;
    int on = atomic_load_explicit(&armed, memory_order_acquire);
    if (on)
        emit(MB_REALLOC_FREE, now_ns(), token(old), 0, 0);
    void *p = real_realloc(old, size);
    if (p != NULL || size == 0) {
        if (tracking && old != NULL)
            live_remove(old);
        if (tracking && p != NULL)
            live_insert(p, size);
    }
    if (on)
        emit(MB_REALLOC, now_ns(), token(p), size, token(old));
    in_hook--;
    return p;
}

static void *aligned_common(void *p, size_t size, size_t align)
{
    if (p != NULL && !PASS()) {
        in_hook++;
        after_alloc(MB_MEMALIGN, p, size, align);
        in_hook--;
    }
    return p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    ENSURE((*out = boot_alloc(size, align)) ? 0 : ENOMEM);
    int rc = real_posix_memalign(out, align, size);
    if (rc == 0)
        aligned_common(*out, size, align);
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t size)
{
    ENSURE(boot_alloc(size, align));
    return aligned_common(real_aligned_alloc(align, size), size, align);
}

EXPORT void *memalign(size_t align, size_t size)
{
    ENSURE(boot_alloc(size, align));
    return aligned_common(real_memalign(align, size), size, align);
}

EXPORT void *valloc(size_t size)
{
    ENSURE(boot_alloc(size, 4096));
    return aligned_common(real_valloc(size), size, (size_t)sysconf(_SC_PAGESIZE));
}

EXPORT void *pvalloc(size_t size)
{
    ENSURE(boot_alloc(size, 4096));
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return aligned_common(real_pvalloc(size), (size + page - 1) / page * page, page);
}

EXPORT size_t malloc_usable_size(void *p)
{
    if (p != NULL && is_boot(p))
        return boot_size(p);
    ENSURE(0);
    if (real_usable == NULL)
        return 0;
    if (p != NULL && !PASS() && atomic_load_explicit(&armed, memory_order_acquire)) {
        in_hook++;
        emit(MB_USABLE, now_ns(), token(p), 0, 0);
        in_hook--;
    }
    return real_usable(p);
}

/* ---- C++'s operators. jemalloc, tcmalloc and mimalloc define operator new and delete
 * themselves; preloaded after this shim but before libstdc++, theirs would be the ones a
 * C++ program (RocksDB) calls, and its blocks would never pass through malloc here: the
 * recording would miss them. These go through the recorded functions instead. Only when
 * an allocation fails is the next definition called, for its new-handler and bad_alloc
 * (C cannot throw). ---- */
typedef void *(*new_fn)(size_t);
typedef void *(*new_aligned_fn)(size_t, size_t);

static void *new_failed(const char *name, size_t size)
{
    new_fn next = (new_fn)dlsym(RTLD_NEXT, name);
    return next != NULL ? next(size) : NULL;
}

static void *new_aligned_failed(const char *name, size_t size, size_t align)
{
    new_aligned_fn next = (new_aligned_fn)dlsym(RTLD_NEXT, name);
    return next != NULL ? next(size, align) : NULL;
}

static void *new_aligned(size_t size, size_t align)
{
    void *p = NULL;
    if (align < sizeof(void *))
        align = sizeof(void *);
    return posix_memalign(&p, align, size ? size : 1) == 0 ? p : NULL;
}

#define NEW(name)                                                                             \
    EXPORT void *name(size_t size)                                                            \
    {                                                                                         \
        void *p = malloc(size ? size : 1);                                                    \
        return p != NULL ? p : new_failed(#name, size);                                       \
    }
#define NEW_NOTHROW(name)                                                                     \
    EXPORT void *name(size_t size, const void *nothrow)                                       \
    {                                                                                         \
        (void)nothrow;                                                                        \
        return malloc(size ? size : 1);                                                       \
    }
#define NEW_ALIGNED(name)                                                                     \
    EXPORT void *name(size_t size, size_t align)                                              \
    {                                                                                         \
        void *p = new_aligned(size, align);                                                   \
        return p != NULL ? p : new_aligned_failed(#name, size, align);                        \
    }
#define NEW_ALIGNED_NOTHROW(name)                                                             \
    EXPORT void *name(size_t size, size_t align, const void *nothrow)                         \
    {                                                                                         \
        (void)nothrow;                                                                        \
        return new_aligned(size, align);                                                      \
    }
#define DELETE(name, ...)                                                                     \
    EXPORT void name(void *p, __VA_ARGS__)                                                    \
    {                                                                                         \
        free(p);                                                                              \
    }

NEW(_Znwm)
NEW(_Znam)
NEW_NOTHROW(_ZnwmRKSt9nothrow_t)
NEW_NOTHROW(_ZnamRKSt9nothrow_t)
NEW_ALIGNED(_ZnwmSt11align_val_t)
NEW_ALIGNED(_ZnamSt11align_val_t)
NEW_ALIGNED_NOTHROW(_ZnwmSt11align_val_tRKSt9nothrow_t)
NEW_ALIGNED_NOTHROW(_ZnamSt11align_val_tRKSt9nothrow_t)

EXPORT void _ZdlPv(void *p)
{
    free(p);
}

EXPORT void _ZdaPv(void *p)
{
    free(p);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
DELETE(_ZdlPvm, size_t size)
DELETE(_ZdaPvm, size_t size)
DELETE(_ZdlPvRKSt9nothrow_t, const void *nothrow)
DELETE(_ZdaPvRKSt9nothrow_t, const void *nothrow)
DELETE(_ZdlPvSt11align_val_t, size_t align)
DELETE(_ZdaPvSt11align_val_t, size_t align)
DELETE(_ZdlPvmSt11align_val_t, size_t size, size_t align)
DELETE(_ZdaPvmSt11align_val_t, size_t size, size_t align)
DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, size_t align, const void *nothrow)
DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, size_t align, const void *nothrow)
#pragma GCC diagnostic pop

/* ---- the writer thread ---- */
static void *zstd_alloc(void *opaque, size_t size)
{
    (void)opaque;
    size_t *p = map(size + 16, BUFFER);
    if (p == NULL)
        return NULL;
    p[0] = size + 16;
    return (char *)p + 16;
}

static void zstd_free(void *opaque, void *address)
{
    (void)opaque;
    if (address == NULL)
        return;
    size_t *p = (size_t *)(void *)((char *)address - 16);
    unmap(p, p[0], BUFFER);
}

struct buf {
    char *data;
    size_t len, cap;
};

static int buf_reserve(struct buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    /* doubling from 64 KiB, so that a buffer stays near what it holds (the cap counts it) */
    size_t cap = b->cap ? b->cap * 2 : 65536u;
    if (cap < b->len + more)
        cap = (b->len + more + 4095u) & ~(size_t)4095u;
    void *p = b->data == NULL ? map(cap, BUFFER) : mremap(b->data, b->cap, cap, MREMAP_MAYMOVE);
    if (p == NULL || p == MAP_FAILED)
        return -1;
    if (b->data != NULL)
        own_add(cap, b->cap, BUFFER);
    b->data = p;
    b->cap = cap;
    return 0;
}

static void buf_free(struct buf *b)
{
    if (b->data != NULL)
        unmap(b->data, b->cap, BUFFER);
    *b = (struct buf){0};
}

static struct {
    char control[512];
    char status_path[528];
    char path[1024];
    char last_command[1100];
    int fd;
    uint64_t good_end; /* file offset after the last whole frame */
    uint64_t events, snapshot_blocks;
    struct buf raw, comp;
    size_t frame_bytes; /* events per frame: 4 MiB, less under a small cap */
    uint64_t pending;   /* events taken into raw and not yet in a written frame */
    unsigned long long lost; /* events dropped, as the last END frame counted them */
    /* a segmented trace: its directory (empty: one file), the segment being written
     * (from 1; 0: not segmented), when to rotate (size, age; 0: never) and the budget of
     * the whole recording (0: none) */
    char dir[1024];
    unsigned segment;
    uint64_t seg_bytes, seg_ns, budget;
    uint64_t seg_began;      /* now_ns() when this segment was opened */
    uint64_t seg_origin;     /* its cut, ns since arming: its calls are from there on */
    uint64_t seg_events;     /* w.events when it was opened */
    uint64_t prev_events;    /* w.events when the one before it was opened */
    uint64_t closed_bytes;   /* bytes of the segments closed before it */
    uint64_t snapshot_bytes; /* the last snapshot's bytes on disk: the next one's guess */
    uint64_t limit_ns;       /* while rotating, 1 + the cut: later records wait */
    struct chunk *held;      /* chunks with records past the cut, for the next segment */
    int rotate_due;          /* the segment reached its size */
    ZSTD_CCtx *cctx;
    unsigned window;
    atomic_int stop; /* process exit: close the trace */
    atomic_int done;
} w = {.fd = -1};

static void write_text_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return;
    ssize_t rc = write(fd, text, strlen(text));
    (void)rc;
    close(fd);
}

static void say_status(const char *fmt, const char *a, unsigned long long b)
{
    char text[1400];
    snprintf(text, sizeof text, fmt, a, b);
    write_text_file(w.status_path, text);
}

static void set_trace_status(const char *text)
{
    char slot[MB_STATUS_SIZE] = {0};
    snprintf(slot, sizeof slot, "%s", text);
    if (w.fd >= 0 && pwrite(w.fd, slot, sizeof slot, MB_STATUS_OFFSET) < 0) {
        /* nothing more can be said in the trace; stderr has the line */
    }
}

/* What the status file names: the directory of a segmented trace, else the file. */
static const char *trace_name(void)
{
    return w.segment != 0 ? w.dir : w.path;
}

static int segment_path(unsigned n);

/* A last segment the window ended in before any call (it was opened just before the
 * process exited, or disarmed, or the disk was full for its header) is removed, and the
 * one before it, whole with its END frame already, is the last: it then takes the
 * recording's closing status. */
static int fold_empty_segment(void)
{
    if (w.segment < 2 || w.events != w.seg_events)
        return 0;
    close(w.fd);
    w.fd = -1;
    if (unlink(w.path) != 0)
        return 0;
    w.segment--;
    w.seg_events = w.prev_events;
    if (segment_path(w.segment) == 0)
        w.fd = open(w.path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    return 1;
}

static void stop_on_error(int err, const char *what)
{
    char text[MB_STATUS_SIZE];
    atomic_store(&armed, 0);
    atomic_fetch_add(&gen, 1);
    if (ftruncate(w.fd, (off_t)w.good_end) != 0) {
        /* the reader still finds the cut at the first bad frame */
    }
    if (w.good_end == 0 && fold_empty_segment()) /* a segment without its header */
        snprintf(text, sizeof text, "stopped: %s %s as segment %u was to start; this one is "
                 "whole, after %llu events", what, strerror(err), w.segment + 1,
                 (unsigned long long)(w.events - w.seg_events));
    else
        snprintf(text, sizeof text, "stopped: %s %s at byte offset %llu after %llu events",
                 what, strerror(err), (unsigned long long)w.good_end,
                 (unsigned long long)(w.events - w.seg_events));
    set_trace_status(text);
    close(w.fd);
    w.fd = -1;
    fprintf(stderr, "mbrecord: %s: %s; recording stopped, the process runs on\n", w.path, text);
    say_status("error %s: recording stopped (write error; see the trace)\n", trace_name(), 0);
    w.raw.len = 0;
    w.pending = 0;
}

static int write_all(const void *data, size_t len)
{
    const char *p = data;
    uint64_t at = w.good_end;
    while (len > 0) {
        ssize_t n = pwrite(w.fd, p, len, (off_t)at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            stop_on_error(n < 0 ? errno : ENOSPC, "writing a frame:");
            return -1;
        }
        p += n;
        at += (uint64_t)n;
        len -= (size_t)n;
    }
    w.good_end = at;
    return 0;
}

static void budget_stop(void);

/* Room kept under the disk budget for the closing END frame (a few hundred bytes). */
#define END_ROOM 4096u

static int write_frame(unsigned kind, const char *raw, size_t len)
{
    if (w.fd < 0)
        return -1;
    size_t bound = ZSTD_compressBound(len);
    w.comp.len = 0;
    /* sized for the largest frame at once: grown by doubling it would reach twice that */
    size_t most = ZSTD_compressBound(len > w.frame_bytes ? len : w.frame_bytes);
    if (w.comp.cap < sizeof(struct mb_frame) + bound &&
        buf_reserve(&w.comp, sizeof(struct mb_frame) + most) != 0) {
        stop_on_error(ENOMEM, "mapping a compression buffer:");
        return -1;
    }
    size_t clen = ZSTD_compress2(w.cctx, w.comp.data + sizeof(struct mb_frame), bound, raw, len);
    if (ZSTD_isError(clen)) {
        stop_on_error(EIO, "compressing a frame:");
        return -1;
    }
    struct mb_frame f = {MB_FRAME_MAGIC, kind, (uint32_t)clen, (uint32_t)len};
    if (w.budget != 0 && kind != MB_FRAME_END &&
        w.closed_bytes + w.good_end + sizeof f + clen + END_ROOM > w.budget) {
        budget_stop();
        return -1;
    }
    memcpy(w.comp.data, &f, sizeof f);
    if (write_all(w.comp.data, sizeof f + clen) != 0)
        return -1;
    /* the size counts the segment's calls, not its table: a table larger than a segment
     * would otherwise start a segment at every turn of the writer */
    if (kind == MB_FRAME_EVENTS && w.segment != 0 && w.seg_bytes != 0 &&
        w.good_end >= MB_HEADER_SIZE + w.snapshot_bytes + w.seg_bytes)
        w.rotate_due = 1;
    return 0;
}

static void flush_events(void)
{
    if (w.raw.len > 0 && w.fd >= 0)
        write_frame(MB_FRAME_EVENTS, w.raw.data, w.raw.len);
    w.raw.len = 0;
    w.pending = 0;
}

/* While rotating, a chunk's records up to the first at or past the cut; a realloc's two
 * records stay together, in the segment of its first. */
static uint32_t before_limit(const struct chunk *c, uint32_t upto)
{
    if (w.limit_ns == 0)
        return upto;
    uint32_t i = c->taken;
    while (i < upto && MB_TIME(c->rec[i].w0) < w.limit_ns - 1)
        i++;
    if (i > c->taken && i < upto && MB_KIND(c->rec[i - 1].w0) == MB_REALLOC_FREE)
        i++;
    return i;
}

/* Records before the cut only (all of them when there is none). */
static uint32_t keep_before_cut(const struct mb_rec *from, uint32_t n, struct mb_rec *to)
{
    unsigned long long cut = atomic_load(&cut_ns);
    if (cut == 0) {
        memcpy(to, from, sizeof *from * n);
        return n;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n; i++)
        if (MB_TIME(from[i].w0) < cut - 1)
            to[kept++] = from[i];
    return kept;
}

static void take_records(struct chunk *c, uint32_t upto)
{
    upto = before_limit(c, upto);
    if (upto <= c->taken)
        return;
    uint32_t head[2] = {c->thread, upto - c->taken};
    size_t bytes = sizeof(struct mb_rec) * head[1];
    if (w.raw.len > 0 && w.raw.len + sizeof head + bytes > w.frame_bytes)
        flush_events(); /* before, so that the buffer never outgrows a frame */
    if (w.fd >= 0 && buf_reserve(&w.raw, sizeof head + bytes) == 0) {
        struct mb_rec *to = (struct mb_rec *)(void *)(w.raw.data + w.raw.len + sizeof head);
        head[1] = keep_before_cut(&c->rec[c->taken], head[1], to);
        if (head[1] > 0) {
            memcpy(w.raw.data + w.raw.len, head, sizeof head);
            w.raw.len += sizeof head + sizeof(struct mb_rec) * head[1];
            w.events += head[1];
            w.pending += head[1];
        }
    }
    c->taken = upto;
}

static void drain(int sweep)
{
    unsigned g = atomic_load(&gen);
    struct chunk *list = atomic_exchange_explicit(&full_list, NULL, memory_order_acquire);
    /* the stack is newest first; reverse it so one thread's chunks stay in order */
    struct chunk *rev = NULL;
    while (list != NULL) {
        struct chunk *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    while (rev != NULL) {
        struct chunk *next = rev->next;
        uint32_t count = atomic_load_explicit(&rev->count, memory_order_acquire);
        if (rev->gen == g)
            take_records(rev, count);
        if (rev->gen == g && rev->taken < count) { /* past a rotation's cut: kept */
            rev->next = w.held;
            w.held = rev;
            rev = next;
            continue;
        }
        spin_lock(&pool_lock);
        rev->next = pool;
        pool = rev;
        spin_unlock(&pool_lock);
        rev = next;
    }
    if (!sweep)
        return;
    int n = atomic_load(&next_slot);
    for (int i = 0; i < n && i < MAX_SLOTS; i++) {
        struct chunk *c = atomic_load(&slots[i]);
        if (c != NULL && c->gen == g)
            take_records(c, atomic_load_explicit(&c->count, memory_order_acquire));
    }
}

/* Streamed through the events buffer, a frame at a time: a copy of the whole table
 * would be as large as the table itself. */
static void snapshot(void)
{
    uint64_t blocks = 0, from = w.good_end;
    w.raw.len = 0;
    for (unsigned i = 0; i < SHARDS && w.fd >= 0; i++) {
        struct shard *s = &shards[i];
        spin_lock(&s->lock);
        if (buf_reserve(&w.raw, (size_t)s->count * 16) == 0) {
            for (uint32_t j = 0; j < s->cap; j++) {
                if (s->e[j].key == 0)
                    continue;
                uint64_t pair[2] = {s->e[j].key ^ ptr_key, s->e[j].size};
                memcpy(w.raw.data + w.raw.len, pair, sizeof pair);
                w.raw.len += sizeof pair;
            }
        }
        spin_unlock(&s->lock);
        if (w.raw.len >= w.frame_bytes || (i == SHARDS - 1 && w.raw.len > 0)) {
            blocks += w.raw.len / 16;
            write_frame(MB_FRAME_SNAPSHOT, w.raw.data, w.raw.len);
            w.raw.len = 0;
        }
    }
    w.snapshot_blocks = blocks;
    w.snapshot_bytes = w.good_end > from ? w.good_end - from : 0;
    w.raw.len = 0;
}

static void header_info(char *info, size_t size)
{
    char host[256] = "?", exe[512] = "?";
    gethostname(host, sizeof host - 1);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 1] = 0;
    Dl_info dl;
    const char *lib = "?";
    if (dladdr((void *)real_malloc, &dl) != 0 && dl.dli_fname != NULL)
        lib = dl.dli_fname;
    const char *alloc = getenv("MBRECORD_ALLOCATOR");
    const char *server = getenv("MBRECORD_SERVER_VERSION");
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    int used = snprintf(
        info, size,
        "host=%s\npid=%d\nexe=%s\nmalloc_library=%s\nallocator=%s\nserver_version=%s\n"
        "start_unix_ns=%llu\nlive_table=%s\n",
        host, (int)getpid(), exe, lib, alloc ? alloc : "", server ? server : "",
        (unsigned long long)real.tv_sec * 1000000000ull + (unsigned long long)real.tv_nsec,
        atomic_load(&table_broken) ? "incomplete" : (tracking ? "kept" : "off"));
    /* a segment's calls are timed from the recording's arming: the replayer of one
     * segment alone starts its clock at segment_start_ns */
    if (w.segment != 0 && used > 0 && (size_t)used < size)
        snprintf(info + used, size - (size_t)used, "segment=%u\nsegment_start_ns=%llu\n",
                 w.segment, (unsigned long long)w.seg_origin);
}

/* Bytes from "67108864", "64M", "64MiB"; returns the text after it, NULL if not a size. */
static const char *parse_bytes(const char *text, unsigned long long *out)
{
    char *rest;
    errno = 0;
    unsigned long long v = strtoull(text, &rest, 10);
    if (rest == text || errno != 0 || *text == '-')
        return NULL;
    unsigned shift = 0;
    switch (*rest) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: break;
    }
    if (shift != 0) {
        rest++;
        if (rest[0] == 'i' && (rest[1] == 'B' || rest[1] == 'b'))
            rest += 2;
        if (v > (~0ull >> shift))
            return NULL;
    }
    *out = v << shift;
    return rest;
}

/* A new trace file at w.path, its header written: 0, or -1 (said where it failed). */
static int open_file(void)
{
    w.fd = open(w.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (w.fd < 0) {
        fprintf(stderr, "mbrecord: cannot create %s: %s; not recording\n", w.path,
                strerror(errno));
        say_status("error cannot create %s: not recording\n", w.path, 0);
        return -1;
    }
    char header[MB_HEADER_SIZE] = {0};
    uint32_t version = MB_VERSION, size = MB_HEADER_SIZE;
    memcpy(header, MB_MAGIC, 8);
    memcpy(header + 8, &version, 4);
    memcpy(header + 12, &size, 4);
    snprintf(header + MB_STATUS_OFFSET, MB_STATUS_SIZE, "recording");
    header_info(header + MB_INFO_OFFSET, MB_HEADER_SIZE - MB_INFO_OFFSET);
    w.good_end = 0;
    w.prev_events = w.seg_events;
    w.seg_events = w.events;
    w.seg_began = now_ns();
    w.rotate_due = 0;
    return write_all(header, sizeof header);
}

/* A segmented trace's directory, made here and empty: segments of an older recording
 * left in it would be read as this one's. One that exists must be a directory of this
 * user's, not a link: as a file is opened O_NOFOLLOW, so that no other user can make the
 * process write where the link points. */
static int open_dir(void)
{
    struct stat st;
    if (mkdir(w.dir, 0755) != 0 &&
        (errno != EEXIST || lstat(w.dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
         st.st_uid != geteuid())) {
        if (errno == EEXIST)
            errno = ENOTDIR;
        goto fail;
    }
    DIR *d = opendir(w.dir); /* the writer's own calls are not recorded */
    if (d == NULL)
        goto fail;
    struct dirent *e;
    int empty = 1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = 0;
    closedir(d);
    if (empty)
        return 0;
    errno = ENOTEMPTY;
fail:
    fprintf(stderr, "mbrecord: cannot create %s: %s; not recording\n", w.dir, strerror(errno));
    say_status("error cannot create %s: not recording\n", w.dir, 0);
    return -1;
}

static int segment_path(unsigned n)
{
    int len = snprintf(w.path, sizeof w.path, "%s/%04u.mbt", w.dir, n);
    return len > 0 && (size_t)len < sizeof w.path ? 0 : -1;
}

static void arm(const char *path, unsigned long long cap)
{
    const char *out = getenv("MBRECORD_OUT");
    if (path != NULL && *path)
        snprintf(w.path, sizeof w.path, "%s", path);
    else if (out != NULL && *out)
        snprintf(w.path, sizeof w.path, "%s", out);
    else
        snprintf(w.path, sizeof w.path, "/tmp/mbrecord-%d-%u.mbt", (int)getpid(), w.window);
    w.window++;
    w.segment = 0;
    w.seg_origin = w.closed_bytes = w.events = w.snapshot_bytes = 0;
    if (w.seg_bytes != 0 || w.seg_ns != 0) {
        snprintf(w.dir, sizeof w.dir, "%.*s", (int)sizeof w.dir - 16, w.path);
        if (open_dir() != 0 || segment_path(1) != 0)
            return;
        w.segment = 1;
    }
    if (w.cctx == NULL) {
        w.cctx = ZSTD_createCCtx_advanced((ZSTD_customMem){zstd_alloc, zstd_free, NULL});
        if (w.cctx == NULL) {
            fprintf(stderr, "mbrecord: no memory for a compression context; not recording\n");
            say_status("error %s: no memory for a compression context: not recording\n",
                       trace_name(), 0);
            return;
        }
        ZSTD_CCtx_setParameter(w.cctx, ZSTD_c_compressionLevel, 1);
        ZSTD_CCtx_setParameter(w.cctx, ZSTD_c_checksumFlag, 1);
    }
    w.raw.len = 0;
    w.pending = 0;
    /* a frame's raw and compressed buffers are the writer's share: at most a quarter of
     * the cap (a power of two, so that the raw buffer's doubling lands on it) */
    w.frame_bytes = 4u << 20;
    while (cap != 0 && w.frame_bytes > 2 * CHUNK_BYTES && w.frame_bytes > cap / 8)
        w.frame_bytes /= 2;
    /* the frame that would pass the budget is not written: under a small budget, frames
     * small enough that the trace takes most of it */
    while (w.budget != 0 && w.frame_bytes > 2 * CHUNK_BYTES && w.frame_bytes > w.budget / 16)
        w.frame_bytes /= 2;
    if (open_file() != 0)
        return;
    /* The writer's buffers at their full size from the start (zstd sizes its workspace by
     * the input it is given: a frame of zeros costs a millisecond), so that the cap counts
     * them before the first chunk rather than growing past it while the cut is written. */
    if (buf_reserve(&w.raw, w.frame_bytes) == 0 &&
        buf_reserve(&w.comp, sizeof(struct mb_frame) + ZSTD_compressBound(w.frame_bytes)) == 0)
        ZSTD_compress2(w.cctx, w.comp.data, w.comp.cap, w.raw.data, w.frame_bytes);
    t0_ns = now_ns();
    atomic_store(&cut_ns, 0);
    atomic_store(&max_buffer, cap);
    atomic_store(&own_peak, atomic_load(&own_bytes));
    atomic_store(&buf_peak, atomic_load(&buf_bytes));
    atomic_fetch_add(&gen, 1); /* chunks of an earlier window are discarded, not replayed */
    atomic_store(&armed, 1);
    /* after arming: a block allocated meanwhile is in the table and in the events; the
     * replayer treats an allocation at a live address as the end of the older block */
    snapshot();
    if (w.fd >= 0)
        say_status("recording %s\n", trace_name(), 0);
}

static double mib(unsigned long long bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* The END frame: this segment's (or trace's) summary; 0 once written. */
static int write_end(void)
{
    char end[512];
    unsigned long long lost = atomic_exchange(&dropped, 0), cut = atomic_load(&cut_ns);
    unsigned long long peak = atomic_load(&buf_peak), cap = atomic_load(&max_buffer);
    w.lost = lost;
    int n = snprintf(end, sizeof end,
                     "events=%llu\ndropped=%llu\nsnapshot_blocks=%llu\nshim_mapped_peak=%llu\n"
                     "buffer_peak=%llu\nmax_buffer=%llu\n",
                     (unsigned long long)(w.events - w.seg_events), lost,
                     (unsigned long long)w.snapshot_blocks,
                     (unsigned long long)atomic_load(&own_peak), peak, cap);
    if (cut != 0)
        n += snprintf(end + n, sizeof end - (size_t)n, "cut_s=%.6f\n", (double)(cut - 1) / 1e9);
    if (w.segment != 0)
        n += snprintf(end + n, sizeof end - (size_t)n, "segment=%u\n", w.segment);
    return write_frame(MB_FRAME_END, end, (size_t)n);
}

/* A stop of the shim's own (the buffer cap, the disk budget): the trace is closed with
 * `text` as its status, and the status file and stderr say so. */
static void closed_stopped(const char *text)
{
    set_trace_status(text);
    close(w.fd);
    w.fd = -1;
    fprintf(stderr, "mbrecord: %s: %s; recording stopped, the process runs on\n", trace_name(),
            text);
    char answer[MB_STATUS_SIZE + sizeof w.path + 16];
    snprintf(answer, sizeof answer, "stopped %s: %s\n", trace_name(),
             text + strlen("stopped: "));
    write_text_file(w.status_path, answer);
}

/* The disk budget is reached: the frame that would pass it is not written, and the trace
 * is closed with its END frame (its room was kept) and a status that says so; the
 * process runs on. The window's chunks are dropped (gen moves on), as after a write
 * error: the trace ends at its last whole frame. */
static void budget_stop(void)
{
    atomic_store(&armed, 0);
    atomic_fetch_add(&gen, 1);
    w.events -= w.pending; /* what the unwritten frame held is not in the trace */
    w.raw.len = 0;
    w.pending = 0;
    uint64_t t = now_ns() - t0_ns;
    char text[MB_STATUS_SIZE];
    snprintf(text, sizeof text,
             "stopped: the disk budget of %.1f MiB was reached at %.3f s, after %llu events "
             "in %llu bytes",
             mib(w.budget), (double)t / 1e9, (unsigned long long)w.events,
             (unsigned long long)(w.closed_bytes + w.good_end));
    if (write_end() != 0)
        return;
    closed_stopped(text);
}

/* Ends the window: on "off", a new "on", process exit, or the cap (cut_ns set). */
static void disarm(const char *why)
{
    if (w.fd < 0)
        return;
    atomic_store(&armed, 0);
    struct timespec pause = {0, 10000000};
    nanosleep(&pause, NULL); /* let calls that saw armed=1 commit their record */
    drain(1);
    flush_events();
    int folded = w.fd >= 0 && fold_empty_segment();
    if (w.fd < 0 || (!folded && write_end() != 0))
        return;
    unsigned long long cut = atomic_load(&cut_ns);
    unsigned long long peak = atomic_load(&buf_peak), cap = atomic_load(&max_buffer);
    unsigned long long events = w.events - w.seg_events;
    char text[MB_STATUS_SIZE];
    if (cut != 0) {
        snprintf(text, sizeof text,
                 "stopped: the writer fell behind; buffers reached %.1f MiB (cap %.1f MiB) "
                 "at %.3f s after %llu events",
                 mib(peak), mib(cap), (double)(cut - 1) / 1e9, events);
        closed_stopped(text);
        return;
    }
    snprintf(text, sizeof text, "complete (%s) events=%llu dropped=%llu", why, events, w.lost);
    set_trace_status(text);
    close(w.fd);
    w.fd = -1;
    say_status("complete %s events=%llu\n", trace_name(), w.events);
}

/* The chunks a rotation kept (records past its cut), taken into the new segment in the
 * order they came, then pooled. */
static void take_held(void)
{
    struct chunk *rev = NULL;
    while (w.held != NULL) {
        struct chunk *next = w.held->next;
        w.held->next = rev;
        rev = w.held;
        w.held = next;
    }
    unsigned g = atomic_load(&gen);
    while (rev != NULL) {
        struct chunk *next = rev->next;
        if (rev->gen == g)
            take_records(rev, atomic_load_explicit(&rev->count, memory_order_acquire));
        spin_lock(&pool_lock);
        rev->next = pool;
        pool = rev;
        spin_unlock(&pool_lock);
        rev = next;
    }
}

/* The next segment. The cut is a time: every record stamped before it goes in this
 * segment, every later one in the next, whichever thread's chunk holds it (a chunk with
 * records on both sides is kept until the next is open). The next segment starts with
 * the live-block table, read after the cut: a block allocated or freed meanwhile (the
 * milliseconds of the pause and the read) is also in its events, which the replayer of
 * that segment alone reads as an implicit or a skipped free. The joined replay ignores
 * the tables of the later segments: its own is exact. No recorded thread waits. */
static void rotate(void)
{
    /* with no room left for the next segment's header and table, this one takes the
     * rest of the budget: a segment with half a table would replay alone wrongly */
    uint64_t next = MB_HEADER_SIZE + 2 * w.snapshot_bytes + w.frame_bytes / 2 + END_ROOM;
    if (w.budget != 0 && w.closed_bytes + w.good_end + next > w.budget) {
        w.rotate_due = 0;
        w.seg_ns = 0;
        w.seg_bytes = 0;
        return;
    }
    uint64_t t = now_ns() - t0_ns;
    w.limit_ns = t + 1;
    struct timespec pause = {0, 10000000};
    nanosleep(&pause, NULL); /* let calls stamped before the cut commit their record */
    drain(1);
    flush_events();
    w.limit_ns = 0;
    if (w.fd >= 0 && write_end() == 0) {
        char text[MB_STATUS_SIZE];
        snprintf(text, sizeof text, "complete (segment %u; the recording goes on in %04u.mbt) "
                 "events=%llu dropped=%llu", w.segment, w.segment + 1,
                 (unsigned long long)(w.events - w.seg_events), w.lost);
        set_trace_status(text);
        close(w.fd);
        w.fd = -1;
        w.closed_bytes += w.good_end;
        w.segment++;
        w.seg_origin = t;
        if (segment_path(w.segment) == 0 && open_file() == 0)
            snapshot();
    }
    if (w.fd < 0) { /* a write error, or no next file: the recording stops there */
        atomic_store(&armed, 0);
        atomic_fetch_add(&gen, 1);
    }
    take_held();
}

/* Between windows the buffers go back to the system: the chunks handed over since (a
 * thread's last one, pushed when it next calls or exits), the pool, the writer's buffers
 * and zstd's context. Each thread's current chunk stays until it calls again: it may
 * still be writing to it, and unmapping it could crash the process. */
static void reclaim(void)
{
    struct chunk *c = atomic_exchange_explicit(&full_list, NULL, memory_order_acquire);
    spin_lock(&pool_lock);
    struct chunk *pooled = pool;
    pool = NULL;
    spin_unlock(&pool_lock);
    for (struct chunk *lists[2] = {c, pooled}, **l = lists; l < lists + 2; l++) {
        while (*l != NULL) {
            struct chunk *next = (*l)->next;
            unmap(*l, CHUNK_BYTES, BUFFER);
            *l = next;
        }
    }
    buf_free(&w.raw);
    buf_free(&w.comp);
    if (w.cctx != NULL) {
        ZSTD_freeCCtx(w.cctx);
        w.cctx = NULL;
    }
}

struct window_options {
    unsigned long long seg_bytes, seg_ns, budget;
};

/* Seconds ("300", "0.5") as ns; the text after them, NULL if not a number of seconds. */
static const char *parse_seconds(const char *text, unsigned long long *out)
{
    char *rest;
    errno = 0;
    double v = strtod(text, &rest);
    if (rest == text || errno != 0 || !(v >= 0 && v < 1e9))
        return NULL;
    *out = (unsigned long long)(v * 1e9);
    return rest;
}

/* "cap=B seg=B segsec=S budget=B " at the start of *arg, in any order; *arg is left at
 * the path. */
static int window_options(const char **arg, unsigned long long *cap, struct window_options *o)
{
    static const char *const keys[] = {"cap=", "seg=", "segsec=", "budget="};
    unsigned long long *to[] = {cap, &o->seg_bytes, &o->seg_ns, &o->budget};
    for (;;) {
        unsigned k = 0;
        while (k < 4 && strncmp(*arg, keys[k], strlen(keys[k])) != 0)
            k++;
        if (k == 4)
            return 0;
        const char *value = *arg + strlen(keys[k]);
        const char *rest = k == 2 ? parse_seconds(value, to[k]) : parse_bytes(value, to[k]);
        if (rest == NULL || (*rest != 0 && *rest != ' '))
            return -1;
        *arg = *rest ? rest + 1 : rest;
    }
}

static void poll_control(void)
{
    char text[1100] = {0};
    int fd = open(w.control, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_uid != geteuid() && st.st_uid != 0) ||
        (st.st_mode & (S_IWGRP | S_IWOTH))) {
        close(fd);
        return;
    }
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return;
    text[n] = 0;
    text[strcspn(text, "\n")] = 0;
    if (strcmp(text, w.last_command) == 0)
        return; /* act on changes only: a stale "on" is not a new window */
    snprintf(w.last_command, sizeof w.last_command, "%s", text);
    if (strncmp(text, "on", 2) == 0 && (text[2] == 0 || text[2] == ' ')) {
        const char *arg = text[2] ? text + 3 : "";
        unsigned long long cap = env_max_buffer;
        struct window_options o = {env_seg_bytes, env_seg_ns, env_budget};
        if (window_options(&arg, &cap, &o) != 0) {
            say_status("error %s: bad option in the control file: not recording\n", arg, 0);
            return;
        }
        disarm("re-armed");
        reclaim(); /* the new window's buffers are sized for its own cap */
        w.seg_bytes = o.seg_bytes;
        w.seg_ns = o.seg_ns;
        w.budget = o.budget;
        arm(arg, cap);
    } else if (strcmp(text, "off") == 0) {
        disarm("disarmed");
    }
}

/* MBRECORD_ARMED=1 arms every process that inherits it; "pid:N" only the process N, so
 * that a command recorded from its first call (`record -- COMMAND`) is recorded across
 * its exec()s (they keep its pid) while the programs it starts, which inherit the
 * variable, are not: they would write to the same MBRECORD_OUT. */
static int armed_at_start(const char *value)
{
    if (value == NULL)
        return 0;
    if (strcmp(value, "1") == 0)
        return 1;
    if (strncmp(value, "pid:", 4) != 0)
        return 0;
    char *rest;
    errno = 0;
    long pid = strtol(value + 4, &rest, 10);
    return errno == 0 && rest != value + 4 && *rest == 0 && pid == (long)getpid();
}

static void *writer_main(void *unused)
{
    (void)unused;
    in_hook = 1; /* the writer's own calls are not the program's */
    unsigned tick = 0;
    uint64_t last_flush = now_ns();
    while (!atomic_load(&w.stop)) {
        struct timespec pause = {0, 50000000};
        nanosleep(&pause, NULL);
        if (++tick % 2 == 0)
            poll_control();
        if (!atomic_load(&armed)) {
            if (w.fd >= 0 && atomic_load(&cut_ns) != 0)
                disarm("buffer cap");
            if (w.fd < 0)
                reclaim();
            continue;
        }
        drain(tick % 4 == 0);
        if (now_ns() - last_flush > 1000000000ull) {
            flush_events();
            last_flush = now_ns();
        }
        if (w.segment != 0 && w.fd >= 0 &&
            (w.rotate_due || (w.seg_ns != 0 && now_ns() - w.seg_began >= w.seg_ns)))
            rotate();
    }
    disarm("process exit");
    atomic_store(&w.done, 1);
    return NULL;
}

static void child_after_fork(void)
{
    /* the writer thread does not exist in the child and the locks may be held by threads
     * that do not either: the child only passes calls through */
    disabled = 1;
    atomic_store(&armed, 0);
}

/* MBRECORD_SEGMENT, MBRECORD_SEGMENT_SECONDS, MBRECORD_MAX_SIZE: a typo is said once and
 * ignored (no segments, no budget), as the recording is worth more than the option. */
static void env_options(void)
{
    static const char *const names[] = {"MBRECORD_SEGMENT", "MBRECORD_SEGMENT_SECONDS",
                                        "MBRECORD_MAX_SIZE"};
    unsigned long long *to[] = {&env_seg_bytes, &env_seg_ns, &env_budget};
    for (unsigned i = 0; i < 3; i++) {
        const char *text = getenv(names[i]);
        if (text == NULL || *text == 0)
            continue;
        const char *rest = i == 1 ? parse_seconds(text, to[i]) : parse_bytes(text, to[i]);
        if (rest == NULL || *rest != 0) {
            *to[i] = 0;
            fprintf(stderr, "mbrecord: %s=%s is not a %s; ignored\n", names[i], text,
                    i == 1 ? "number of seconds" : "size (e.g. 256M)");
        }
    }
}

__attribute__((constructor)) static void mbrecord_init(void)
{
    if (real_malloc == NULL)
        resolve();
    in_hook++;
    uint64_t seed = now_ns() ^ ((uint64_t)getpid() << 32);
    ptr_key = (seed * 0x9E3779B97F4A7C15ull) | (1ull << 63);
    const char *track = getenv("MBRECORD_TRACK_LIVE");
    tracking = !(track != NULL && strcmp(track, "0") == 0);
    const char *cap = getenv("MBRECORD_MAX_BUFFER");
    if (cap != NULL && *cap) {
        const char *rest = parse_bytes(cap, &env_max_buffer);
        if (rest == NULL || *rest != 0) {
            /* a typo must not lift the cap: keep the default and say so once */
            env_max_buffer = DEFAULT_MAX_BUFFER;
            fprintf(stderr, "mbrecord: MBRECORD_MAX_BUFFER=%s is not a size (e.g. 64M); "
                            "using 64M\n", cap);
        }
    }
    env_options();
    const char *control = getenv("MBRECORD_CONTROL");
    if (control != NULL && *control)
        snprintf(w.control, sizeof w.control, "%s", control);
    else
        snprintf(w.control, sizeof w.control, "/tmp/mbrecord-%d.control", (int)getpid());
    snprintf(w.status_path, sizeof w.status_path, "%s.status", w.control);
    if (pthread_key_create(&exit_key, thread_exit) != 0 ||
        pthread_atfork(NULL, NULL, child_after_fork) != 0) {
        disabled = 1;
        in_hook--;
        return;
    }
    /* Armed here, before the writer runs, so that no call of the program's comes before
     * the window: the program's main() has not begun, and this thread's own calls while
     * arming are not recorded (in_hook). */
    if (armed_at_start(getenv("MBRECORD_ARMED"))) {
        w.seg_bytes = env_seg_bytes;
        w.seg_ns = env_seg_ns;
        w.budget = env_budget;
        arm(NULL, env_max_buffer);
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t writer;
    if (pthread_create(&writer, NULL, writer_main, NULL) != 0)
        disabled = 1;
    else
        pthread_detach(writer);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    in_hook--;
}

__attribute__((destructor)) static void mbrecord_fini(void)
{
    if (disabled)
        return;
    atomic_store(&w.stop, 1);
    for (int i = 0; i < 400 && !atomic_load(&w.done); i++) {
        struct timespec pause = {0, 5000000};
        nanosleep(&pause, NULL);
    }
}
