/* mbreplay: replay an allocation trace written by mbrecord under whatever allocator this
 * process is started with (LD_PRELOAD), and report its memory and CPU as JSON.
 *
 * Streamed: a reader thread decodes the trace a frame at a time, puts the calls back in
 * their global time order through a bounded reordering window, gives blocks their ids
 * (slots of a live-block table, reused once a block's end has been replayed) and hands
 * each call to its thread's ring of look-ahead; one replay thread per recorded thread
 * takes its calls from its ring. The replayer's own memory is the window, the rings and
 * the live-block table: it does not grow with the trace's length, and the replay starts
 * as soon as the first calls are ordered.
 *
 * An operation on a block made by another thread waits until that block exists, and the
 * call that ends a block (free, realloc) waits until every use of it (malloc_usable_size)
 * in other threads has happened (dependency edges: free-running threads must never make a
 * call on a block the program could not have made it on). Edges only point back in the
 * global order, so they cannot form a cycle; a free of a block the trace never saw (made
 * before a cut window) is skipped and counted. Every page of a new block is written once
 * (calloc's are zeroed by calloc), so pages are resident as the program made them. The
 * replayer's bookkeeping lives in mmap'd memory, touched when mapped and counted: its
 * size at each sample is taken out of the RSS, so what is left is the allocator's.
 *
 * Exit status 2 with one line on stderr for bad usage and bad traces (with the byte
 * offset of a truncated or corrupt frame).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "mbcommon.h"
#include "mbtrace.h"

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

/* ---- the replayer's own memory: mmap'd (out of the measured heap), touched when mapped
 * so that it is resident as soon as it exists, and counted, so that each RSS sample can
 * leave it out. It changes during a streamed replay (the window, the table), unlike the
 * whole-trace replayer's, which was all resident before the start. */
static _Atomic uint64_t own_now, own_peak;

static void own_add(int64_t delta)
{
    uint64_t now = atomic_fetch_add(&own_now, (uint64_t)delta) + (uint64_t)delta;
    uint64_t peak = atomic_load(&own_peak);
    while (now > peak && !atomic_compare_exchange_weak(&own_peak, &peak, now))
        ;
}

static void *zmap(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fail("out of memory (%zu bytes)", bytes);
    own_add((int64_t)bytes); /* counted before it is resident, and after it is gone (zunmap):
                              * own memory is never under-counted in a sample */
    memset(p, 0, bytes);
    return p;
}

static void zunmap(void *p, size_t bytes)
{
    munmap(p, bytes ? bytes : 1);
    own_add(-(int64_t)(bytes ? bytes : 1));
}

/* growable arrays on the same terms */
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
            fail("out of memory reading the trace (%zu bytes)", cap);
        own_add((int64_t)(cap - a->cap));
        memset((char *)p + a->cap, 0, cap - a->cap);
        a->data = p;
        a->cap = cap;
    }
    void *at = a->data + a->len;
    a->len += more;
    return at;
}

/* ---- the trace, a frame at a time ---- */
static struct {
    char status[MB_STATUS_SIZE + 1];
    char info[MB_HEADER_SIZE];
    char end[512];
    uint32_t version;
    uint64_t frames, bytes, events;
    uint64_t read_events; /* every call in the frames read, --until or not */
    int end_frame;        /* the recorder closed the trace: its END frame is there */
    uint64_t snapshot_blocks;
    uint64_t counts[8];
} tr;

static struct {
    int fd;
    uint64_t at, size;
    ZSTD_DCtx *dctx;
    struct arr comp, raw;
    int held; /* the frame in raw is to be read again (the first after the snapshot) */
    struct mb_frame f;
    uint64_t f_at;
} rd;

