# inband chip millicode: DIV, DIVU, REM, REMU.
#
# The RV32IM chip runs the division instructions as this routine, in the ROM's last
# head (0x1F000). Here register fields name shadow registers, except the window:
# reading x29 reads the caller's rs1, reading x30 its rs2, writing x31 writes its rd.
# `ecall` returns to the instruction after the division. Results follow the
# specification: x/0 gives all ones (quotient) and x (remainder); INT_MIN/-1 gives
# INT_MIN and 0.
        .text
        .globl  _millicode
_millicode:
        j       div_entry               # slot 0: DIV   (funct3 100)
        j       divu_entry              # slot 1: DIVU  (funct3 101)
        j       rem_entry               # slot 2: REM   (funct3 110)
        j       remu_entry              # slot 3: REMU  (funct3 111)

divu_entry:
        mv      x5, x29
        mv      x6, x30
        beqz    x6, 1f
        jal     x1, udivmod
        mv      x31, x7
        ecall
1:      li      x31, -1
        ecall

remu_entry:
        mv      x5, x29
        mv      x6, x30
        beqz    x6, 1f
        jal     x1, udivmod
        mv      x31, x8
        ecall
1:      mv      x31, x29
        ecall

div_entry:
        mv      x5, x29
        mv      x6, x30
        beqz    x6, 1f
        srai    x11, x5, 31             # sign masks
        srai    x12, x6, 31
        xor     x5, x5, x11             # magnitudes
        sub     x5, x5, x11
        xor     x6, x6, x12
        sub     x6, x6, x12
        jal     x1, udivmod
        xor     x13, x11, x12           # the quotient is negative when the signs differ
        xor     x7, x7, x13
        sub     x7, x7, x13
        mv      x31, x7
        ecall
1:      li      x31, -1
        ecall

rem_entry:
        mv      x5, x29
        mv      x6, x30
        beqz    x6, 1f
        srai    x11, x5, 31
        srai    x12, x6, 31
        xor     x5, x5, x11
        sub     x5, x5, x11
        xor     x6, x6, x12
        sub     x6, x6, x12
        jal     x1, udivmod
        xor     x8, x8, x11             # the remainder takes the dividend's sign
        sub     x8, x8, x11
        mv      x31, x8
        ecall
1:      mv      x31, x29
        ecall

# x7 = x5 / x6, x8 = x5 % x6 (unsigned, x6 != 0). The last division's operands and
# results stay in x14..x17: a quotient and a remainder of the same operands (gcc
# emits divu then remu, in libgcc's 64-bit division too) cost one routine. Otherwise
# restoring division, skipping the dividend's leading zero bytes first.
udivmod:
        bne     x5, x14, 1f
        bne     x6, x15, 1f
        mv      x7, x16
        mv      x8, x17
        ret
1:      mv      x14, x5
        mv      x15, x6
        li      x7, 0
        li      x8, 0
        li      x9, 32
2:      srli    x10, x5, 24             # skip whole zero bytes while any remain
        bnez    x10, 3f
        slli    x5, x5, 8
        addi    x9, x9, -8
        bnez    x9, 2b
        j       5f
3:      slli    x8, x8, 1
        srli    x10, x5, 31
        or      x8, x8, x10
        slli    x5, x5, 1
        slli    x7, x7, 1
        bltu    x8, x6, 4f
        sub     x8, x8, x6
        ori     x7, x7, 1
4:      addi    x9, x9, -1
        bnez    x9, 3b
5:      mv      x16, x7
        mv      x17, x8
        ret
