/* inband's console and exit under picolibc (`inband build --libc picolibc`): stdin,
 * stdout and stderr are one write-only stream whose every byte goes to the platform
 * layer's console, unbuffered; _exit, which picolibc's exit calls after the atexit
 * handlers and stdio's flush, is the platform layer's exit. */
#include <stdio.h>

#include "inband_platform.h"

static int console_put(char c, FILE *file) {
    (void)file;
    __inband_putchar((unsigned char)c);
    return (unsigned char)c;
}

static FILE console = FDEV_SETUP_STREAM(console_put, NULL, NULL, _FDEV_SETUP_WRITE);
FILE *const stdin = &console;
FILE *const stdout = &console;
FILE *const stderr = &console;

void _exit(int code) { __inband_exit(code); }

/* raise() (which abort(), and so a failed assert, calls) sends the signal to the one
 * process there is: it ends the program with the status a shell reports for a process a
 * signal ended, 128 + the signal (134 for abort). */
int getpid(void) { return 1; }

int kill(int pid, int sig) {
    (void)pid;
    __inband_exit(128 + sig);
}