static void *zstd_alloc(void *opaque, size_t size)
{
    (void)opaque;
    char *p = mmap(NULL, size + 64, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memcpy(p, &size, sizeof size);
    own_add((int64_t)(size + 64));
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
    own_add(-(int64_t)(size + 64));
}

static void read_at(void *to, size_t len, uint64_t at)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = pread(rd.fd, (char *)to + done, len - done, (off_t)(at + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fail("cannot read %s at byte offset %llu: %s", trace_path,
                 (unsigned long long)(at + done), n < 0 ? strerror(errno) : "file shrank");
        done += (size_t)n;
    }
}

/* A segmented trace is a directory of segments NNNN.mbt (mbrecord.c), read one after the
 * other as one trace: the first one's live-block table is the replay's start, the later
 * ones' are skipped (the replay's own table carries across, exact where theirs were read
 * milliseconds after their cut). A segment given alone is a trace like any other. */
#define SEG_NAME 32u
static struct {
    const char *given;  /* the path given: the directory, or the file */
    struct arr names;   /* SEG_NAME bytes a segment, in order */
    uint32_t n, at;     /* its segments (0: a file), and the one being read */
    char path[4096];    /* the segment being read */
    uint64_t origin;    /* ns since the arming: the first call's clock starts here */
    long long counted;  /* calls the segments before this one count; -1: one did not say */
    uint64_t skipped_tables;
} seg;

/* ns since the recording's arming at which a segment's calls begin (its header's
 * segment_start_ns; 0 for the first segment and for a trace that is no segment) */
static uint64_t segment_start(const char *info)
{
    const char *at = strstr(info, "segment_start_ns=");
    return at != NULL && (at == info || at[-1] == '\n')
               ? strtoull(at + strlen("segment_start_ns="), NULL, 10)
               : 0;
}

/* One file's header; the frames are read through pread, never mapped: a mapped trace's
 * pages would count in this process's RSS as the replay went through them. */
static void open_file(const char *path, int first)
{
    trace_path = path;
    rd.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (rd.fd < 0)
        fail("cannot open trace %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(rd.fd, &st) != 0 || !S_ISREG(st.st_mode))
        fail("%s is not a regular file", path);
    rd.size = (uint64_t)st.st_size;
    tr.bytes += rd.size;
    if (rd.size < 16)
        fail("%s: not a mallocbench trace (only %llu bytes)", path, (unsigned long long)rd.size);
    char head[MB_HEADER_SIZE] = {0};
    read_at(head, rd.size < sizeof head ? (size_t)rd.size : sizeof head, 0);
    if (memcmp(head, MB_MAGIC, 8) != 0)
        fail("%s: not a mallocbench trace (bad magic at byte offset 0)", path);
    uint32_t header;
    memcpy(&tr.version, head + 8, 4);
    memcpy(&header, head + 12, 4);
    if (tr.version > MB_VERSION)
        fail("%s: trace format version %u is newer than this replayer's (%u): upgrade mallocbench",
             path, tr.version, MB_VERSION);
    if (tr.version == 0 || header < MB_INFO_OFFSET || header > rd.size || header > sizeof head)
        fail("%s: corrupt header at byte offset 8 (version %u, header size %u)", path,
             tr.version, header);
    memcpy(tr.status, head + MB_STATUS_OFFSET, MB_STATUS_SIZE); /* the last segment's says */
    tr.status[MB_STATUS_SIZE] = 0;
    if (first) { /* where and when the recording began */
        memcpy(tr.info, head + MB_INFO_OFFSET, header - MB_INFO_OFFSET);
        tr.info[sizeof tr.info - 1] = 0;
        seg.origin = segment_start(tr.info);
    }
    rd.at = header;
}

/* A directory's segments, in their order. Read with getdents64 into mapped memory:
 * opendir's buffer would come from the allocator being measured. */
static void list_segments(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        fail("cannot open trace %s: %s", dir, strerror(errno));
    struct arr buf = {0};
    char *ents = arr_grow(&buf, 1u << 16);
    for (;;) {
        long n = syscall(SYS_getdents64, fd, ents, buf.cap);
        if (n < 0)
            fail("cannot read the directory %s: %s", dir, strerror(errno));
        if (n == 0)
            break;
        for (long at = 0; at < n;) {
            unsigned short reclen;
            memcpy(&reclen, ents + at + 16, sizeof reclen);
            const char *name = ents + at + 19; /* d_ino, d_off, d_reclen, d_type */
            at += reclen;
            size_t digits = strspn(name, "0123456789");
            if (digits == 0 || strcmp(name + digits, ".mbt") != 0 || strlen(name) >= SEG_NAME)
                continue;
            memcpy(arr_grow(&seg.names, SEG_NAME), name, strlen(name) + 1);
            seg.n++;
        }
    }
    close(fd);
    zunmap(buf.data, buf.cap);
    if (seg.n == 0)
        fail("%s: a directory with no trace segments (NNNN.mbt) in it: give a trace file or "
             "the directory `mallocbench record` wrote", dir);
    char *names = seg.names.data, tmp[SEG_NAME]; /* a few thousand at most: insertion */
    for (uint32_t i = 1; i < seg.n; i++) {
        memcpy(tmp, names + i * SEG_NAME, SEG_NAME);
        unsigned long key = strtoul(tmp, NULL, 10);
        uint32_t j = i;
        for (; j > 0 && strtoul(names + (j - 1) * SEG_NAME, NULL, 10) > key; j--)
            memcpy(names + j * SEG_NAME, names + (j - 1) * SEG_NAME, SEG_NAME);
        memcpy(names + j * SEG_NAME, tmp, SEG_NAME);
    }
    /* joined across a gap, the blocks made and freed in it would be leaks and skipped
     * frees: refused */
    for (uint32_t i = 1; i < seg.n; i++) {
        unsigned long a = strtoul(names + (i - 1) * SEG_NAME, NULL, 10);
        unsigned long z = strtoul(names + i * SEG_NAME, NULL, 10);
        if (z != a + 1)
            fail("%s: segment %lu is missing between %s and %s: replay the segments on "
                 "either side of it one at a time", dir, a + 1, names + (i - 1) * SEG_NAME,
                 names + i * SEG_NAME);
    }
}

static void open_segment(uint32_t i)
{
    seg.at = i;
    int len = snprintf(seg.path, sizeof seg.path, "%s/%s", seg.given,
                       seg.names.data + (size_t)i * SEG_NAME);
    if (len < 0 || (size_t)len >= sizeof seg.path)
        fail("%s: path too long", seg.given);
    open_file(seg.path, i == 0);
}

static void open_trace(const char *path)
{
    seg.given = trace_path = path;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        list_segments(path);
        open_segment(0);
    } else {
        open_file(path, 1);
    }
    ZSTD_customMem mem = {zstd_alloc, zstd_free, NULL};
    rd.dctx = ZSTD_createDCtx_advanced(mem);
    if (rd.dctx == NULL)
        fail("out of memory creating a decompression context");
}

static long long file_events(void);

/* The end of a segment: the next one, its calls counted with the earlier ones'. */
static int next_segment(void)
{
    if (seg.at + 1 >= seg.n)
        return 0;
    long long here = file_events();
    seg.counted = seg.counted < 0 || here < 0 ? -1 : seg.counted + here;
    close(rd.fd);
    tr.end_frame = 0;
    tr.end[0] = 0;
    open_segment(seg.at + 1);
    return 1;
}

/* The next frame, decompressed into rd.raw; 0 at the end of the trace. */
static int next_frame(struct mb_frame *f, uint64_t *at)
{
    if (rd.held) {
        rd.held = 0;
        *f = rd.f;
        *at = rd.f_at;
        return 1;
    }
    for (;;) {
        if (rd.at >= rd.size && !next_segment())
            return 0;
        if (rd.at >= rd.size)
            continue;
        *at = rd.at;
        if (rd.size - rd.at < sizeof *f)
            fail("%s: truncated at byte offset %llu (a frame header needs %zu bytes, %llu left)",
                 trace_path, (unsigned long long)rd.at, sizeof *f,
                 (unsigned long long)(rd.size - rd.at));
        read_at(f, sizeof *f, rd.at);
        if (f->magic != MB_FRAME_MAGIC || f->kind < MB_FRAME_EVENTS || f->kind > MB_FRAME_END)
            fail("%s: corrupt frame at byte offset %llu (bad frame header)", trace_path,
                 (unsigned long long)rd.at);
        if (f->comp_len > rd.size - rd.at - sizeof *f)
            fail("%s: truncated at byte offset %llu (a frame of %u bytes starts there, the file "
                 "ends at %llu)", trace_path, (unsigned long long)rd.at, f->comp_len,
                 (unsigned long long)rd.size);
        if (seg.at == 0 || f->kind != MB_FRAME_SNAPSHOT)
            break;
        rd.at += sizeof *f + f->comp_len; /* a later segment's table: the replay has its own */
        seg.skipped_tables++;
    }
    rd.comp.len = rd.raw.len = 0;
    char *in = arr_grow(&rd.comp, f->comp_len ? f->comp_len : 1);
    read_at(in, f->comp_len, rd.at + sizeof *f);
    char *out = arr_grow(&rd.raw, f->raw_len ? f->raw_len : 1);
    size_t got = ZSTD_decompressDCtx(rd.dctx, out, f->raw_len, in, f->comp_len);
    if (ZSTD_isError(got) || got != f->raw_len)
        fail("%s: corrupt frame at byte offset %llu (%s)", trace_path, (unsigned long long)rd.at,
             ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong length");
    rd.at += sizeof *f + f->comp_len;
    tr.frames++;
    rd.f = *f;
    rd.f_at = *at;
    return 1;
}

/* The calls the recorder counted in this file: its END frame's events=, else the header
 * status's "events=N" or "after N events" (a recording cut by a write error); -1 if it
 * says none. */
static long long file_events(void)
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

/* The calls the recorder counted in the trace, every segment's. */
static long long header_events(void)
{
    long long here = file_events();
    return seg.counted < 0 || here < 0 ? -1 : seg.counted + here;
}

static struct {
    int timing; /* 1: keep the recorded gaps */
    double speed;
    double sample_ms;
    int check;
} opt = {1, 1.0, 10.0, 0};

/* --order recorded: the calls of all threads run one at a time in the order recorded, so
 * every replay makes the allocator the same calls in the same order (an allocator whose
 * layout depends on how threads interleave, like tcmalloc's, then gives one peak). */
static int strict_order;
/* --order batched: the recorded order kept by batches of BATCH_OPS calls. The calls of
 * one batch run freely (with the block edges), and no call of the next batch starts
 * before every call of this one has been made: a barrier every BATCH_OPS calls instead
 * of a hand-over at every change of thread, and no call ever further than one batch from
 * its recorded place in the order. */
static int batched;
#define BATCH_OPS 256u

/* --until: only the calls of the first N ns of the trace (0: all of it). A portion is
 * a shorter replay of the same program, its recorded start (the snapshot) included. */
static uint64_t until_ns;
/* The recorder's writer sweeps every thread's records into frames every 200 ms, so once a
 * whole frame is this far past --until, no later frame holds a call before it. */
#define UNTIL_SLACK_NS 10000000000ull

/* ---- the live-block table: one slot per block made and not yet ended (by the replay),
 * in chunks that never move, so replay threads read it while the reader adds chunks.
 * The reader alone gives slots out; a replay thread hands a slot back once it has
 * replayed the block's end, through a stack the reader takes whole (no ABA: one taker). */
struct slot {
    _Atomic(void *) p; /* the replay's block; NULL until made */
    uint64_t size;     /* reader only */
    /* Uses of the block (malloc_usable_size) handed to replay threads and not yet
     * replayed. The reader counts one up as it hands a use over, the replay thread counts
     * it down after the call; the call that ends the block waits for 0. Why that is the
     * issue-52 edge without any look-ahead: a token leaves the reader's map when its
     * block ends, so every use of a block comes before its end in the order the reader
     * hands calls over; when the end is handed over, every use has been counted up
     * (nothing counts up after it), and 0 then means each of them has been replayed. A
     * use in the ender's own thread is replayed before the end by program order, so it
     * never makes the end wait. */
    _Atomic uint32_t uses;
    uint32_t creator; /* thread index that made it; NONE: the snapshot (made up front) */
    uint32_t next;    /* the retired stack's link */
    uint32_t pad;
};

#define SLOT_BITS 16u
#define SLOT_CHUNK (1u << SLOT_BITS)
static struct slot *slot_dir[1u << (32 - SLOT_BITS)];
static uint32_t slots_made;      /* slots ever mapped (reader) */
static uint32_t slot_free = NONE; /* the reader's own free list */
static _Atomic uint32_t retired = NONE;

static inline struct slot *slot_at(uint32_t id)
{
    return &slot_dir[id >> SLOT_BITS][id & (SLOT_CHUNK - 1)];
}

static uint32_t slot_take(void)
{
    if (slot_free == NONE)
        slot_free = atomic_exchange_explicit(&retired, NONE, memory_order_acquire);
    if (slot_free != NONE) {
        uint32_t id = slot_free;
        slot_free = slot_at(id)->next;
        return id;
    }
    if (slots_made == NONE - 1)
        fail("%s: more than 4 billion blocks live at once", trace_path);
    uint32_t id = slots_made++;
    if ((id & (SLOT_CHUNK - 1)) == 0)
        slot_dir[id >> SLOT_BITS] = zmap(sizeof(struct slot) * SLOT_CHUNK);
    return id;
}

/* a replay thread, after replaying a block's end: the slot can serve a new block */
static void slot_retire(uint32_t id)
{
    struct slot *s = slot_at(id);
    atomic_store_explicit(&s->p, NULL, memory_order_relaxed);
    uint32_t head = atomic_load_explicit(&retired, memory_order_relaxed);
    do
        s->next = head;
    while (!atomic_compare_exchange_weak_explicit(&retired, &head, id, memory_order_release,
                                                  memory_order_relaxed));
}

/* ---- token -> slot, open addressing with backward-shift deletion, grown as the live
 * set grows ---- */
static struct {
    uint64_t *key;
    uint32_t *val;
    size_t mask, count;
} map;

static size_t map_home(uint64_t key)
{
    return (size_t)((key >> 4) * 0x9E3779B97F4A7C15ull >> 17) & map.mask;
}

static size_t map_slot(uint64_t key)
{
    size_t j = map_home(key);
    while (map.key[j] != 0 && map.key[j] != key)
        j = (j + 1) & map.mask;
    return j;
}

static uint32_t map_get(uint64_t key)
{
    size_t j = map_slot(key);
    return map.key[j] == key ? map.val[j] : NONE;
}

static void map_alloc(size_t slots)
{
    map.key = zmap(sizeof *map.key * slots);
    map.val = zmap(sizeof *map.val * slots);
    map.mask = slots - 1;
    map.count = 0;
}

static void map_put(uint64_t key, uint32_t val);

static void map_double(void)
{
    uint64_t *key = map.key;
    uint32_t *val = map.val;
    size_t slots = map.mask + 1;
    map_alloc(slots * 2);
    for (size_t j = 0; j < slots; j++)
        if (key[j] != 0)
            map_put(key[j], val[j]);
    zunmap(key, sizeof *key * slots);
    zunmap(val, sizeof *val * slots);
}

static void map_put(uint64_t key, uint32_t val)
{
    if ((map.count + 1) * 2 > map.mask + 1)
        map_double();
    size_t j = map_slot(key);
    map.count += map.key[j] != key;
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
        size_t home = map_home(map.key[k]);
        if (((k - home) & map.mask) >= ((k - hole) & map.mask)) {
            map.key[hole] = map.key[k];
            map.val[hole] = map.val[k];
            hole = k;
        }
    }
    map.key[hole] = 0;
    map.count--;
    return val;
}

/* ---- one op: a call as a replay thread makes it ---- */
struct op {
    uint64_t ts;
    uint64_t size;     /* of the block made; of the block ended, for a free */
    uint64_t old_size; /* a realloc's old block */
    uint32_t id;
    uint32_t old;
    uint32_t align;
    uint32_t seq;        /* --order recorded: the op's place in the global order (mod 2^32) */
    uint32_t next_owner; /* --order recorded: the thread of the next place, to wake it */
    uint16_t kind;
    uint8_t wait; /* WAIT_* bits: what other threads must have done before this op */
    uint8_t use;  /* 1: counted in its block's uses */
};

#define WAIT_MADE 1u /* the block, made by another thread, exists */
#define WAIT_USED 2u /* every use of the block in other threads has happened */

/* Each replay thread's look-ahead: a ring the reader fills and the thread empties. When
 * it is full the reader waits; that cannot deadlock: every op handed over depends only
 * on ops earlier in the global order, all handed over already, so the earliest op not
 * yet replayed can always run, and the rings drain. */
#define RING_OPS 1024u

/* Three cache lines, by who writes them: the reader's (written at every op handed over),
 * the replay thread's (at every op made) and the rarely written. Sharing a line, each
 * op's write by one thread took the line from the other: the replay thread's add to
 * `live` stalled on it most of its time outside the allocator. */
struct worker {
    _Alignas(64) struct op *ring;
    _Atomic uint64_t written; /* ops handed over (reader) */
    uint64_t written_own;     /* the reader's copy */
    uint64_t done_seen;       /* the reader's last look at `done`: room it knows of */
    _Alignas(64) _Atomic uint64_t done; /* ops replayed (replay thread) */
    _Atomic uint64_t at; /* the op this thread is on, from 1; past its last: all made */
    _Atomic int64_t live;
    /* the recorded time of the op it is on, not yet made; UINT64_MAX: none handed to it */
    _Atomic uint64_t ts_next;
    _Alignas(64) uint32_t token, index;
    pthread_t tid;
    _Atomic uint32_t idle;  /* 1: asleep on `nudge` for the reader's next op */
    _Atomic uint32_t nudge; /* futex word, bumped by the reader to wake it */
};

/* Far above any real server's threads (thousands): a trace with more is damaged or
 * crafted, and each one costs a replay thread and a linear lookup here. */
#define MAX_THREADS 4096u

static struct worker *workers;
static _Atomic uint32_t nworkers; /* replay threads started (the sampler sums their live) */
static _Atomic int64_t snapshot_live_now; /* the snapshot's blocks, made by the reader */

/* ---- the reordering window. Frames do not hold calls in time order: the recorder's
 * writer takes each thread's records every 200 ms (one thread's can arrive a sweep
 * later than another's), and a thread's own records can come swapped at a chunk
 * boundary. Each thread's records wait in a queue kept in time order, and a heap over
 * the queues' heads gives them out in the global order (time, thread, arrival) - the
 * order the whole-trace replayer sorted - once no later frame can hold an earlier call:
 * frames read after one whose first call is at T hold no call before T - window. */
#define WINDOW_NS 2000000000ull    /* ten sweeps */
#define WINDOW_MAX_NS UNTIL_SLACK_NS /* the recorder's bound (see --until) */

struct rthread {
    uint32_t token;
    uint32_t pending_old; /* block of a realloc between its two records */
    uint32_t heap_at;     /* its place in the heap; NONE: its queue is empty */
    uint32_t pad;
    struct mb_rec *q; /* queued records, [head, end), time-ordered */
    size_t cap, head, end;
};

static struct rthread *threads; /* MAX_THREADS */
static uint32_t nthreads;
static uint32_t *heap, heap_n;
static uint64_t window_ns = WINDOW_NS, watermark, stepped_ts;
static uint64_t queued, queued_peak, late_calls;

static inline uint64_t head_ts(uint32_t ti)
{
    const struct rthread *t = &threads[ti];
    return MB_TIME(t->q[t->head].w0);
}

static inline int heap_less(uint32_t a, uint32_t b)
{
    uint64_t x = head_ts(a), y = head_ts(b);
    return x != y ? x < y : a < b;
}

static void heap_set(uint32_t at, uint32_t ti)
{
    heap[at] = ti;
    threads[ti].heap_at = at;
}

static void heap_up(uint32_t at)
{
    uint32_t ti = heap[at];
    while (at > 0 && heap_less(ti, heap[(at - 1) / 2])) {
        heap_set(at, heap[(at - 1) / 2]);
        at = (at - 1) / 2;
    }
    heap_set(at, ti);
}

static void heap_down(uint32_t at)
{
    uint32_t ti = heap[at];
    for (;;) {
        uint32_t c = 2 * at + 1;
        if (c >= heap_n)
            break;
        if (c + 1 < heap_n && heap_less(heap[c + 1], heap[c]))
            c++;
        if (!heap_less(heap[c], ti))
            break;
        heap_set(at, heap[c]);
        at = c;
    }
    heap_set(at, ti);
}

/* room for `more` records at the queue's end: the consumed front reused, or a larger
 * array */
static void queue_reserve(struct rthread *t, size_t more)
{
    if (t->end + more <= t->cap)
        return;
    size_t n = t->end - t->head;
    if (t->head > 0) {
        memmove(t->q, t->q + t->head, sizeof *t->q * n);
        t->head = 0;
        t->end = n;
    }
    if (n + more <= t->cap)
        return;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < n + more)
        cap *= 2;
    struct mb_rec *q = zmap(sizeof *q * cap);
    memcpy(q, t->q, sizeof *q * n);
    if (t->q != NULL)
        zunmap(t->q, sizeof *t->q * t->cap);
    t->q = q;
    t->cap = cap;
}

