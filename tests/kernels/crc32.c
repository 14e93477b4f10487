/* CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) with a 256-entry table, over a
 * 1 KiB message and over the standard check string. */
#include <stdio.h>
#include <string.h>

static unsigned table[256];

static void make_table(void) {
    for (unsigned n = 0; n < 256; n++) {
        unsigned c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[n] = c;
    }
}

static unsigned crc32(const unsigned char *p, unsigned len) {
    unsigned c = 0xFFFFFFFFu;
    for (unsigned i = 0; i < len; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static unsigned char message[1024];

int main(void) {
    make_table();
    const char *check = "123456789";
    printf("crc32(\"%s\") = %08x\n", check, crc32((const unsigned char *)check, (unsigned)strlen(check)));
    for (unsigned i = 0; i < sizeof message; i++) message[i] = (unsigned char)(i * 7 + (i >> 3));
    printf("crc32(1 KiB) = %08x\n", crc32(message, sizeof message));
    return 0;
}
