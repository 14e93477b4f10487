/* upper: LUI and AUIPC, including the sign bit and negative PC offsets. */
#include "test_macros.h"

TEST_BEGIN
    li t3, 1; lui a4, 0x12345; CHECK(a4, 0x12345000)
    li t3, 2; lui a4, 0xfffff; CHECK(a4, 0xfffff000)
    li t3, 3; lui a4, 0x80000; CHECK(a4, 0x80000000)
    li t3, 4; lui a4, 0; CHECK(a4, 0)
    li t3, 5; lui zero, 0x12345; mv a4, zero; CHECK(a4, 0)
    /* AUIPC adds to its own address; compare with an absolute address built by LUI/ADDI. */
    li t3, 6
1:  auipc a4, 0x1
    lui t2, %hi(1b); addi t2, t2, %lo(1b); li t1, 0x1000; add t2, t2, t1
    beq a4, t2, 2f; j fail
2:  li t3, 7
3:  auipc a4, 0xfffff
    lui t2, %hi(3b); addi t2, t2, %lo(3b); li t1, -0x1000; add t2, t2, t1
    beq a4, t2, 4f; j fail
4:  li t3, 8
5:  auipc a4, 0
    lui t2, %hi(5b); addi t2, t2, %lo(5b)
    beq a4, t2, 6f; j fail
6:
TEST_END
