/* Runs the chip's division digit (custom-0, dquo then dstep and dacc) from user code: only
   the millicode may, so as on any RV32IM machine the first is an illegal instruction. */
    .text
    .globl main
main:
    li a1, 1000
    li a2, 7
    .insn r 0x0b, 0, 0, a0, a1, a2
    .insn r 0x0b, 1, 0, a0, a1, a2
    .insn r 0x0b, 2, 0, a0, a1, a2
    ret