static uint64_t frame_first_ns; /* the frame being read: its earliest call */
/* The latest first call of the frames read before this one, and how far before it a
 * call of a later frame fell at most: the window this trace needed (reported beside
 * window_s). */
static uint64_t first_max_ns, lateness_ns;
static struct arr scratch; /* the merge's copy of the records a late run goes before */

/* The run just appended at [start, end), itself in order, merged into the queue before
 * it when it begins earlier than the queue ends: a thread's chunk the writer took a
 * sweep late lands behind its successor. One merge, stable (of equal times, the records
 * that came first stay first). */
static void merge_back(struct rthread *t, size_t start)
{
    uint64_t first = MB_TIME(t->q[start].w0);
    size_t lo = t->head, hi = start; /* the first record later than `first` */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (MB_TIME(t->q[mid].w0) <= first)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t n = start - lo;
    scratch.len = 0;
    struct mb_rec *a = arr_grow(&scratch, sizeof *a * n);
    memcpy(a, t->q + lo, sizeof *a * n);
    size_t i = 0, j = start, k = lo;
    while (i < n && j < t->end)
        t->q[k++] = MB_TIME(t->q[j].w0) < MB_TIME(a[i].w0) ? t->q[j++] : a[i++];
    while (i < n)
        t->q[k++] = a[i++];
}

