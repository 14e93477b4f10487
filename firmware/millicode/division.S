# inband chip millicode: DIV, DIVU, REM, REMU.
#
# The RV32IM chip runs the division instructions as this routine, kept in the upper
# halves of the ROM's last head's rows (pc 0x1F000 on, the same pcs as the user code in
# their lower halves). Here register fields name shadow registers, except the window:
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

# The chip keeps this routine in the upper halves of ROM rows (entries 64..125; the
# row's last two entries are its anchor), so the eighth instruction of every row of 32
# bytes keeps only its low six nibbles: it must have a zero top byte (a nop, mv, ecall,
# ret, xor, srli, a short forward branch ...). A test checks it.
#
# The unsigned entries check the last division's operands themselves (a hit returns
# from the entry's own row), so the common divu-then-remu pair costs few passes.
        .balign 32
divu_entry:
        beqz    x30, 2f
        bne     x29, x14, 1f
        bne     x30, x15, 1f
        mv      x31, x16
        ecall
1:      jal     x1, udivmod_window
        mv      x31, x16
        ecall
2:      li      x31, -1
        ecall

        .balign 32
remu_entry:
        beqz    x30, 2f
        bne     x29, x14, 1f
        bne     x30, x15, 1f
        mv      x31, x17
        ecall
1:      jal     x1, udivmod_window
        mv      x31, x17
        ecall
2:      mv      x31, x29
        ecall

# The signed entries with both operands non-negative are the unsigned ones (the same
# results, a zero divisor's too; INT_MIN / -1 has a negative operand), which skip the
# magnitudes and the sign fix-up (most divisions in C are of non-negative ints).
div_entry:
        bltz    x29, 2f
        bltz    x30, 2f
        j       divu_entry
        .balign 32                      # (padding never run: every row's eighth word short)
2:      mv      x5, x29
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
        xor     x7, x16, x13
        sub     x31, x7, x13
        ecall
1:      li      x31, -1
        ecall

rem_entry:
        bltz    x29, 2f
        bltz    x30, 2f
        j       remu_entry
        .balign 32                      # (padding never run: every row's eighth word short)
2:      mv      x5, x29
        mv      x6, x30
        beqz    x6, 1f
        srai    x11, x5, 31
        srai    x12, x6, 31
        xor     x5, x5, x11
        sub     x5, x5, x11
        xor     x6, x6, x12
        sub     x6, x6, x12
        jal     x1, udivmod
        xor     x8, x17, x11            # the remainder takes the dividend's sign
        sub     x31, x8, x11
        ecall
1:      mv      x31, x29
        ecall

# x16 = x14 / x15, x17 = x14 % x15 (unsigned, x15 != 0), with x14, x15 the operands:
# the last division's operands and results stay there, so a quotient and a remainder
# of the same operands (gcc emits divu then remu, in libgcc's 64-bit division too) cost
# one routine, and the results are never copied. Every register write of a 32-bit value
# costs passes, so the quick cases (quotient 0 or 1) read the operands where they are.
# Otherwise long division over the quotient's bits only: the divisor is shifted up under
# the dividend (whole bytes first), then each step subtracts it where it fits and halves
# it, until it falls below the divisor (no step counter: each instruction is a pass or
# more). It uses x6, x14..x18 only (the signed entries keep their sign masks in x11, x12).
udivmod:                                # the signed entries' magnitudes: x5, x6
        bne     x5, x14, udivmod_miss
        bne     x6, x15, udivmod_miss
        ret
udivmod_miss:
        mv      x14, x5
        mv      x15, x6
        j       1f
        .balign 32
udivmod_window:                         # the unsigned entries' operands
        mv      x14, x29
        mv      x15, x30
1:      li      x16, 0
        bltu    x14, x15, 6f            # n < d: quotient 0, remainder n
        srli    x18, x14, 1
        bltu    x18, x15, 7f            # n < 2d: quotient 1, remainder n - d
        mv      x17, x14                # the remainder, reduced in place
        mv      x6, x15                 # the divisor, shifted in place
2:      srli    x18, x17, 8             # while (d << k) << 8 <= n, i.e. d << k <= n >> 8
        bltu    x18, x6, 3f
        slli    x6, x6, 8
        j       2b
6:      mv      x17, x14
        ret
7:      sub     x17, x14, x15
        li      x16, 1
        ret
3:      srli    x18, x17, 1             # while (d << k) << 1 <= n
        bltu    x18, x6, 4f
        slli    x6, x6, 1
        j       3b
        .balign 32                      # (the quotient loop in one row)
4:      slli    x16, x16, 1             # one quotient bit per step, from the top, while
        bltu    x17, x6, 5f             # the shifted divisor d << i is at least d
        sub     x17, x17, x6
        ori     x16, x16, 1
5:      srli    x6, x6, 1
        bgeu    x6, x15, 4b
        ret
