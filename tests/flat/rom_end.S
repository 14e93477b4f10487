/* Code in the ROM's last rows, assembled flat at 0x1F000 (no crt0): those rows also hold
   the chip's millicode (in their upper halves), so the divisions here run millicode from
   the rows they sit in. The program prints its quotients and remainders, then jumps to
   the ROM's last row and runs off its end: an instruction access fault at 0x20000. */
        .text
_start:
        li      s0, 0x10000000          /* console */
        li      a0, 1000003
        li      a1, 97
        divu    a2, a0, a1              /* 10309 */
        remu    a3, a0, a1              /* 30 */
        li      a4, -1000003
        div     a5, a4, a1              /* -10309 */
        rem     a6, a4, a1              /* -30 */
        divu    a7, a0, zero            /* all ones */
        li      t2, 10
        remu    t3, a2, t2              /* 9 */
        addi    t3, t3, '0'
        sb      t3, 0(s0)
        addi    t3, a3, '0'             /* '0' + 30 = 'N' */
        sb      t3, 0(s0)
        sub     t3, zero, a6
        addi    t3, t3, '0'
        sb      t3, 0(s0)
        add     t4, a2, a5              /* 0 */
        addi    t4, t4, 'A'
        sb      t4, 0(s0)
        addi    t4, a7, 'B' + 1         /* 'B' */
        sb      t4, 0(s0)
        li      t1, 0x1fff0
        jr      t1

        .org    0xff0                   /* 0x1fff0: the ROM's last four words */
        addi    a0, a0, 1
        addi    a0, a0, 1
        addi    a0, a0, 1
        addi    a0, a0, 1
