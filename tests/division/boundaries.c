/* The four RV32M divisions at the edges of the chip's one-pass answers. The chip answers
 * a division whose quotient is 0 or 1 in its own pass (n < 2d unsigned; DIV and REM only
 * with both operands non-negative) and runs every other in millicode, so this divides
 * each divisor below by the dividends around d and 2d (d - 1, d, d + 1, 2d - 1, 2d,
 * 2d + 1, wrapping past 2^32), by 0, 1, -1, INT_MIN, INT_MAX and their neighbours, in all
 * four forms, with the destination apart from the operands and the same register as the
 * dividend or the divisor. Each result is folded into a checksum at once; under --verify
 * every division's register write is checked where it happens. */
#include <stdio.h>

#include "division.h"

/* rd apart from rs1 and rs2 (DIVISION); rd = rs1; rd = rs2. */
#define INTO_DIVIDEND(op, n, d)                                                            \
    ({                                                                                     \
        unsigned r_ = (n);                                                                 \
        __asm__ volatile(op " %0, %0, %1" : "+r"(r_) : "r"(d));                            \
        r_;                                                                                \
    })
#define INTO_DIVISOR(op, n, d)                                                             \
    ({                                                                                     \
        unsigned r_ = (d);                                                                 \
        __asm__ volatile(op " %0, %1, %0" : "+r"(r_) : "r"(n));                            \
        r_;                                                                                \
    })

#define ALL_FORMS(how, n, d)                                                               \
    do {                                                                                   \
        use(how("div", n, d));                                                             \
        use(how("divu", n, d));                                                            \
        use(how("rem", n, d));                                                             \
        use(how("remu", n, d));                                                            \
    } while (0)

static void divide(unsigned n, unsigned d) {
    ALL_FORMS(DIVISION, n, d);
    ALL_FORMS(INTO_DIVIDEND, n, d);
    ALL_FORMS(INTO_DIVISOR, n, d);
}

static const unsigned divisors[] = {
    0,          1,          2,          3,          7,          10,         0x7ff,
    0x800,      0xfff,      0x1000,     0xffff,     0x10000,    0x12345,    0xfffff,
    0x100000,   0x3fffffff, 0x40000000, 0x55555555, 0x7ffffffe, 0x7fffffff, 0x80000000,
    0x80000001, 0xaaaaaaaa, 0xc0000000, 0xfffffffe, 0xffffffff, 0xfffffff6, 0xffff0000,
};

int main(void) {
    unsigned count = 0;
    for (unsigned i = 0; i < sizeof divisors / sizeof divisors[0]; i++) {
        unsigned d = divisors[i];
        unsigned dividends[] = {0,         1,         d - 1,      d,          d + 1,      2 * d - 2,
                                2 * d - 1, 2 * d,     2 * d + 1,  3 * d,      0x7fffffff, 0x80000000,
                                0x80000001, 0xffffffff, 0u - d,    1u - d,     0u - 2 * d, 1u - 2 * d};
        for (unsigned j = 0; j < sizeof dividends / sizeof dividends[0]; j++) {
            divide(dividends[j], d);
            count += 12;
        }
        printf("d %08x: %08x\n", d, sum);
    }
    printf("%u divisions, checksum %08x\n", count, sum);
    return 0;
}
