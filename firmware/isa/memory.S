/* memory: every load and store width, sign and zero extension, little-endian byte
 * order, negative offsets, a store followed by a load of the same place. */
#include "test_macros.h"

    .data
    .align 4
words:
    .word 0x80ff7f01
    .word 0x7fff8000
    .word 0xdeadbeef
    .word 0
scratch:
    .space 32

TEST_BEGIN
    la s1, words
    li t3, 1; lb a4, 0(s1); CHECK(a4, 0x00000001)
    li t3, 2; lb a4, 1(s1); CHECK(a4, 0x0000007f)
    li t3, 3; lb a4, 2(s1); CHECK(a4, 0xffffffff)
    li t3, 4; lb a4, 3(s1); CHECK(a4, 0xffffff80)
    li t3, 5; lbu a4, 2(s1); CHECK(a4, 0x000000ff)
    li t3, 6; lbu a4, 3(s1); CHECK(a4, 0x00000080)
    li t3, 7; lh a4, 4(s1); CHECK(a4, 0xffff8000)
    li t3, 8; lh a4, 6(s1); CHECK(a4, 0x00007fff)
    li t3, 9; lhu a4, 4(s1); CHECK(a4, 0x00008000)
    li t3, 10; lh a4, 0(s1); CHECK(a4, 0x00007f01)
    li t3, 11; lh a4, 2(s1); CHECK(a4, 0xffff80ff)
    li t3, 12; lhu a4, 2(s1); CHECK(a4, 0x000080ff)
    li t3, 13; lw a4, 8(s1); CHECK(a4, 0xdeadbeef)
    li t3, 14; addi s2, s1, 12; lw a4, -12(s2); CHECK(a4, 0x80ff7f01)
    li t3, 15; lbu a4, -1(s2); CHECK(a4, 0xde)

    la s3, scratch
    /* sw then byte-wise reads: little-endian */
    li t3, 16; li a1, 0x11223344; sw a1, 0(s3); lbu a4, 0(s3); CHECK(a4, 0x44)
    li t3, 17; lbu a4, 3(s3); CHECK(a4, 0x11)
    /* sb replaces one byte only */
    li t3, 18; li a1, 0xabcdef99; sb a1, 1(s3); lw a4, 0(s3); CHECK(a4, 0x11229944)
    /* sh replaces two bytes only */
    li t3, 19; li a1, 0x5566beef; sh a1, 2(s3); lw a4, 0(s3); CHECK(a4, 0xbeef9944)
    li t3, 20; lh a4, 2(s3); CHECK(a4, 0xffffbeef)
    /* negative store offsets */
    li t3, 21; addi s4, s3, 16; li a1, -2; sw a1, -4(s4); lw a4, 12(s3); CHECK(a4, 0xfffffffe)
    li t3, 22; sb zero, -1(s4); lw a4, 12(s3); CHECK(a4, 0x00fffffe)
    /* loads into x0 are discarded */
    li t3, 23; lw zero, 0(s3); mv a4, zero; CHECK(a4, 0)
    /* a store of x0 writes zero */
    li t3, 24; sw zero, 0(s3); lw a4, 0(s3); CHECK(a4, 0)
    /* load-use: the loaded value feeds the next instruction */
    li t3, 25; lw a1, 8(s1); addi a4, a1, 1; CHECK(a4, 0xdeadbef0)
    /* the stack works: push and pop */
    li t3, 26; li a1, 0x0badf00d; addi sp, sp, -16; sw a1, 4(sp); lw a4, 4(sp); addi sp, sp, 16; CHECK(a4, 0x0badf00d)
    /* FENCE is a no-op */
    li t3, 27; li a4, 5; fence; fence rw, rw; CHECK(a4, 5)
TEST_END
