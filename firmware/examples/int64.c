/* 64-bit arithmetic on a 32-bit CPU: libgcc's helpers for multiply, divide and shifts. */
#include <stdio.h>

static unsigned long long factorial(unsigned n) {
    unsigned long long f = 1;
    while (n > 1) f *= n--;
    return f;
}

static unsigned long long gcd(unsigned long long a, unsigned long long b) {
    while (b) {
        unsigned long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static unsigned long long mulmod(unsigned long long a, unsigned long long b, unsigned long long m) {
    unsigned long long result = 0;
    a %= m;
    while (b) {
        if (b & 1) result = (result + a) % m;
        a = (a << 1) % m;
        b >>= 1;
    }
    return result;
}

int main(void) {
    printf("20! = %llu\n", factorial(20));
    printf("20! in hex = %llx\n", factorial(20));
    long long negative = -(long long)factorial(19);
    printf("-19! = %lld, / 1000003 = %lld, %% 1000003 = %lld\n", negative, negative / 1000003, negative % 1000003);
    printf("gcd(20!, 2^40 * 3^5) = %llu\n", gcd(factorial(20), (1ull << 40) * 243));
    printf("mulmod = %llu\n", mulmod(123456789123ull, 987654321987ull, 1000000000039ull));
    unsigned long long x = 0x0123456789abcdefull;
    printf("rotl = %016llx, >> 36 = %llx, signed >> 60 = %lld\n", (x << 12) | (x >> 52), x >> 36,
           (long long)0xf000000000000000ull >> 60);
    return factorial(20) == 2432902008176640000ull ? 0 : 1;
}