/* a run out of order within itself (not seen from the recorder): a stable insertion */
static void sort_run(struct mb_rec *r, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        struct mb_rec x = r[i];
        size_t j = i;
        for (; j > 0 && MB_TIME(r[j - 1].w0) > MB_TIME(x.w0); j--)
            r[j] = r[j - 1];
        r[j] = x;
    }
}

/* One thread's run of records from a frame, queued in time order. */
static void enqueue_run(uint32_t ti, const char *raw, uint32_t count, uint64_t at)
{
    struct rthread *t = &threads[ti];
    queue_reserve(t, count);
    size_t start = t->end;
    int sorted = 1;
    for (uint32_t i = 0; i < count; i++) {
        struct mb_rec r;
        memcpy(&r, raw + (size_t)i * sizeof r, sizeof r);
        unsigned kind = MB_KIND(r.w0);
        uint64_t ts = MB_TIME(r.w0);
        if (seg.origin != 0) { /* a set or a segment from a later cut: timed from there */
            ts = ts > seg.origin ? ts - seg.origin : 0;
            r.w0 = ts << 8 | kind;
        }
        if (kind < MB_MALLOC || kind > MB_USABLE)
            fail("%s: corrupt frame at byte offset %llu (unknown call kind %u)", trace_path,
                 (unsigned long long)at, kind);
        tr.read_events++;
        if (ts < frame_first_ns)
            frame_first_ns = ts;
        if (until_ns && ts > until_ns)
            continue;
        tr.counts[kind]++;
        tr.events++;
        if (ts < stepped_ts)
            late_calls++; /* the window was too narrow for this trace: widened below */
        if (first_max_ns > ts && first_max_ns - ts > lateness_ns)
            lateness_ns = first_max_ns - ts;
        if (t->end > start && ts < MB_TIME(t->q[t->end - 1].w0))
            sorted = 0;
        t->q[t->end++] = r;
    }
    size_t added = t->end - start;
    if (added == 0)
        return;
    if (!sorted)
        sort_run(t->q + start, added);
    uint64_t head_before = start > t->head ? MB_TIME(t->q[t->head].w0) : UINT64_MAX;
    if (start > t->head && MB_TIME(t->q[start].w0) < MB_TIME(t->q[start - 1].w0))
        merge_back(t, start);
    queued += added;
    if (queued > queued_peak)
        queued_peak = queued;
    if (t->heap_at == NONE) {
        heap[heap_n] = ti;
        t->heap_at = heap_n++;
        heap_up(t->heap_at);
    } else if (MB_TIME(t->q[t->head].w0) < head_before) {
        heap_up(t->heap_at);
    }
}

static struct worker *start_worker(uint32_t index, uint32_t token);

static uint32_t thread_of(uint32_t token, uint64_t at)
{
    static uint32_t last;
    if (last < nthreads && threads[last].token == token)
        return last;
    for (uint32_t i = 0; i < nthreads; i++)
        if (threads[i].token == token)
            return last = i;
    if (nthreads >= MAX_THREADS)
        fail("%s: more than %u threads (the %uth starts in the frame at byte offset %llu): "
             "no real server records that many; the trace is damaged or not a recording",
             trace_path, MAX_THREADS, nthreads + 1, (unsigned long long)at);
    struct rthread *t = &threads[nthreads];
    t->token = token;
    t->pending_old = NONE;
    t->heap_at = NONE;
    if (!opt.check)
        start_worker(nthreads, token);
    return last = nthreads++;
}

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
        enqueue_run(thread_of(head[0], at), raw + pos, head[1], at);
        pos += bytes;
    }
}

/* ---- building the replay as the calls come: block slots, edges, the ideal live curve */
static struct {
    uint64_t nblocks;
    uint64_t skipped_frees, unknown_reallocs, implicit_frees, failed_reallocs;
    int64_t live, peak_live, final_live;
    uint64_t peak_live_ts, duration_ns, nops;
    int64_t snapshot_live;
    uint64_t seq;
    /* the ideal live curve, {u64 ts, i64 live}: one point every `stride` calls, the
     * stride doubled (every other point dropped) whenever CURVE_POINTS are reached */
    int64_t *curve;
    size_t points;
    uint64_t stride, calls;
    int64_t last[2];
} b;

#define CURVE_POINTS 4096u

static void curve_step(uint64_t ts)
{
    b.last[0] = (int64_t)ts;
    b.last[1] = b.live;
    if (b.calls++ % b.stride != 0)
        return;
    if (b.points == CURVE_POINTS) {
        for (size_t i = 0; i < CURVE_POINTS / 2; i++)
            memcpy(&b.curve[2 * i], &b.curve[4 * i], 16);
        b.points = CURVE_POINTS / 2;
        b.stride *= 2;
        if ((b.calls - 1) % b.stride != 0)
            return;
    }
    memcpy(&b.curve[2 * b.points++], b.last, 16);
}

static void curve_close(void)
{
    if (b.calls > 0 && (b.points == 0 || b.curve[2 * (b.points - 1)] != b.last[0] ||
                        (b.calls - 1) % b.stride != 0)) {
        if (b.points == CURVE_POINTS)
            b.points--;
        memcpy(&b.curve[2 * b.points++], b.last, 16);
    }
}

static void *fresh(const struct op *o);

static uint32_t new_block(uint64_t size, uint32_t creator)
{
    uint32_t id = slot_take();
    struct slot *s = slot_at(id);
    s->size = size;
    s->creator = creator;
    b.nblocks++;
    b.live += (int64_t)size;
    if (b.live > b.peak_live)
        b.peak_live = b.live;
    return id;
}

static void end_block(uint32_t id)
{
    b.live -= (int64_t)slot_at(id)->size;
}

/* A replay thread with nothing handed to it sleeps rather than polls: on a loaded host
 * its polling would take the CPU the reader needs to hand it more. The store of
 * `written` and the load of `idle` here, and the store of `idle` and the load of
 * `written` in next_op, are all sequentially consistent: one side sees the other. */
