/* inband's small libc: just what real C programs need, written for RV32IM.
 * 64-bit arithmetic (printf of long long, division) comes from libgcc. */
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "inband_platform.h"
#include "stdio.h"
#include "stdlib.h"
#include "string.h"

/* ---------------------------------------------------------------- strings */

/* Word stores where the alignment allows: in the chip a word store that hits the line
 * cache costs one pass, a byte store four (the merged word travels as three tokens). */
void *memcpy(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if ((((uintptr_t)d ^ (uintptr_t)s) & 3) == 0) {
        for (; n && ((uintptr_t)d & 3); n--) *d++ = *s++;
        uint32_t *dw = (uint32_t *)d;
        const uint32_t *sw = (const uint32_t *)s;
        for (; n >= 4; n -= 4) *dw++ = *sw++;
        d = (unsigned char *)dw;
        s = (const unsigned char *)sw;
    }
    while (n--) *d++ = *s++;
    return dst;
}

void *memmove(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d == s || n == 0) return dst;
    if (d < s || d >= s + n) return memcpy(dst, src, n);
    while (n--) d[n] = s[n];
    return dst;
}

void *memset(void *dst, int c, size_t n) {
    unsigned char *d = dst;
    for (; n && ((uintptr_t)d & 3); n--) *d++ = (unsigned char)c;
    uint32_t *dw = (uint32_t *)d;
    uint32_t w = (unsigned char)c * 0x01010101u;
    for (; n >= 4; n -= 4) *dw++ = w;
    d = (unsigned char *)dw;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

int memcmp(const void *a, const void *b, size_t n) {
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

size_t strlen(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

int strcmp(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return (unsigned char)*a - (unsigned char)*b;
}

int strncmp(const char *a, const char *b, size_t n) {
    for (; n; n--, a++, b++) {
        if (*a != *b) return (unsigned char)*a - (unsigned char)*b;
        if (!*a) return 0;
    }
    return 0;
}

char *strcpy(char *dst, const char *src) {
    char *d = dst;
    while ((*d++ = *src++)) {
    }
    return dst;
}

char *strncpy(char *dst, const char *src, size_t n) {
    size_t i = 0;
    for (; i < n && src[i]; i++) dst[i] = src[i];
    for (; i < n; i++) dst[i] = 0;
    return dst;
}

char *strcat(char *dst, const char *src) {
    strcpy(dst + strlen(dst), src);
    return dst;
}

char *strchr(const char *s, int c) {
    for (;; s++) {
        if (*s == (char)c) return (char *)s;
        if (!*s) return NULL;
    }
}

char *strrchr(const char *s, int c) {
    const char *last = NULL;
    for (;; s++) {
        if (*s == (char)c) last = s;
        if (!*s) return (char *)last;
    }
}

/* ---------------------------------------------------------------- numbers */

int abs(int x) { return x < 0 ? -x : x; }
long labs(long x) { return x < 0 ? -x : x; }
long long llabs(long long x) { return x < 0 ? -x : x; }

long atol(const char *s) {
    while (*s == ' ' || (*s >= '\t' && *s <= '\r')) s++;
    int negative = 0;
    if (*s == '-' || *s == '+') negative = *s++ == '-';
    unsigned long value = 0;
    while (*s >= '0' && *s <= '9') value = value * 10 + (unsigned long)(*s++ - '0');
    return negative ? -(long)value : (long)value;
}

int atoi(const char *s) { return (int)atol(s); }

/* ---------------------------------------------------------------- process */

void exit(int code) { __inband_exit(code); }
void abort(void) { __inband_exit(134); }

/* ---------------------------------------------------------------- output */

int putchar(int c) {
    __inband_putchar(c);
    return (unsigned char)c;
}

int puts(const char *s) {
    while (*s) __inband_putchar(*s++);
    __inband_putchar('\n');
    return 0;
}

/* A formatted-output sink: either the console or a bounded buffer. */
struct sink {
    char *buffer;     /* NULL: console */
    size_t capacity;  /* bytes available in buffer, including the final NUL */
    size_t written;   /* characters produced so far (may exceed capacity) */
};

static void emit(struct sink *out, char c) {
    if (!out->buffer)
        __inband_putchar(c);
    else if (out->written + 1 < out->capacity)
        out->buffer[out->written] = c;
    out->written++;
}

static void emit_padding(struct sink *out, char c, int count) {
    while (count-- > 0) emit(out, c);
}

/* x / 10 for every 32-bit x, by a multiply-high: 0xCCCCCCCD = (2^35 + 2) / 10, so the
 * product over 2^35 is x/10 + x/(5 * 2^35), and that excess (below 1/40) never carries
 * x/10, whose fraction is at most 0.9, past the next integer. */
static unsigned divide_by_ten(unsigned x) {
    return (unsigned)(((unsigned long long)x * 0xCCCCCCCDu) >> 35);
}

/* Formats one integer conversion: digits of `magnitude` in `base`, a sign,
 * the "0x" prefix for %p, honouring width, '-' and '0' flags. */
static void emit_integer(struct sink *out, unsigned long long magnitude, int negative, int base,
                         int upper, const char *prefix, int width, int left, int zero_pad) {
    char digits[24];
    int count = 0;
    const char *alphabet = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    if (base == 16) {
        do {
            digits[count++] = alphabet[magnitude & 15];
            magnitude >>= 4;
        } while (magnitude);
    } else {
        /* Decimal without division instructions (the chip runs those as a routine of
         * hundreds of passes): a 64-bit value is brought below 10^9 by subtracting powers
         * of ten; a 32-bit one is divided by 10 with a multiply-high (gcc 12 emits divu and
         * remu for a plain `/ 10` on RV32IM). */
        static const unsigned long long powers[11] = {
            10000000000000000000ull, 1000000000000000000ull, 100000000000000000ull,
            10000000000000000ull, 1000000000000000ull, 100000000000000ull,
            10000000000000ull, 1000000000000ull, 100000000000ull, 10000000000ull,
            1000000000ull};
        char high[12];
        int high_count = 0, fill = 0;
        if (magnitude >> 32) {
            for (int k = 0; k < 11; k++) {
                int d = 0;
                while (magnitude >= powers[k]) {
                    magnitude -= powers[k];
                    d++;
                }
                if (d || high_count) high[high_count++] = (char)('0' + d);
            }
            fill = 9;
        }
        unsigned low = (unsigned)magnitude;
        do {
            unsigned tenth = divide_by_ten(low);
            digits[count++] = (char)('0' + (low - 10 * tenth));
            low = tenth;
        } while (low || count < fill);
        while (high_count) digits[count++] = high[--high_count];
    }
    int prefix_len = (int)strlen(prefix) + (negative ? 1 : 0);
    int pad = width - count - prefix_len;
    if (!left && !zero_pad) emit_padding(out, ' ', pad);
    if (negative) emit(out, '-');
    while (*prefix) emit(out, *prefix++);
    if (!left && zero_pad) emit_padding(out, '0', pad);
    while (count) emit(out, digits[--count]);
    if (left) emit_padding(out, ' ', pad);
}

static void format(struct sink *out, const char *fmt, va_list ap) {
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            emit(out, *fmt);
            continue;
        }
        fmt++;
        int left = 0, zero_pad = 0, width = 0, longness = 0;
        for (;; fmt++) {
            if (*fmt == '-')
                left = 1;
            else if (*fmt == '0')
                zero_pad = 1;
            else
                break;
        }
        if (*fmt == '*') {
            width = va_arg(ap, int);
            if (width < 0) left = 1, width = -width;
            fmt++;
        }
        while (*fmt >= '0' && *fmt <= '9') width = width * 10 + (*fmt++ - '0');
        while (*fmt == 'l') longness++, fmt++;
        if (*fmt == 'z') longness = 1, fmt++;
        if (left) zero_pad = 0;

        switch (*fmt) {
        case 'd':
        case 'i': {
            long long v = longness >= 2 ? va_arg(ap, long long)
                          : longness ? (long long)va_arg(ap, long)
                                     : (long long)va_arg(ap, int);
            unsigned long long magnitude = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
            emit_integer(out, magnitude, v < 0, 10, 0, "", width, left, zero_pad);
            break;
        }
        case 'u':
        case 'x':
        case 'X': {
            unsigned long long v = longness >= 2 ? va_arg(ap, unsigned long long)
                                   : longness ? (unsigned long long)va_arg(ap, unsigned long)
                                              : (unsigned long long)va_arg(ap, unsigned int);
            emit_integer(out, v, 0, *fmt == 'u' ? 10 : 16, *fmt == 'X', "", width, left, zero_pad);
            break;
        }
        case 'p':
            emit_integer(out, (uintptr_t)va_arg(ap, void *), 0, 16, 0, "0x", width, left, zero_pad);
            break;
        case 'c': {
            if (!left) emit_padding(out, ' ', width - 1);
            emit(out, (char)va_arg(ap, int));
            if (left) emit_padding(out, ' ', width - 1);
            break;
        }
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            int len = (int)strlen(s);
            if (!left) emit_padding(out, ' ', width - len);
            while (*s) emit(out, *s++);
            if (left) emit_padding(out, ' ', width - len);
            break;
        }
        case '%':
            emit(out, '%');
            break;
        case '\0':
            return;
        default: /* unknown conversion: print it as written */
            emit(out, '%');
            emit(out, *fmt);
            break;
        }
    }
}

