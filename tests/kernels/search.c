/* Byte-string search: every occurrence of several needles in a 2 KiB text (first byte
 * scan, then a compare), as a tar-header or log search does. */
#include <stdio.h>
#include <string.h>

static char text[2048];

static int count(const char *needle, int *first) {
    int n = (int)strlen(needle), found = 0;
    *first = -1;
    for (int i = 0; i + n <= (int)sizeof text; i++) {
        if (text[i] != needle[0]) continue;
        int j = 1;
        while (j < n && text[i + j] == needle[j]) j++;
        if (j == n) {
            if (found++ == 0) *first = i;
        }
    }
    return found;
}

int main(void) {
    const char *words[] = {"ustar", "file", "inband", "model", "chip", "0000644"};
    const char letters[] = "abcdefghijklmnopqrstuvwxyzeariot";
    unsigned seed = 7;
    for (unsigned i = 0; i < sizeof text; i++) {
        seed = seed * 1664525u + 1013904223u;
        text[i] = letters[seed >> 27];
    }
    int w = 0;
    for (unsigned i = 0; i < sizeof text - 16; i += 97) {
        memcpy(text + i, words[w], strlen(words[w]));
        w = w == 5 ? 0 : w + 1;
    }
    for (w = 0; w < 6; w++) {
        int first;
        int n = count(words[w], &first);
        printf("%-8s %3d times, first at %d\n", words[w], n, first);
    }
    return 0;
}