static void wake_idle(struct worker *w)
{
    if (atomic_load(&w->idle) && atomic_exchange(&w->idle, 0)) {
        atomic_fetch_add(&w->nudge, 1);
        syscall(SYS_futex, &w->nudge, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* the op's ring slot, once there is room in the ring */
static void wait_a_little(unsigned spins);
static atomic_int primed, go;

static void ring_put(uint32_t ti, const struct op *o)
{
    struct worker *w = &workers[ti];
    uint64_t n = w->written_own;
    /* `done` only grows: room seen once is still there, and the replay thread's line is
     * read again only when the ring looks full */
    for (unsigned spins = 0;
         n - w->done_seen >= RING_OPS &&
         n - (w->done_seen = atomic_load_explicit(&w->done, memory_order_acquire)) >= RING_OPS;
         spins++) {
        atomic_store(&primed, 1); /* the look-ahead is full: time to start */
        wait_a_little(spins | 64u);
    }
    w->ring[n & (RING_OPS - 1)] = *o;
    atomic_store(&w->written, n + 1);
    w->written_own = n + 1;
    wake_idle(w);
}

/* --order recorded: an op is handed over once the next one's thread is known */
static struct {
    struct op op;
    uint32_t thread;
    int held;
} hold;

static void hand_over(uint32_t ti, struct op *o)
{
    if (batched) {
        o->seq = (uint32_t)(b.seq - b.seq % BATCH_OPS); /* its batch's first place */
        b.seq++;
        ring_put(ti, o);
        return;
    }
    if (!strict_order) {
        ring_put(ti, o);
        return;
    }
    o->seq = (uint32_t)b.seq++;
    if (hold.held) {
        hold.op.next_owner = ti;
        ring_put(hold.thread, &hold.op);
    }
    hold.op = *o;
    hold.thread = ti;
    hold.held = 1;
}

static void hand_over_last(void)
{
    if (hold.held) {
        hold.op.next_owner = NONE;
        ring_put(hold.thread, &hold.op);
        hold.held = 0;
    }
}

static int ends_a_block(unsigned kind)
{
    return kind == MB_FREE || kind == MB_REALLOC;
}

static void add_op(uint32_t ti, uint64_t ts, uint16_t kind, uint32_t id, uint32_t old,
                   uint64_t size, uint32_t align)
{
    b.nops++;
    uint32_t dep = kind == MB_MALLOC || kind == MB_CALLOC || kind == MB_MEMALIGN ? NONE
                   : kind == MB_REALLOC                                          ? old
                                                                                 : id;
    if (opt.check) {
        if (ends_a_block(kind) && dep != NONE) {
            slot_at(dep)->next = slot_free; /* no replay: free at once */
            slot_free = dep;
        }
        return;
    }
    struct op o = {ts, size, 0, id, old, align, 0, NONE, kind, 0, 0};
    if (kind == MB_FREE)
        o.size = slot_at(id)->size;
    if (kind == MB_REALLOC && old != NONE)
        o.old_size = slot_at(old)->size;
    if (dep != NONE) {
        struct slot *s = slot_at(dep);
        if (s->creator != NONE && s->creator != ti)
            o.wait |= WAIT_MADE;
        if (ends_a_block(kind) && atomic_load_explicit(&s->uses, memory_order_acquire) != 0)
            o.wait |= WAIT_USED;
        if (kind == MB_USABLE) {
            o.use = 1;
            atomic_fetch_add_explicit(&s->uses, 1, memory_order_relaxed);
        }
    }
    hand_over(ti, &o);
}

/* Implicit frees, skipped frees and failed reallocs as the whole-trace replayer had them:
 * the same calls, block for block. */
static void step(uint32_t ti, const struct mb_rec *r)
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
            end_block(id);
            add_op(ti, ts, MB_FREE, id, NONE, 0, 0);
        }
        id = new_block(r->size, ti);
        map_put(r->ptr, id);
        add_op(ti, ts, (uint16_t)kind, id, NONE, r->size, (uint32_t)r->aux);
        break;
    case MB_FREE:
        id = map_take(r->ptr);
        if (id == NONE) {
            b.skipped_frees++;
            break;
        }
        end_block(id);
        add_op(ti, ts, MB_FREE, id, NONE, 0, 0);
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
                end_block(old);
                add_op(ti, ts, MB_FREE, old, NONE, 0, 0);
            }
            break;
        }
        uint32_t stale = map_take(r->ptr);
        if (stale != NONE) {
            b.implicit_frees++;
            end_block(stale);
            add_op(ti, ts, MB_FREE, stale, NONE, 0, 0);
        }
        if (old != NONE)
            end_block(old);
        id = new_block(r->size, ti);
        map_put(r->ptr, id);
        add_op(ti, ts, MB_REALLOC, id, old, r->size, 0);
        break;
    }
    case MB_USABLE:
        id = map_get(r->ptr);
        if (id != NONE)
            add_op(ti, ts, MB_USABLE, id, NONE, 0, 0);
        break;
    }
}

static void check_span(uint64_t span_ns);
static _Atomic uint64_t released_ts; /* stepped_ts, for the sampler */

/* Every queued call before the watermark, in the global order. */
static void release(void)
{
    while (heap_n > 0 && head_ts(heap[0]) < watermark) {
        uint32_t ti = heap[0];
        struct rthread *t = &threads[ti];
        struct mb_rec r = t->q[t->head++];
        queued--;
        if (t->head < t->end) {
            heap_down(0);
        } else {
            t->head = t->end = 0;
            t->heap_at = NONE;
            if (--heap_n > 0) {
                heap_set(0, heap[heap_n]);
                heap_down(0);
            }
        }
        uint64_t ts = MB_TIME(r.w0);
        int64_t before = b.peak_live;
        step(ti, &r);
        if (b.peak_live > before)
            b.peak_live_ts = ts;
        if (ts > stepped_ts) {
            stepped_ts = ts;
            atomic_store_explicit(&released_ts, ts, memory_order_relaxed);
            check_span(ts); /* a trace not read whole before the start: here, at the gap */
        }
        b.duration_ns = stepped_ts;
        curve_step(ts);
    }
}

/* A snapshot block: live before the first call; the replay makes it at once. */
static void snapshot_block(uint64_t token, uint64_t size)
{
    uint32_t id = map_take(token);
    if (id != NONE)
        end_block(id); /* listed twice: the later entry stands (the block stays made) */
    id = new_block(size, NONE);
    map_put(token, id);
    tr.snapshot_blocks++;
    b.snapshot_live = b.live;
    if (opt.check)
        return;
    struct op o = {0, size, 0, id, NONE, 0, 0, NONE, MB_MALLOC, 0, 0};
    atomic_store_explicit(&slot_at(id)->p, fresh(&o), memory_order_release);
    atomic_fetch_add_explicit(&snapshot_live_now, (int64_t)size, memory_order_relaxed);
}

/* One frame read and decoded before the baseline is taken, then read again: the code and
 * buffers that decoding touches are then resident in the baseline, as the whole-trace
 * replayer's were (it had read everything before), and not counted as the allocator's. */
static void warm_up(void)
{
    uint64_t from = rd.at, frames = tr.frames;
    if (rd.at >= rd.size)
        return; /* a segment with no frame: the next one is not opened here */
    struct mb_frame f;
    uint64_t at;
    (void)next_frame(&f, &at);
    rd.at = from;
    tr.frames = frames;
}

static void snapshot_frame(const char *raw, size_t len)
{
    for (size_t i = 0; i + 16 <= len; i += 16) {
        uint64_t pair[2];
        memcpy(pair, raw + i, 16);
        snapshot_block(pair[0], pair[1]);
    }
}

/* The snapshot, read by the main thread before the reader starts: its blocks are made
 * where the whole-trace replayer made them, in the main thread's arena. */
static void read_snapshot(void)
{
    struct mb_frame f;
    uint64_t at;
    while (next_frame(&f, &at)) {
        if (f.kind != MB_FRAME_SNAPSHOT) {
            rd.held = 1;
            return;
        }
        snapshot_frame(rd.raw.data, f.raw_len);
    }
}

static _Atomic uint64_t read_done_ns;
static atomic_int read_all;
static uint64_t now_ns(void);

/* The reader: every frame in turn, each call handed over once it is in order. */
static void read_trace(void)
{
    struct mb_frame f;
    uint64_t at;
    int events_seen = 0;
    while (next_frame(&f, &at)) {
        const char *out = rd.raw.data;
        size_t got = f.raw_len;
        if (f.kind == MB_FRAME_EVENTS) {
            events_seen = 1;
            parse_events(out, got, at);
            if (frame_first_ns == UINT64_MAX)
                continue;
            if (late_calls > 0 && window_ns < WINDOW_MAX_NS)
                window_ns = WINDOW_MAX_NS;
            if (frame_first_ns > first_max_ns)
                first_max_ns = frame_first_ns;
            uint64_t mark = frame_first_ns > window_ns ? frame_first_ns - window_ns : 0;
            if (mark > watermark)
                watermark = mark;
            release();
            if (until_ns && frame_first_ns > until_ns + UNTIL_SLACK_NS)
                break; /* the rest of the trace is past the portion */
        } else if (f.kind == MB_FRAME_SNAPSHOT) {
            if (events_seen)
                fail("%s: corrupt trace: a snapshot frame at byte offset %llu after calls",
                     trace_path, (unsigned long long)at);
            snapshot_frame(out, got);
        } else {
            snprintf(tr.end, sizeof tr.end, "%.*s", (int)got, out);
            tr.end_frame = 1;
        }
    }
    watermark = UINT64_MAX;
    release();
    hand_over_last();
    b.final_live = b.live;
    curve_close();
    atomic_store(&read_done_ns, now_ns());
    atomic_store(&read_all, 1);
    if (!opt.check)
        for (uint32_t i = 0; i < nthreads; i++)
            wake_idle(&workers[i]);
    atomic_store(&primed, 1);
}