int vprintf(const char *fmt, va_list ap) {
    struct sink out = {NULL, 0, 0};
    format(&out, fmt, ap);
    return (int)out.written;
}

int printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vprintf(fmt, ap);
    va_end(ap);
    return n;
}

int vsnprintf(char *buffer, size_t size, const char *fmt, va_list ap) {
    struct sink out = {buffer, size, 0};
    format(&out, fmt, ap);
    if (size) buffer[out.written < size ? out.written : size - 1] = '\0';
    return (int)out.written;
}

int snprintf(char *buffer, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buffer, size, fmt, ap);
    va_end(ap);
    return n;
}

int sprintf(char *buffer, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buffer, (size_t)INT_MAX, fmt, ap);
    va_end(ap);
    return n;
}

/* ---------------------------------------------------------------- heap */

/* First-fit allocator over [__heap_start, __stack_top - STACK_RESERVE).
 * Every block starts with a header; free blocks are merged with free neighbours. */
#define STACK_RESERVE (8u * 1024u)
#define ALIGNMENT 8u

extern char __heap_start[];
extern char __stack_top[];

struct block {
    size_t size; /* payload bytes, a multiple of ALIGNMENT */
    int free;
    struct block *next; /* next block in address order */
};

#define HEADER_SIZE ((sizeof(struct block) + ALIGNMENT - 1) & ~(ALIGNMENT - 1))

