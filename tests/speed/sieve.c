/* The sum of the primes below two million (142913828922) by the sieve of Eratosthenes over
 * a bit array of the odd numbers (one bit each: 125 KB of RAM), 31.5 M instructions: a
 * long run for measuring the chip's speed (Euler #10 in firmware/examples reaches the same
 * sum in under a million instructions). Its output is checked against golden's. */
#include <stdio.h>

#define N 2000000u
#define ODDS (N / 2)                  /* bit i: the odd number 2i + 1 */
static unsigned composite[ODDS / 32 + 1];

static int is_marked(unsigned i) { return (composite[i >> 5] >> (i & 31)) & 1; }

int main(void) {
    for (unsigned p = 3; p * p < N; p += 2) {
        if (is_marked(p >> 1)) continue;
        /* p * p, p * p + 2p, ...: odd multiples from the square on, as bit indices. */
        for (unsigned i = (p * p) >> 1; i < ODDS; i += p) composite[i >> 5] |= 1u << (i & 31);
    }
    unsigned long long sum = 2;
    unsigned count = 1;
    for (unsigned i = 1; i < ODDS; i++) {
        if (!is_marked(i)) {
            sum += 2 * i + 1;
            count++;
        }
    }
    printf("%u primes below %u, their sum %llu\n", count, N, sum);
    return 0;
}