/* the reader's CPU, left out of the replay's: what a replay costs is its threads' calls */
static struct rusage reader_ru;
static double reader_before, reader_sys_before;

static void *reader_main(void *arg)
{
    (void)arg;
    read_trace();
    getrusage(RUSAGE_THREAD, &reader_ru);
    return NULL;
}

/* ---- the replay ---- */
static uint64_t process_start_ns;
static uint64_t start_ns;
static atomic_int finished;
static atomic_ullong malloc_failures, waits;

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
    struct slot *s = slot_at(id);
    void *p;
    for (unsigned spins = 0; (p = atomic_load_explicit(&s->p, memory_order_acquire)) == NULL;
         spins++)
        wait_a_little(spins);
    return p;
}

static void await_uses(uint32_t id)
{
    struct slot *s = slot_at(id);
    for (unsigned spins = 0; atomic_load_explicit(&s->uses, memory_order_acquire) != 0; spins++)
        wait_a_little(spins);
}

/* A block's pointer, once it exists, and once no other thread still has a use of it to
 * make when this op ends it. */
static void *block_for(const struct op *o, uint32_t id)
{
    void *p = o->wait & WAIT_MADE
                  ? await(id)
                  : atomic_load_explicit(&slot_at(id)->p, memory_order_relaxed);
    if (o->wait & WAIT_USED)
        await_uses(id);
    return p;
}

#define FAILED ((void *)1) /* a block whose allocation failed: nothing to free */

static long page_size;

/* One write in each page of [p, p + size): the pages the program's writes made resident
 * are resident here too, so the RSS is what writing the block whole gives, at a store a
 * page instead of a store a byte (writing blocks whole was two thirds of a replay's CPU on
 * a busy InnoDB trace, the same work under every allocator, hiding theirs). */
static void touch(char *p, size_t size)
{
    if (size == 0)
        return;
    volatile char *first = p;
    *first = 0x5a;
    uintptr_t page = ((uintptr_t)p | (uintptr_t)(page_size - 1)) + 1; /* the next page */
    for (uintptr_t end = (uintptr_t)p + size; page < end; page += (uintptr_t)page_size)
        *(volatile char *)page = 0x5a;
}

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
        touch(p, size);
    return p;
}

/* Only its own thread writes a worker's `live` (the sampler reads it): a plain add, not a
 * locked one, which would wait for the line at every call. */
static inline void live_add(struct worker *wk, int64_t delta)
{
    int64_t was = atomic_load_explicit(&wk->live, memory_order_relaxed);
    atomic_store_explicit(&wk->live, was + delta, memory_order_relaxed);
}

