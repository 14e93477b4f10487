/* picolibc's C library beyond printf: assert, qsort and bsearch, strtol and strtoul,
 * strstr and strtok, snprintf, ctype, setjmp and longjmp. */
#include <assert.h>
#include <ctype.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_value(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static jmp_buf back;
static volatile int bottom = 0;

/* Unwinds 20 frames at once from the bottom one. */
static void deep(int n) {
    if (n == bottom)
        longjmp(back, 42);
    else if (n > bottom)
        deep(n - 1);
}

int main(void) {
    int v[] = {19, -4, 7, 0, 1000, 7, -31, 12};
    size_t n = sizeof v / sizeof v[0];
    qsort(v, n, sizeof v[0], by_value);
    for (size_t i = 0; i < n; i++) printf("%d ", v[i]);
    int key = 12;
    int *found = bsearch(&key, v, n, sizeof v[0], by_value);
    printf("| 12 at %d\n", found ? (int)(found - v) : -1);
    assert(found != NULL && *found == 12);

    char *end;
    long l = strtol("  -0x7fff zz", &end, 16);
    unsigned long u = strtoul("4294967295", NULL, 10);
    printf("strtol %ld rest '%s', strtoul %lu, base 36 %ld\n", l, end, u, strtol("inband", NULL, 36));

    char text[] = "the chip, inside the model, runs C";
    printf("strstr: '%s'\n", strstr(text, "model"));
    for (char *w = strtok(text, " ,"); w; w = strtok(NULL, " ,")) printf("[%s]", w);
    printf("\n");

    char buf[48];
    int len = snprintf(buf, sizeof buf, "%08.3f|%-6s|%x|%c", 2.71828, "ab", 255u, 'Z');
    printf("snprintf %d '%s'\n", len, buf);

    int counts[4] = {0};
    for (const char *p = "Hello, World 42! 0xBEEF"; *p; p++) {
        counts[0] += isalpha((unsigned char)*p) != 0;
        counts[1] += isdigit((unsigned char)*p) != 0;
        counts[2] += isxdigit((unsigned char)*p) != 0;
        counts[3] += isspace((unsigned char)*p) != 0;
    }
    printf("ctype alpha %d digit %d xdigit %d space %d upper %c\n", counts[0], counts[1], counts[2], counts[3],
           toupper('q'));

    int jumped = setjmp(back);
    if (jumped == 0) {
        deep(20);
        printf("not reached\n");
    }
    printf("longjmp came back with %d\n", jumped);
    return 0;
}
