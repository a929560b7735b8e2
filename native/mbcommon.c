/* The pieces mbpatterns and mbreplay share (mbcommon.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "mbcommon.h"

#include <dlfcn.h>
#include <stdio.h>

void json_str(const char *s)
{
    putchar('"');
    for (; s != NULL && *s; s++) {
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

const char *malloc_library(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "malloc");
    if (sym != NULL && dladdr(sym, &info) != 0 && info.dli_fname != NULL)
        return info.dli_fname;
    return "unknown";
}
