#ifndef INBAND_PLATFORM_H
#define INBAND_PLATFORM_H
/* The two functions each build flavour implements differently. */
void __inband_putchar(int c);
void __inband_exit(int code) __attribute__((noreturn));
#endif