static void run_op(struct worker *wk, const struct op *o)
{
    void *p;
    switch (o->kind) {
    case MB_MALLOC:
    case MB_CALLOC:
    case MB_MEMALIGN:
        atomic_store_explicit(&slot_at(o->id)->p, fresh(o), memory_order_release);
        live_add(wk, (int64_t)o->size);
        break;
    case MB_FREE:
        p = block_for(o, o->id);
        if (p != FAILED)
            free(p);
        live_add(wk, -(int64_t)o->size);
        slot_retire(o->id);
        break;
    case MB_REALLOC: {
        p = o->old == NONE ? NULL : block_for(o, o->old);
        if (p == FAILED)
            p = NULL;
        void *q = realloc(p, (size_t)o->size);
        if (q == NULL) {
            atomic_fetch_add(&malloc_failures, 1);
            if (p != NULL)
                free(p);
            q = FAILED;
        } else if (o->size > o->old_size) {
            touch((char *)q + o->old_size, (size_t)(o->size - o->old_size));
        }
        atomic_store_explicit(&slot_at(o->id)->p, q, memory_order_release);
        live_add(wk, (int64_t)o->size - (int64_t)o->old_size);
        if (o->old != NONE)
            slot_retire(o->old);
        break;
    }
    case MB_USABLE:
        p = block_for(o, o->id);
        if (p != FAILED)
            (void)malloc_usable_size(p);
        if (o->use)
            atomic_fetch_sub_explicit(&slot_at(o->id)->uses, 1, memory_order_release);
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

static void pass_turn(uint32_t seq, uint32_t next, uint32_t self)
{
    atomic_store_explicit(&turn, seq + 1, memory_order_release);
    if (next != NONE && next != self)
        syscall(SYS_futex, &turn, FUTEX_WAKE_BITSET_PRIVATE, INT32_MAX, NULL, NULL,
                1u << (next % 32));
}

/* --order batched: calls made, and the first place of the batch open to run. Batches
 * end in order: a call of batch k+1 starts only once `open` says so, which the last call
 * of batch k to end sets; its fetch_add reads every earlier one's, so every call of batch
 * k happened before anything of batch k+1 does. */
static atomic_uint made_calls, batch_open;
static uint32_t cpus; /* this process may run on */

/* A batch waits for a whole batch of other threads' calls. With more replay threads
 * than CPUs, the threads it waits for are likely not running, and a spin only takes
 * their CPU: asleep at once. */
static unsigned batch_spins(void)
{
    return atomic_load_explicit(&nworkers, memory_order_relaxed) + 1 < cpus ? 256 : 0;
}

static void wait_batch(uint32_t first)
{
    for (unsigned spins = 0;; spins++) {
        unsigned open = atomic_load_explicit(&batch_open, memory_order_acquire);
        if ((int32_t)(open - first) >= 0)
            return;
        if (spins < batch_spins()) {
            cpu_relax();
            continue;
        }
        syscall(SYS_futex, &batch_open, FUTEX_WAIT_PRIVATE, open, NULL, NULL, 0);
    }
}

/* A thread's calls of one batch are counted together, when it leaves the batch or is
 * about to wait (one shared add for a run of calls, not one each: the counter's cache
 * line then moves between CPUs once a run). The batch still opens on exactly its last
 * call: no call of the next batch is counted before this one is whole, so the adds of
 * this batch's calls, however grouped, reach first + BATCH_OPS with the last of them. A
 * thread never waits holding calls uncounted (batch_flush before every wait): the
 * others may be waiting for them. */
struct batch_run {
    uint32_t first; /* the batch of the calls held */
    uint32_t calls; /* made and not yet counted */
};

static void batch_flush(struct batch_run *run)
{
    if (run->calls == 0)
        return;
    unsigned made =
        atomic_fetch_add_explicit(&made_calls, run->calls, memory_order_acq_rel) + run->calls;
    uint32_t first = run->first;
    run->calls = 0;
    if (made == first + BATCH_OPS) {
        atomic_store_explicit(&batch_open, made, memory_order_release);
        syscall(SYS_futex, &batch_open, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    }
}

/* ---- a replay that dies says which call each thread was on: its place in the thread's
 * calls and its recorded time into the trace, so the call can be found (and the trace
 * replayed --until just past it). Written with write(2) only: the heap may be broken. */
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
    put_u(l, atomic_load(&nworkers), 0);
    put_s(l, " (recorded thread ");
    put_u(l, workers[i].token, 0);
    put_s(l, ")");
}

/* A streamed replay has not read the whole trace yet: a thread's calls are then those
 * handed to it so far. */
static void report_thread(uint32_t i)
{
    struct worker *w = &workers[i];
    uint64_t n = atomic_load(&w->written), at = atomic_load(&w->at);
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
        const struct op *o = &w->ring[(at - 1) & (RING_OPS - 1)];
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
        uint32_t n = atomic_load(&nworkers);
        for (uint32_t i = 0; i < n; i++)
            report_thread(i);
    } else {
        for (;;)
            pause(); /* another thread is reporting; its re-raised signal ends us all */
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void report_crashes(void)
{
    static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof *fatal; i++)
        sigaction(fatal[i], &sa, NULL);
}

/* the next op handed to this thread; NULL once the reader is done and none is left */
static const struct op *next_op(struct worker *wk, uint64_t i)
{
    for (unsigned spins = 0; atomic_load_explicit(&wk->written, memory_order_acquire) == i;
         spins++) {
        if (atomic_load_explicit(&read_all, memory_order_acquire) &&
            atomic_load_explicit(&wk->written, memory_order_acquire) == i)
            return NULL;
        /* the reader is behind: not an edge wait, so not counted in waits */
        if (spins == 0)
            atomic_store_explicit(&wk->ts_next, UINT64_MAX, memory_order_relaxed);
        if (spins < 16) {
            sched_yield();
            continue;
        }
        uint32_t nudge = atomic_load(&wk->nudge);
        atomic_store(&wk->idle, 1);
        if (atomic_load(&wk->written) == i && !atomic_load(&read_all)) {
            struct timespec tick = {0, 10000000}; /* and a look at read_all now and then */
            syscall(SYS_futex, &wk->nudge, FUTEX_WAIT_PRIVATE, nudge, &tick, NULL, 0);
        }
        atomic_store(&wk->idle, 0);
    }
    return &wk->ring[i & (RING_OPS - 1)];
}

static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    uint32_t self = wk->index;
    crash_self = self;
    while (!atomic_load(&go))
        sched_yield();
    uint64_t i = 0;
    /* the clock as last read: an op due before it is due now, without reading it again
     * (a replay behind its schedule then reads the clock only to sleep) */
    uint64_t now = 0;
    struct batch_run run = {0, 0};
    for (const struct op *o;; i++) {
        if (run.calls && atomic_load_explicit(&wk->written, memory_order_acquire) == i)
            batch_flush(&run); /* next_op is about to wait for the reader */
        if ((o = next_op(wk, i)) == NULL)
            break;
        atomic_store_explicit(&wk->ts_next, o->ts, memory_order_relaxed);
        if (opt.timing) {
            uint64_t when = start_ns + (uint64_t)((double)o->ts / opt.speed);
            if (when > now + 20000 && when > (now = now_ns()) + 20000) {
                batch_flush(&run);
                sleep_until(when);
                now = when;
            }
        }
        if (strict_order)
            wait_turn(o->seq, self);
        else if (batched) {
            if (run.calls && run.first != o->seq)
                batch_flush(&run);
            wait_batch(o->seq);
        }
        atomic_store_explicit(&wk->at, i + 1, memory_order_relaxed);
        run_op(wk, o);
        if (strict_order)
            pass_turn(o->seq, o->next_owner, self);
        else if (batched) {
            run.first = o->seq;
            run.calls++;
        }
        atomic_store_explicit(&wk->done, i + 1, memory_order_release);
    }
    batch_flush(&run);
    atomic_store_explicit(&wk->ts_next, UINT64_MAX, memory_order_relaxed);
    atomic_store_explicit(&wk->at, i + 1, memory_order_relaxed);
    return NULL;
}

/* A replay thread for each recorded thread: its ring is made as the reader meets the
 * thread, and the main thread starts it (a thread the reader started would have glibc
 * give the reader an arena of its own for the new thread's TLS: one arena more than the
 * whole-trace replayer made, and a different layout). */
static struct worker *start_worker(uint32_t index, uint32_t token)
{
    struct worker *w = &workers[index];
    w->ring = zmap(sizeof *w->ring * RING_OPS);
    w->token = token;
    w->index = index;
    atomic_store_explicit(&w->ts_next, UINT64_MAX, memory_order_relaxed);
    atomic_store_explicit(&nworkers, index + 1, memory_order_release);
    return w;
}

static uint32_t started;

static void start_threads(void)
{
    uint32_t n = atomic_load_explicit(&nworkers, memory_order_acquire);
    for (; started < n; started++)
        if (pthread_create(&workers[started].tid, NULL, worker_main, &workers[started]) != 0)
            fail("cannot start replay thread %u: %s", started + 1, strerror(errno));
}

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

#define SAMPLE_BYTES 40u

struct sampler {
    int fd;
    struct arr samples; /* {u64 t_ns, u64 rss, i64 live, u64 own, u64 trace_ns} */
    uint64_t peak_rss;
    int64_t peak_live;
    uint64_t trace_ns; /* the last sample's place on the trace's clock */
};

static void take_sample(struct sampler *s)
{
    int64_t live = atomic_load_explicit(&snapshot_live_now, memory_order_relaxed);
    uint32_t n = atomic_load(&nworkers);
    /* Where the replay is on the trace's clock: its wall time times --speed while it keeps
     * up; a replay that falls behind is at the earliest call not yet made (or, with none
     * handed over, the latest the reader has handed over), never past it. At --timing
     * none, there alone. */
    uint64_t elapsed = now_ns() - start_ns;
    uint64_t trace_ns = atomic_load_explicit(&released_ts, memory_order_relaxed);
    if (opt.timing && (double)elapsed * opt.speed < (double)trace_ns)
        trace_ns = (uint64_t)((double)elapsed * opt.speed);
    for (uint32_t i = 0; i < n; i++) {
        live += atomic_load_explicit(&workers[i].live, memory_order_relaxed);
        uint64_t ts = atomic_load_explicit(&workers[i].ts_next, memory_order_relaxed);
        trace_ns = ts < trace_ns ? ts : trace_ns;
    }
    if (trace_ns < s->trace_ns) /* a thread behind the others took its next call */
        trace_ns = s->trace_ns;
    s->trace_ns = trace_ns;
    /* own memory unchanged across the RSS read: a window queue doubling in between (tens
     * of MB mapped, then the old one unmapped) would otherwise be taken for heap */
    uint64_t own, rss;
    for (int tries = 0;; tries++) {
        own = atomic_load(&own_now);
        rss = rss_now(s->fd);
        if (atomic_load(&own_now) == own || tries == 8)
            break;
    }
    uint64_t *x = arr_grow(&s->samples, SAMPLE_BYTES);
    x[0] = elapsed;
    x[1] = rss;
    memcpy(&x[2], &live, 8);
    x[3] = own;
    x[4] = trace_ns;
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

static void print_trace_json(void)
{
    printf("{\n  \"trace\": ");
    json_str(seg.given);
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
    printf("  \"threads\": %u,\n  \"snapshot_blocks\": %llu,\n  \"blocks\": %llu,\n", nthreads,
           (unsigned long long)tr.snapshot_blocks, (unsigned long long)b.nblocks);
    printf("  \"skipped_frees\": %llu,\n  \"unknown_reallocs\": %llu,\n"
           "  \"implicit_frees\": %llu,\n  \"failed_reallocs\": %llu,\n",
           (unsigned long long)b.skipped_frees, (unsigned long long)b.unknown_reallocs,
           (unsigned long long)b.implicit_frees, (unsigned long long)b.failed_reallocs);
    if (until_ns)
        printf("  \"until_s\": %.6f,\n", (double)until_ns / 1e9);
    /* how the reordering window did: calls it held at most, and calls that came after a
     * later call had been replayed (0 on every trace the recorder writes; more means the
     * window was widened to its bound and the order before that is approximate) */
    printf("  \"window_s\": %.3f,\n  \"window_peak_calls\": %llu,\n  \"late_calls\": %llu,\n"
           "  \"window_needed_s\": %.6f,\n",
           (double)window_ns / 1e9, (unsigned long long)queued_peak,
           (unsigned long long)late_calls, (double)lateness_ns / 1e9);
    printf("  \"live_table_slots\": %u,\n", slots_made);
    /* a set's segments (0: one file), and the later segments' tables it did not read */
    printf("  \"segments\": %u,\n  \"segment_tables_skipped\": %llu,\n", seg.n,
           (unsigned long long)seg.skipped_tables);
    printf("  \"snapshot_live\": %lld,\n", (long long)b.snapshot_live);
    printf("  \"duration_s\": %.6f,\n  \"ideal_peak_live\": %lld,\n  \"ideal_peak_at_s\": %.6f,\n"
           "  \"final_live\": %lld,\n  \"ops\": %llu,\n  \"ideal_curve\": [",
           (double)b.duration_ns / 1e9, (long long)b.peak_live, (double)b.peak_live_ts / 1e9,
           (long long)b.final_live, (unsigned long long)b.nops);
    for (size_t i = 0; i < b.points; i++)
        printf("%s[%.6f, %lld]", i ? ", " : "", (double)b.curve[2 * i] / 1e9,
               (long long)b.curve[2 * i + 1]);
    printf("]");
}

/* RSS less the process's own memory (code, stacks: `base`) and the replayer's
 * bookkeeping at that moment (`own`): the allocator's */
static uint64_t heap_of(uint64_t rss, uint64_t base, uint64_t own)
{
    return rss > base + own ? rss - base - own : 0;
}

static void print_replay_json(struct sampler *s, uint64_t base, uint64_t hwm, int exact,
                              uint64_t wall, struct rusage *ru0, struct rusage *ru1)
{
    /* the reader's share since the start: its whole CPU less what it had used by then
     * (reader_before; while it runs, counted as user time: reading is decoding and
     * sorting) */
    double reader_user = tv(reader_ru.ru_utime) - reader_before, reader_sys = tv(reader_ru.ru_stime) - reader_sys_before;
    double user = tv(ru1->ru_utime) - tv(ru0->ru_utime) - reader_user;
    double sys = tv(ru1->ru_stime) - tv(ru0->ru_stime) - reader_sys;
    user = user > 0 ? user : 0;
    sys = sys > 0 ? sys : 0;
    const uint64_t *x = (const uint64_t *)s->samples.data;
    size_t ns = s->samples.len / SAMPLE_BYTES;
    uint64_t own_max = atomic_load(&own_peak);
    /* the exact peak is the kernel's; the bookkeeping then was at most its peak */
    uint64_t peak_heap = heap_of(hwm, base, own_max);
    /* The steady peak: the sampled peak over the replay's second half. Its start makes the
     * blocks live when the window opened all at once, into a fresh heap, and some
     * allocators peak there (jemalloc 1.15x the base's at 2 s of a 60 s window, 1.09x from
     * 6 s on): a transient of the replay, not of the recorded server. */
    uint64_t steady_from = wall / 2, steady_peak = 0;
    for (size_t i = 0; i < ns; i++) {
        const uint64_t *at = x + 5 * i;
        uint64_t heap = heap_of(at[1], base, at[3]);
        if (heap > peak_heap)
            peak_heap = heap;
        if (at[0] >= steady_from && heap > steady_peak)
            steady_peak = heap;
    }
    printf(",\n  \"timing\": \"%s\",\n  \"speed\": %g,\n  \"order\": \"%s\",\n"
           "  \"malloc_library\": ",
           opt.timing ? "recorded" : "none", opt.speed,
           strict_order ? "recorded" : batched ? "batched" : "threads");
    json_str(malloc_library());
    printf(",\n  \"wall_s\": %.6f,\n  \"user_s\": %.6f,\n  \"sys_s\": %.6f,\n  \"cpu_s\": %.6f,\n",
           (double)wall / 1e9, user, sys, user + sys);
    /* baseline_rss: the replayer's own, at its largest (process + bookkeeping) */
    printf("  \"calls_per_s\": %.1f,\n  \"baseline_rss\": %llu,\n  \"bookkeeping_peak\": %llu,\n"
           "  \"peak_rss\": %llu,\n  \"peak_heap_rss\": %llu,\n  \"max_rss_kernel\": %llu,\n"
           "  \"peak_exact\": %s,\n",
           wall ? (double)b.nops / ((double)wall / 1e9) : 0.0,
           (unsigned long long)(base + own_max), (unsigned long long)own_max,
           (unsigned long long)s->peak_rss, (unsigned long long)peak_heap,
           (unsigned long long)ru1->ru_maxrss * 1024ull, exact && hwm ? "true" : "false");
    printf("  \"peak_heap_rss_steady\": %llu,\n  \"steady_from_s\": %.6f,\n",
           (unsigned long long)steady_peak, (double)steady_from / 1e9);
    printf("  \"reader_cpu_s\": %.6f,\n", reader_user + reader_sys);
    /* seconds from the process start: to the replay threads going (their first calls at
     * --timing none), and to the end of the reading */
    printf("  \"replay_start_after_s\": %.6f,\n  \"trace_read_after_s\": %.6f,\n",
           (double)(start_ns - process_start_ns) / 1e9,
           (double)(atomic_load(&read_done_ns) - process_start_ns) / 1e9);
    printf("  \"replay_peak_live\": %lld,\n  \"rss_over_live\": %.4f,\n  \"malloc_failures\": "
           "%llu,\n  \"waits\": %llu,\n  \"samples\": [",
           (long long)s->peak_live, b.peak_live > 0 ? (double)peak_heap / (double)b.peak_live : 0.0,
           (unsigned long long)malloc_failures, (unsigned long long)waits);
    size_t stride = ns / 2000 + 1;
    for (size_t i = 0; i < ns; i++) {
        if (i % stride != 0 && i + 1 != ns)
            continue;
        const uint64_t *at = x + 5 * i;
        int64_t live;
        memcpy(&live, &at[2], 8);
        printf("%s[%.4f, %llu, %lld, %.4f]", i ? ", " : "", (double)at[0] / 1e9,
               (unsigned long long)heap_of(at[1], base, at[3]), (long long)live,
               (double)at[4] / 1e9);
    }
    printf("]");
}

/* Before the start, the reader fills the look-ahead (or reads the whole of a short
 * trace): the replay threads then begin with their calls at hand. */
#define PRIME_NS 2000000000ull
#define READER_STACK (512u << 10)

static void replay(void)
{
    workers = zmap(sizeof *workers * MAX_THREADS);
    report_crashes();
    struct sampler s = {.fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC)};
    arr_grow(&s.samples, SAMPLE_BYTES * 100000); /* resident up front: no growth in a 1000 s replay */
    s.samples.len = 0;
    warm_up();
    uint64_t base = rss_now(s.fd) - atomic_load(&own_now);
    read_snapshot();
    /* the reader's stack is bookkeeping too: mapped, touched and counted like the rest */
    pthread_t reader;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, zmap(READER_STACK), READER_STACK);
    if (pthread_create(&reader, &attr, reader_main, NULL) != 0)
        fail("cannot start the trace reader: %s", strerror(errno));
    pthread_attr_destroy(&attr);
    uint64_t limit = now_ns() + PRIME_NS;
    while (!atomic_load(&primed) && now_ns() < limit) {
        start_threads();
        sleep_until(now_ns() + 1000000);
    }
    start_threads();
    if (atomic_load(&read_all)) { /* a short trace, read whole: refused before any call */
        check_calls();
        check_span(b.duration_ns);
    }
    struct rusage ru0, ru1;
    int reader_joined = atomic_load(&read_all);
    if (reader_joined) { /* read whole already: none of its CPU is the replay's */
        pthread_join(reader, NULL);
        reader_before = tv(reader_ru.ru_utime);
        reader_sys_before = tv(reader_ru.ru_stime);
    } else {
        clockid_t reader_clock;
        struct timespec cpu = {0, 0};
        if (pthread_getcpuclockid(reader, &reader_clock) == 0)
            clock_gettime(reader_clock, &cpu);
        reader_before = (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9;
    }
    getrusage(RUSAGE_SELF, &ru0);
    start_ns = now_ns();
    pthread_t sampler;
    if (pthread_create(&sampler, NULL, sampler_main, &s) != 0)
        fail("cannot start the RSS sampler: %s", strerror(errno));
    int exact = reset_hwm();
    atomic_store(&go, 1);
    while (!atomic_load(&read_all)) {
        start_threads();
        sleep_until(now_ns() + 1000000);
    }
    if (!reader_joined)
        pthread_join(reader, NULL);
    start_threads();
    check_calls();
    for (uint32_t i = 0; i < started; i++)
        pthread_join(workers[i].tid, NULL);
    uint64_t wall = now_ns() - start_ns;
    getrusage(RUSAGE_SELF, &ru1);
    atomic_store(&finished, 1);
    pthread_join(sampler, NULL);
    take_sample(&s);
    uint64_t hwm = exact ? read_hwm() : 0;
    if (hwm > s.peak_rss)
        s.peak_rss = hwm; /* a spike between two samples */
    print_trace_json();
    print_replay_json(&s, base, hwm, exact, wall, &ru0, &ru1);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mbreplay TRACE [--check] [--timing recorded|none] [--speed N] "
            "[--order recorded|batched|threads] [--until SECONDS] [--sample-ms MS]\n"
            "Replays an mbrecord trace under the allocator this process runs with; JSON on "
            "stdout.\n");
    exit(2);
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
            if (strcmp(v, "recorded") != 0 && strcmp(v, "threads") != 0 &&
                strcmp(v, "batched") != 0)
                fail("--order must be recorded, batched or threads, not %s", v);
            strict_order = strcmp(v, "recorded") == 0;
            batched = strcmp(v, "batched") == 0;
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
    cpu_set_t allowed;
    cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? (uint32_t)CPU_COUNT(&allowed) : 1;
    process_start_ns = now_ns();
    open_trace(path);
    threads = zmap(sizeof *threads * MAX_THREADS);
    heap = zmap(sizeof *heap * MAX_THREADS);
    b.curve = zmap(16 * CURVE_POINTS);
    b.stride = 1;
    map_alloc(1u << 16);
    if (opt.check) {
        read_snapshot();
        read_trace();
        check_calls();
        check_span(b.duration_ns);
        print_trace_json();
    } else {
        replay();
    }
    printf("\n}\n");
    return 0;
}
