/* The four RV32M divisions over every operand size: for each dividend width 1..32 bits
 * and divisor width 0..32 bits (0: a zero divisor), operands drawn at random with exactly
 * that width (top bit set), the signed forms with random signs, then INT_MIN / -1 and
 * INT_MIN % -1. The instructions are written out (inline assembly: in C a zero divisor
 * and INT_MIN / -1 are undefined), and each result is used at once, folded into a running
 * checksum; a line per dividend width prints it. The chip's output must equal golden's;
 * under --verify every division's register write is checked where it happens. */
#include <stdio.h>

#include "division.h"

static unsigned state = 0x9e3779b9u;

static unsigned next(void) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
}

/* A random number of exactly `bits` bits (0 bits: zero). */
static unsigned of_width(unsigned bits) {
    if (bits == 0) return 0;
    unsigned top = 1u << (bits - 1);
    return top | (next() & (top - 1));
}

/* The number or its negation, at random. */
static unsigned signed_at_random(unsigned x) { return (next() & 1) ? -x : x; }

int main(void) {
    for (unsigned a = 1; a <= 32; a++) {
        for (unsigned b = 0; b <= 32; b++) {
            unsigned n = of_width(a), d = of_width(b);
            use(DIVISION("divu", n, d));
            use(DIVISION("remu", n, d));
            unsigned sn = signed_at_random(n), sd = signed_at_random(d);
            use(DIVISION("div", sn, sd));
            use(DIVISION("rem", sn, sd));
        }
        printf("dividends of %u bits: %08x\n", a, sum);
    }
    unsigned int_min = 0x80000000u, minus_one = 0xffffffffu;
    use(DIVISION("div", int_min, minus_one));
    use(DIVISION("rem", int_min, minus_one));
    use(DIVISION("divu", int_min, minus_one));
    use(DIVISION("remu", int_min, minus_one));
    printf("INT_MIN and -1: %08x\n", sum);
    return 0;
}
