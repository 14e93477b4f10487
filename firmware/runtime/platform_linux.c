/* Platform layer of the Linux-ABI build, used only to run the same sources under
 * qemu-riscv32 (user mode) as an oracle: console is write(1, ...), exit is exit(). */
#include "inband_platform.h"

static long syscall3(long n, long a, long b, long c) {
    register long a0 __asm__("a0") = a;
    register long a1 __asm__("a1") = b;
    register long a2 __asm__("a2") = c;
    register long a7 __asm__("a7") = n;
    __asm__ volatile("ecall" : "+r"(a0) : "r"(a1), "r"(a2), "r"(a7) : "memory");
    return a0;
}

void __inband_putchar(int c) {
    unsigned char byte = (unsigned char)c;
    syscall3(64, 1, (long)&byte, 1);
}

void __inband_exit(int code) {
    for (;;) syscall3(93, code, 0, 0);
}
