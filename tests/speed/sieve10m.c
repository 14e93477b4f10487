/* The sum of the primes below 800,000 (63951 primes, their sum 24465663438) by the sieve
 * of Eratosthenes, written for the chip: 10.9 M instructions, nearly all of them one pass.
 *  - Eight flags a word, in its low byte (bit b of word k: the odd number 16k + 2b + 1):
 *    every value the sieve loads or makes stays below 256, so each register write is one
 *    token (a full 32-bit word takes three).
 *  - Marking walks a word pointer and a bit number (no index to recompute), in a loop
 *    aligned to a ROM row (32 bytes), so it moves to the next row without a pass of its own.
 *  - The flags are marked a 4 KiB window at a time, every sieving prime in turn: the chip's
 *    stores go through a direct-mapped line cache of 4 KiB, and a store to a line not in it
 *    first fills the line (up to 26 passes), so each line is filled once a window instead of
 *    once a mark. */
#include <stdio.h>

#define N 800000u
#define ODDS (N / 2)     /* a multiple of 8 */
#define WORDS (ODDS / 8) /* 50,000 words: 200 KB */
#define WINDOW 1024u     /* words a window: the line cache's 4 KiB */
#define MAX_SIEVING 160u /* the odd primes below sqrt(N) = 894: 153 */

static unsigned composite[WORDS];
static unsigned sieving[MAX_SIEVING];
/* Each sieving prime's next multiple to mark: its word and bit. */
static unsigned *next_word[MAX_SIEVING];
static unsigned next_bit[MAX_SIEVING];

/* Marks p's multiples from (*w, *bit) up to `end`; leaves the first one past it there. */
__attribute__((optimize("align-loops=32"))) static void mark(unsigned p, unsigned **w_at, unsigned *bit_at,
                                                             unsigned *end) {
    unsigned *w = *w_at, bit = *bit_at, bits = p & 7, words = p >> 3;
    while (w < end) {
        *w |= 1u << bit;
        bit += bits;
        w += words + (bit >> 3);
        bit &= 7;
    }
    *w_at = w;
    *bit_at = bit;
}

int main(void) {
    /* The first window finds the sieving primes (all below its end) as it marks them. */
    unsigned n = 0;
    unsigned *end = composite + WINDOW;
    for (unsigned p = 3; p * p < N; p += 2) {
        unsigned b = p >> 1;
        if ((composite[b >> 3] >> (b & 7)) & 1) continue;
        unsigned i = (p * p) >> 1;
        sieving[n] = p;
        next_word[n] = composite + (i >> 3);
        next_bit[n] = i & 7;
        mark(p, &next_word[n], &next_bit[n], end);
        n++;
    }
    for (unsigned start = WINDOW; start < WORDS; start += WINDOW) {
        end = composite + (start + WINDOW < WORDS ? start + WINDOW : WORDS);
        for (unsigned k = 0; k < n; k++) mark(sieving[k], &next_word[k], &next_bit[k], end);
    }
    unsigned long long sum = 2;
    unsigned count = 1;
    for (unsigned k = 0; k < WORDS; k++) {
        unsigned flags = composite[k];
        for (unsigned b = 0; b < 8; b++) {
            if (!((flags >> b) & 1) && (k | b) != 0) {
                sum += 16 * k + 2 * b + 1;
                count++;
            }
        }
    }
    printf("%u primes below %u, their sum %llu\n", count, N, sum);
    return 0;
}
