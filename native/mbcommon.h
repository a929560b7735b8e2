/* What the pattern driver and the replayer both need, written once: how they print a
 * JSON string and how they name the malloc they run under. Linked into both (Makefile);
 * the recording shim does not use it (it may call nothing that allocates). */
#ifndef MBCOMMON_H
#define MBCOMMON_H

/* `s` as a JSON string on stdout, quotes included; NULL prints as "". */
void json_str(const char *s);

/* The file whose malloc() this process calls, or "unknown": resolved the way the
 * program's own calls are, so it proves the preload took effect rather than just that a
 * file is mapped. */
const char *malloc_library(void);

#endif
