/* Sorting: quicksort and insertion sort of pseudo-random data, checked against each other. */
#include <stdio.h>
#include <string.h>

#define N 300

static unsigned state = 12345;
static unsigned next_random(void) {
    state = state * 1103515245u + 12345u;
    return (state >> 8) & 0xffff;
}

static void quicksort(int *a, int lo, int hi) {
    while (lo < hi) {
        int pivot = a[(lo + hi) / 2], i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                int t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (j - lo < hi - i) {
            quicksort(a, lo, j);
            lo = i;
        } else {
            quicksort(a, i, hi);
            hi = j;
        }
    }
}

static void insertion_sort(int *a, int n) {
    for (int i = 1; i < n; i++) {
        int v = a[i], j = i - 1;
        while (j >= 0 && a[j] > v) a[j + 1] = a[j], j--;
        a[j + 1] = v;
    }
}

int main(void) {
    static int a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = (int)next_random() - 32768;
    quicksort(a, 0, N - 1);
    insertion_sort(b, N);
    int sorted = 1;
    unsigned checksum = 0;
    for (int i = 0; i < N; i++) {
        if (i && a[i - 1] > a[i]) sorted = 0;
        checksum = checksum * 31 + (unsigned)a[i];
    }
    int same = memcmp(a, b, sizeof a) == 0;
    printf("min %d max %d median %d\n", a[0], a[N - 1], a[N / 2]);
    printf("sorted %s, both sorts agree %s, checksum %08x\n", sorted ? "yes" : "no", same ? "yes" : "no",
           checksum);
    return sorted && same ? 0 : 1;
}
