/* branch: every conditional branch, taken and not taken, signed and unsigned edges,
 * forward and backward. */
#include "test_macros.h"

TEST_BEGIN
    TEST_BR_TAKEN(1, beq, 0, 0)
    TEST_BR_TAKEN(2, beq, 0x80000000, 0x80000000)
    TEST_BR_NOT_TAKEN(3, beq, 1, 0)
    TEST_BR_NOT_TAKEN(4, beq, 0xffffffff, 0x7fffffff)
    TEST_BR_TAKEN(5, bne, 1, 0)
    TEST_BR_TAKEN(6, bne, 0x80000000, 0)
    TEST_BR_NOT_TAKEN(7, bne, 0x12345678, 0x12345678)
    TEST_BR_TAKEN(8, blt, 0xffffffff, 0)
    TEST_BR_TAKEN(9, blt, 0x80000000, 0x7fffffff)
    TEST_BR_TAKEN(10, blt, 1, 2)
    TEST_BR_NOT_TAKEN(11, blt, 0, 0xffffffff)
    TEST_BR_NOT_TAKEN(12, blt, 5, 5)
    TEST_BR_NOT_TAKEN(13, blt, 0x7fffffff, 0x80000000)
    TEST_BR_TAKEN(14, bge, 0, 0xffffffff)
    TEST_BR_TAKEN(15, bge, 5, 5)
    TEST_BR_TAKEN(16, bge, 0x7fffffff, 0x80000000)
    TEST_BR_NOT_TAKEN(17, bge, 0x80000000, 0x7fffffff)
    TEST_BR_NOT_TAKEN(18, bge, 0xffffffff, 0)
    TEST_BR_TAKEN(19, bltu, 0, 0xffffffff)
    TEST_BR_TAKEN(20, bltu, 0x7fffffff, 0x80000000)
    TEST_BR_NOT_TAKEN(21, bltu, 0xffffffff, 0)
    TEST_BR_NOT_TAKEN(22, bltu, 7, 7)
    TEST_BR_TAKEN(23, bgeu, 0xffffffff, 0)
    TEST_BR_TAKEN(24, bgeu, 7, 7)
    TEST_BR_TAKEN(25, bgeu, 0x80000000, 0x7fffffff)
    TEST_BR_NOT_TAKEN(26, bgeu, 0, 1)
    TEST_BR_NOT_TAKEN(27, bgeu, 0x7fffffff, 0x80000000)
    /* x0 as an operand */
    TEST_BR_TAKEN(28, beq, 0, 0)
    li t3, 29; li a1, 0; beq zero, a1, 1f; j fail
1:  li t3, 30; li a1, -1; blt a1, zero, 2f; j fail
2:  li t3, 31; li a1, 1; bltu zero, a1, 3f; j fail
    /* backward branch: a count-down loop runs exactly 10 times */
3:  li t3, 32; li a1, 10; li a2, 0
4:  addi a2, a2, 1
    addi a1, a1, -1
    bnez a1, 4b
    CHECK(a2, 10)
TEST_END
