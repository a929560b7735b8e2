/* Arming the mbrecord shim from inside a test program, through its control file: the
 * programs arm it themselves so that the window holds exactly their calls. */
#ifndef SHIM_CONTROL_H
#define SHIM_CONTROL_H
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void control(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) < 0)
        abort();
    close(fd);
}

/* Until STATUS begins with WORD, or "error ..." (the shim stopped recording, a full
 * disk: the program runs on); exit 3 naming PROGRAM after 5 s without an answer. */
static void wait_for(const char *program, const char *status, const char *word)
{
    for (int i = 0; i < 500; i++) {
        char text[256] = {0};
        int fd = open(status, O_RDONLY);
        if (fd >= 0) {
            ssize_t n = read(fd, text, sizeof text - 1);
            (void)n;
            close(fd);
            if (strncmp(text, word, strlen(word)) == 0 || strncmp(text, "error", 5) == 0)
                return;
        }
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    fprintf(stderr, "%s: the shim never answered %s in %s\n", program, word, status);
    exit(3);
}

/* Record into TRACE from here on, through CONTROL; STATUS gets CONTROL.status (the
 * shim's answers) for `disarm`. */
static void arm(const char *program, const char *ctl, const char *trace, char *status,
                size_t size)
{
    char command[1100];
    snprintf(status, size, "%s.status", ctl);
    snprintf(command, sizeof command, "on %s\n", trace);
    unlink(status);
    control(ctl, command);
    wait_for(program, status, "recording");
}

static void disarm(const char *program, const char *ctl, const char *status)
{
    control(ctl, "off\n");
    wait_for(program, status, "complete");
}
#endif
