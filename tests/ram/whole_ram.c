/* Touches all of RAM through the chip's line cache: a word in every line of every bank
 * (misses on zero lines), strides whose lines share a cache slot (conflict misses that
 * refill written lines), halfword and byte stores far apart, then reads samples back.
 * Prints a checksum; exits 0. */
#include <stdint.h>
#include <stdio.h>

#define WORDS (60 * 1024) /* 240 KiB of the 256: the stack keeps the rest */

static uint32_t big[WORDS];

int main(void) {
    for (unsigned i = 0; i < WORDS; i += 8) big[i] = i * 2654435761u;
    /* 4 KiB + 4 apart: every line lands in the slot of a line written before. */
    for (unsigned r = 0; r < 3; r++)
        for (unsigned i = r; i < WORDS; i += 1025) big[i] ^= i + r;
    uint16_t *h = (uint16_t *)big;
    uint8_t *b = (uint8_t *)big;
    for (unsigned i = 3; i < 2 * WORDS; i += 977) h[i] = (uint16_t)(i * 7);
    for (unsigned i = 5; i < 4 * WORDS; i += 1511) b[i] = (uint8_t)i;
    uint32_t sum = 0;
    for (unsigned i = 0; i < WORDS; i += 61) sum = sum * 31 + big[i] + h[2 * i + 1] + b[4 * i + 2];
    printf("%08x %08x\n", (unsigned)sum, (unsigned)big[WORDS - 1]);
    return 0;
}
