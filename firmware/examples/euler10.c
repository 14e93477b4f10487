/* Project Euler #10: the sum of all primes below two million (142913828922).
 *
 * A sieve touches every odd number below the limit (about 20 M instructions).
 * This program instead runs the prime-sum recurrence over the values N / i: for
 * v in that set let S(v) be the sum of the numbers 2..v that survive sieving by the
 * primes below p. Sieving by a prime p removes p times the survivors up to v / p
 * that are not below p:
 *
 *     S(v) -= p * (S(v / p) - S(p - 1))      for every v >= p * p,
 *
 * and after every prime up to sqrt(N), S(N) is the sum of the primes up to N. That
 * is about 40,000 updates in 17 KiB of RAM. Divisions are few: the quotients v / p
 * are a multiply-high by a reciprocal of p (exact for v < 2^32 / p), and N / i comes
 * from a reciprocal of i refined from the previous one by Newton steps. */
#include <stdio.h>

#define N 2000000u /* not a prime: the primes up to N are the primes below it */
#define R 1414u    /* floor(sqrt(N)) */

static unsigned small[R + 1];           /* small[v] = S(v) for v <= R (fits 32 bits) */
static unsigned long long large[R + 1]; /* large[i] = S(N / i) for 1 <= i <= R */
static unsigned quot[R + 1];            /* quot[i] = N / i */

/* x / p for x < 2^32 / p, given m = ceil(2^32 / p). */
static inline unsigned div_by(unsigned x, unsigned m) { return (unsigned)(((unsigned long long)x * m) >> 32); }

/* N / i for every i. Past the first 16, without a division: x tracks
 * 2^32 / i, two Newton steps from the previous i's value (relative error 1/i) bring
 * it within a unit or two of the quotient, and the remainder settles the rest. */
static void quotients(void) {
    for (unsigned i = 1; i <= 16; i++) quot[i] = N / i;
    unsigned x = 0x10000000u; /* 2^32 / 16 */
    for (unsigned i = 17; i <= R; i++) {
        for (int step = 0; step < 2; step++) {
            long long e = (long long)(1ull << 32) - (long long)((unsigned long long)i * x);
            x += (unsigned)(((long long)x * e) >> 32);
        }
        unsigned q = (unsigned)(((unsigned long long)N * x) >> 32);
        while (q * i > N) q--;
        while ((q + 1) * i <= N) q++;
        quot[i] = q;
    }
}

int main(void) {
    for (unsigned v = 1; v <= R; v++) small[v] = v * (v + 1) / 2 - 1;
    quotients();
    for (unsigned i = 1; i <= R; i++) {
        unsigned long long w = quot[i];
        large[i] = w * (w + 1) / 2 - 1;
    }
    for (unsigned p = 2; p <= R; p++) {
        if (small[p] == small[p - 1]) continue; /* p was sieved out: not a prime */
        unsigned sp = small[p - 1], p2 = p * p;
        unsigned m = 0xffffffffu / p + 1;
        /* Largest values first, so every S(v / p) read is still the previous prime's.
         * For v = N / i, v / p = N / (i p): a large value while i p <= R. */
        unsigned i = 1, direct = div_by(R, m);
        for (; i <= direct && quot[i] >= p2; i++) large[i] -= (unsigned long long)p * (large[i * p] - sp);
        for (; i <= R && quot[i] >= p2; i++) large[i] -= (unsigned long long)p * (small[div_by(quot[i], m)] - sp);
        for (unsigned v = R; v >= p2; v--) small[v] -= p * (small[div_by(v, m)] - sp);
    }
    printf("%llu\n", large[1]);
    return large[1] == 142913828922ull ? 0 : 1;
}
