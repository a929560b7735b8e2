/* The allocation-trace format shared by the recorder (mbrecord.c) and the replayer
 * (mbreplay.c). A trace holds no data: call kinds, sizes, alignments, pointer tokens,
 * thread tokens and times.
 *
 * File layout (little-endian):
 *   0    MB_HEADER_SIZE bytes, uncompressed:
 *        magic "MBTRACE\0", u32 version, u32 header size,
 *        status[MB_STATUS_SIZE]: rewritten in place ("recording", "complete ...",
 *          "stopped: why, at byte offset N"); in place because a full disk must still be
 *          able to say where the trace stopped, and overwriting written bytes needs no space,
 *        info: "key=value\n" lines (host, pid, exe, allocator, server_version, start times).
 *   then frames: struct mb_frame + a zstd frame (content checksum on) of raw_len bytes,
 *   so a truncated or corrupt trace is detected at a byte offset.
 *
 * Raw content of an EVENTS frame: a run of {u32 thread, u32 count, count x mb_rec};
 * of a SNAPSHOT frame: {u64 token, u64 size} for each block live when recording was armed;
 * of an END frame: a "key=value\n" summary.
 */
#ifndef MBTRACE_H
#define MBTRACE_H

#include <stdint.h>

#define MB_MAGIC "MBTRACE"   /* 8 bytes with its NUL */
#define MB_VERSION 1u
#define MB_HEADER_SIZE 1024u
#define MB_STATUS_OFFSET 16u
#define MB_STATUS_SIZE 240u
#define MB_INFO_OFFSET (MB_STATUS_OFFSET + MB_STATUS_SIZE)
#define MB_FRAME_MAGIC 0x5246424du /* "MBFR" */

enum mb_frame_kind { MB_FRAME_EVENTS = 1, MB_FRAME_SNAPSHOT = 2, MB_FRAME_END = 3 };

struct mb_frame {
    uint32_t magic;
    uint32_t kind;
    uint32_t comp_len;
    uint32_t raw_len;
};

/* One call. w0 = time in ns since arming << 8 | kind. A realloc is two records, its free
 * side stamped before the call and its allocation side after, so that no other thread's
 * reuse of either address can be ordered on the wrong side of it. */
enum mb_kind {
    MB_MALLOC = 1,       /* ptr, size */
    MB_CALLOC = 2,       /* ptr, size (nmemb * size) */
    MB_REALLOC_FREE = 3, /* old ptr (0 for realloc(NULL, n)) */
    MB_REALLOC = 4,      /* new ptr (0: failed, or freed by size 0), size, aux = old ptr */
    MB_FREE = 5,         /* ptr */
    MB_MEMALIGN = 6,     /* ptr, size, aux = alignment */
    MB_USABLE = 7,       /* ptr: a malloc_usable_size call */
};

struct mb_rec {
    uint64_t w0;
    uint64_t ptr;
    uint64_t size;
    uint64_t aux;
};

#define MB_KIND(w0) ((unsigned)((w0) & 0xffu))
#define MB_TIME(w0) ((w0) >> 8)

#endif
