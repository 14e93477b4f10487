/* jump: JAL and JALR link values and targets, JALR clearing bit 0, rd = rs1, rd = x0. */
#include "test_macros.h"

TEST_BEGIN
    /* jal links the address of the next instruction */
    li t3, 1
    jal a4, 1f
2:  j fail
1:  lui t2, %hi(2b); addi t2, t2, %lo(2b)
    beq a4, t2, 3f; j fail
    /* jalr to an absolute target, linking the next instruction */
3:  li t3, 2
    lui t0, %hi(5f); addi t0, t0, %lo(5f)
    jalr a4, t0, 0
4:  j fail
5:  lui t2, %hi(4b); addi t2, t2, %lo(4b)
    beq a4, t2, 6f; j fail
    /* jalr clears bit 0 of the target: offset 1 lands on the aligned target */
6:  li t3, 3
    lui t0, %hi(8f); addi t0, t0, %lo(8f)
    jalr a4, t0, 1
7:  j fail
8:  lui t2, %hi(7b); addi t2, t2, %lo(7b)
    beq a4, t2, 9f; j fail
    /* jalr with a negative offset */
9:  li t3, 4
    lui t0, %hi(11f); addi t0, t0, %lo(11f); addi t0, t0, 64
    jalr a4, t0, -64
10: j fail
11: lui t2, %hi(10b); addi t2, t2, %lo(10b)
    beq a4, t2, 12f; j fail
    /* rd = rs1: the target uses the old value of the register */
12: li t3, 5
    lui t0, %hi(14f); addi t0, t0, %lo(14f)
    jalr t0, t0, 0
13: j fail
14: lui t2, %hi(13b); addi t2, t2, %lo(13b)
    beq t0, t2, 15f; j fail
    /* rd = x0: no link */
15: li t3, 6
    jal zero, 16f
    j fail
16: mv a4, zero; CHECK(a4, 0)
    li t3, 7
    lui t0, %hi(17f); addi t0, t0, %lo(17f)
    jalr zero, t0, 0
    j fail
17: mv a4, zero; CHECK(a4, 0)
    /* a call and a return through a real function */
    li t3, 8
    li a0, 20
    call double_it
    CHECK(a0, 40)
TEST_END

double_it:
    add a0, a0, a0
    ret
