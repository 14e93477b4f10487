/* inband's memset, memcpy and memmove against byte-at-a-time references: every
 * destination and source alignment 0..3 (each offset within a word), every length 0..24,
 * overlaps both ways, and the bytes around the destination untouched. Prints "ok" and
 * exits 0, or the first failing case and exits 1. */
#include <stdio.h>
#include <string.h>

#define SPAN 40

static unsigned char buf[SPAN], want[SPAN], src[SPAN];

static void pattern(unsigned char *p, unsigned seed) {
    for (unsigned i = 0; i < SPAN; i++) p[i] = (unsigned char)(seed + 37 * i + (i >> 2));
}

static int same(const char *what, unsigned d, unsigned s, unsigned n) {
    if (memcmp(buf, want, SPAN) == 0) return 1;
    printf("%s wrong: destination +%u, source +%u, length %u\n", what, d, s, n);
    return 0;
}

int main(void) {
    for (unsigned d = 0; d < 4; d++)
        for (unsigned n = 0; n <= 24; n++) {
            pattern(buf, 1);
            pattern(want, 1);
            memset(buf + d, 0xa5 + (int)n, n);
            for (unsigned i = 0; i < n; i++) want[d + i] = (unsigned char)(0xa5 + n);
            if (!same("memset", d, 0, n)) return 1;
            for (unsigned s = 0; s < 4; s++) {
                pattern(buf, 2);
                pattern(want, 2);
                pattern(src, 3);
                memcpy(buf + d, src + s, n);
                for (unsigned i = 0; i < n; i++) want[d + i] = src[s + i];
                if (!same("memcpy", d, s, n)) return 1;
                /* Overlapping moves inside one buffer, forwards and backwards. */
                pattern(buf, 4);
                pattern(want, 4);
                memmove(buf + d, buf + 8 + s, n);
                for (unsigned i = 0; i < n; i++) want[d + i] = want[8 + s + i];
                if (!same("memmove down", d, 8 + s, n)) return 1;
                pattern(buf, 5);
                pattern(want, 5);
                memmove(buf + 8 + d, buf + s, n);
                for (unsigned i = n; i-- > 0;) want[8 + d + i] = want[s + i];
                if (!same("memmove up", 8 + d, s, n)) return 1;
            }
        }
    puts("ok");
    return 0;
}
