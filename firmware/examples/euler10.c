/* Project Euler #10: the sum of all primes below two million (142913828922).
 * A segmented sieve of odd numbers keeps RAM use to a few KiB. */
#include <stdio.h>

#define LIMIT 2000000u
#define SEGMENT 4096u /* odd numbers per segment */
#define MAX_BASE 1415u /* > sqrt(LIMIT) */

static unsigned char composite[SEGMENT];
static unsigned short base_primes[256];

int main(void) {
    /* Base primes below sqrt(LIMIT), by trial division. */
    unsigned count = 0;
    for (unsigned n = 3; n < MAX_BASE; n += 2) {
        unsigned is_prime = 1;
        for (unsigned i = 0; i < count && base_primes[i] * base_primes[i] <= n; i++)
            if (n % base_primes[i] == 0) {
                is_prime = 0;
                break;
            }
        if (is_prime) base_primes[count++] = (unsigned short)n;
    }

    unsigned long long sum = 2;
    /* Segment k covers the odd numbers low, low+2, ..., low + 2*(SEGMENT-1). */
    for (unsigned low = 3; low < LIMIT; low += 2 * SEGMENT) {
        for (unsigned i = 0; i < SEGMENT; i++) composite[i] = 0;
        for (unsigned i = 0; i < count; i++) {
            unsigned p = base_primes[i];
            unsigned start = p * p;
            if (start >= low + 2 * SEGMENT) break;
            if (start < low) {
                unsigned rem = (low - start) % (2 * p);
                start = low + (rem ? 2 * p - rem : 0);
            }
            for (unsigned j = (start - low) / 2; j < SEGMENT; j += p) composite[j] = 1;
        }
        for (unsigned i = 0; i < SEGMENT; i++) {
            unsigned n = low + 2 * i;
            if (n >= LIMIT) break;
            if (!composite[i]) sum += n;
        }
    }
    printf("%llu\n", sum);
    return sum == 142913828922ull ? 0 : 1;
}