static struct block *heap_first;

static void heap_init(void) {
    uintptr_t start = ((uintptr_t)__heap_start + ALIGNMENT - 1) & ~(uintptr_t)(ALIGNMENT - 1);
    uintptr_t end = (uintptr_t)__stack_top - STACK_RESERVE;
    heap_first = (struct block *)start;
    heap_first->size = end > start + HEADER_SIZE ? end - start - HEADER_SIZE : 0;
    heap_first->free = 1;
    heap_first->next = NULL;
}

void *malloc(size_t size) {
    if (!heap_first) heap_init();
    if (size == 0) size = 1;
    if (size > 0x7fffffffu) return NULL;
    size = (size + ALIGNMENT - 1) & ~(size_t)(ALIGNMENT - 1);
    for (struct block *b = heap_first; b; b = b->next) {
        if (!b->free || b->size < size) continue;
        if (b->size >= size + HEADER_SIZE + ALIGNMENT) {
            struct block *rest = (struct block *)((char *)b + HEADER_SIZE + size);
            rest->size = b->size - size - HEADER_SIZE;
            rest->free = 1;
            rest->next = b->next;
            b->next = rest;
            b->size = size;
        }
        b->free = 0;
        return (char *)b + HEADER_SIZE;
    }
    return NULL;
}

void free(void *ptr) {
    if (!ptr) return;
    struct block *target = (struct block *)((char *)ptr - HEADER_SIZE);
    target->free = 1;
    for (struct block *b = heap_first; b; b = b->next) {
        while (b->free && b->next && b->next->free) {
            b->size += HEADER_SIZE + b->next->size;
            b->next = b->next->next;
        }
    }
}

void *calloc(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) return NULL; /* a multiply-high, no division */
    void *p = malloc(total);
    if (p) memset(p, 0, total);
    return p;
}

void *realloc(void *ptr, size_t size) {
    if (!ptr) return malloc(size);
    if (size == 0) {
        free(ptr);
        return NULL;
    }
    struct block *b = (struct block *)((char *)ptr - HEADER_SIZE);
    if (b->size >= size) return ptr;
    void *fresh = malloc(size);
    if (!fresh) return NULL;
    memcpy(fresh, ptr, b->size);
    free(ptr);
    return fresh;
}
