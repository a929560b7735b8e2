/* Test-only preload: gives the process it is loaded into pages freed with MADV_FREE.
 *
 * At load it maps MB_LAZYFREE_MIB MiB (default 64) of anonymous memory, writes every
 * page, and hands them back with madvise(MADV_FREE), as an allocator does when it
 * purges lazily. The kernel keeps such pages resident, shown as LazyFree in smaps, until
 * it needs the memory; the mapping stays for the life of the process so they can be
 * seen. Allocators decide for themselves when to purge lazily, which a test cannot
 * count on; this makes the amount known.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

__attribute__((constructor)) static void mb_lazyfree(void) {
    const char *env = getenv("MB_LAZYFREE_MIB");
    long mib = env ? strtol(env, NULL, 10) : 64;
    if (mib <= 0)
        return;
    size_t size = (size_t)mib << 20;
    void *region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED)
        return;
    memset(region, 0x5a, size);
    madvise(region, size, MADV_FREE);
}
