/* What the division tests share: a checksum every result is folded into at once, and a
 * division instruction written out (inline assembly: in C a zero divisor and INT_MIN / -1
 * are undefined). */
#ifndef DIVISION_H
#define DIVISION_H

static unsigned sum;

/* Folds a result into the checksum (a rotation, so that every bit of every result counts). */
static void use(unsigned v) {
    sum = ((sum << 5) | (sum >> 27)) ^ v;
    sum += v >> 3;
}

/* rd ← n op d, rd a register of its own. */
#define DIVISION(op, n, d)                                                                 \
    ({                                                                                     \
        unsigned r_;                                                                       \
        __asm__ volatile(op " %0, %1, %2" : "=r"(r_) : "r"(n), "r"(d));                    \
        r_;                                                                                \
    })

#endif
