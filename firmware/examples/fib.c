/* Recursive Fibonacci: deep call stacks, many jumps and returns. */
#include <stdio.h>

static unsigned fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(void) {
    for (unsigned n = 0; n <= 20; n++) printf("fib(%u) = %u\n", n, fib(n));
    return fib(20) == 6765 ? 0 : 1;
}
