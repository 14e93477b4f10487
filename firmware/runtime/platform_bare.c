/* Platform layer of the bare-metal build (what the golden engine and the chip run):
 * console and exit are memory-mapped (see firmware/src/memory_map.rs). */
#include "inband_platform.h"

#define CONSOLE_TX (*(volatile unsigned char *)0x10000000u)
#define EXIT_CODE (*(volatile unsigned int *)0x10000004u)

void __inband_putchar(int c) { CONSOLE_TX = (unsigned char)c; }

void __inband_exit(int code) {
    EXIT_CODE = (unsigned int)code;
    for (;;) {
    }
}
