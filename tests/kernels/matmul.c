/* Integer matrix multiply: C = A x B for 16 x 16 matrices of small signed entries, then
 * the trace and a checksum of C. (Inputs come from a generator that divides by nothing:
 * division has its own cost, measured elsewhere.) */
#include <stdio.h>

#define N 16

static int a[N][N], b[N][N], c[N][N];

int main(void) {
    unsigned seed = 12345;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            seed = seed * 1103515245u + 12345u;
            a[i][j] = (int)((seed >> 16) & 15) - 8;
            seed = seed * 1103515245u + 12345u;
            b[i][j] = (int)((seed >> 16) & 31) - 16;
        }
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            int sum = 0;
            for (int k = 0; k < N; k++) sum += a[i][k] * b[k][j];
            c[i][j] = sum;
        }
    int trace = 0;
    unsigned checksum = 0;
    for (int i = 0; i < N; i++) {
        trace += c[i][i];
        for (int j = 0; j < N; j++) checksum = checksum * 31u + (unsigned)c[i][j];
    }
    printf("trace %d checksum %08x c[3][5] %d\n", trace, checksum, c[3][5]);
    return 0;
}
