/* SHA-256 (FIPS 180-4) of "abc" and of a 300-byte message. */
#include <stdio.h>
#include <string.h>

static const unsigned k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block(unsigned h[8], const unsigned char *p) {
    unsigned w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (unsigned)p[4 * i] << 24 | (unsigned)p[4 * i + 1] << 16 | (unsigned)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        unsigned s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        unsigned s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    unsigned a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        unsigned t1 = hh + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
        unsigned t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

static void sha256(const unsigned char *msg, unsigned len, unsigned h[8]) {
    static const unsigned init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(h, init, sizeof init);
    unsigned done = 0;
    for (; done + 64 <= len; done += 64) block(h, msg + done);
    unsigned char last[128];
    unsigned rest = len - done;
    memset(last, 0, sizeof last);
    memcpy(last, msg + done, rest);
    last[rest] = 0x80;
    unsigned total = rest + 9 <= 64 ? 64 : 128;
    unsigned long long bits = (unsigned long long)len * 8;
    for (int i = 0; i < 8; i++) last[total - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (unsigned at = 0; at < total; at += 64) block(h, last + at);
}

static void show(const char *name, const unsigned char *msg, unsigned len) {
    unsigned h[8];
    sha256(msg, len, h);
    printf("sha256(%s) = ", name);
    for (int i = 0; i < 8; i++) printf("%08x", h[i]);
    printf("\n");
}

static unsigned char message[300];

int main(void) {
    show("abc", (const unsigned char *)"abc", 3);
    for (unsigned i = 0; i < sizeof message; i++) message[i] = (unsigned char)(i ^ (i >> 2));
    show("300 bytes", message, sizeof message);
    return 0;
}
