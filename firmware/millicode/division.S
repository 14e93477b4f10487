# inband chip millicode: DIV, DIVU, REM, REMU.
#
# The RV32IM chip runs the division instructions as this routine (all but those whose
# quotient is 0 or 1: the chip computes those in the weights), kept in the upper
# halves of the ROM's last head's rows (pc 0x1F000 on, the same pcs as the user code in
# their lower halves). Here register fields name shadow registers, except the window:
# reading x29 reads the caller's rs1, reading x30 its rs2, writing x31 writes its rd.
# A division enters at row 2·(funct3 & 3), slot 0: DIV at row 0, DIVU at 2, REM at 4,
# REMU at 6 (the chip's `xm` token names that row; two rows an entry, `.balign 64`).
# `ecall` returns to the instruction after the division. Results follow the
# specification: x/0 gives all ones (quotient) and x (remainder); INT_MIN/-1 gives
# INT_MIN and 0.
        .text
        .globl  _millicode
_millicode:

# The chip keeps this routine in the upper halves of ROM rows (entries 64..125; the
# row's last two entries are its anchor), so the eighth instruction of every row of 32
# bytes keeps only its low six nibbles: it must have a zero top byte (a nop, mv, ecall,
# ret, xor, srli, a short forward branch ...). A test checks it.
#
# The signed entries with both operands non-negative are the unsigned ones (the same
# results, a zero divisor's too; INT_MIN / -1 has a negative operand), which skip the
# magnitudes and the sign fix-up (most divisions in C are of non-negative ints). A
# magnitude is one write (the operand or its negation, by a branch on its sign), and so
# is the fix-up.
div_entry:                              # row 0: DIV (funct3 100)
        bltz    x29, 2f
        bltz    x30, 2f
        j       divu_entry
2:      beqz    x30, div_by_zero
        jal     x1, magnitudes
        xor     x13, x11, x12           # the quotient is negative when the signs differ
        mv      x31, x16
        beqz    x13, 3f
        neg     x31, x16
3:      ecall
div_by_zero:
        li      x31, -1
        ecall

# A quotient of 0 or 1 never gets here: the chip answers a division with n < 2d (both
# operands non-negative for DIV and REM) in its own pass. DIVU checks for a zero divisor,
# then the last long division's operands themselves (a hit returns from the entry's own
# row), so the common divu-then-remu pair costs few passes. REMU checks for a zero divisor after the cache: its operands hit the
# cache only before any long division (x15 is a divisor that was not 0 ever after), when
# x14 = x17 = 0, so x29 = 0 and the hit's x17 is the right answer.
        .balign 64
divu_entry:                             # row 2: DIVU (funct3 101)
        beqz    x30, div_by_zero
        bne     x29, x14, 1f
        bne     x30, x15, 1f
        mv      x31, x16
        ecall
1:      jal     x1, udivmod_window
        mv      x31, x16
        ecall

        .balign 64
rem_entry:                              # row 4: REM (funct3 110)
        bltz    x29, 2f
        bltz    x30, 2f
        j       remu_entry
2:      beqz    x30, 1f
        jal     x1, magnitudes
        beqz    x11, 3f                 # the remainder takes the dividend's sign
        neg     x31, x17
        ecall
3:      mv      x31, x17
        ecall
1:      mv      x31, x29
        ecall

        .balign 64
remu_entry:                             # row 6: REMU (funct3 111)
        bne     x29, x14, 1f
        bne     x30, x15, 1f
        mv      x31, x17
        ecall
1:      beqz    x30, 2f                 # x % 0 = x
        jal     x1, udivmod_window
        mv      x31, x17
        ecall
2:      mv      x31, x29
        ecall

        .balign 64
# x16 = |x29| / |x30|, x17 = |x29| % |x30| (x30 != 0), with x11 = 1 where x29 < 0 and
# x12 = 1 where x30 < 0; the magnitudes in x5, x6.
magnitudes:
        slti    x11, x29, 0
        slti    x12, x30, 0
        bnez    x11, 1f
        mv      x5, x29
        j       2f
1:      neg     x5, x29
2:      bnez    x12, 1f
        mv      x6, x30
        j       2f
1:      neg     x6, x30
2:      bne     x5, x14, 3f
        bne     x6, x15, 3f
        ret
3:      mv      x14, x5
        mv      x15, x6
        bgeu    x14, x15, 5f
        li      x16, 0                  # n < d: quotient 0, remainder n
        mv      x17, x14
        ret
5:      srli    x19, x14, 1
        bgeu    x19, x15, 6f
        sub     x17, x14, x15           # n < 2d: quotient 1, remainder n - d
        li      x16, 1
        ret

# x16 = x14 / x15, x17 = x14 % x15 (unsigned, quotient at least 2), with x14, x15 the
# operands: the last long division's operands and results stay there, so a quotient and
# a remainder of the same operands (gcc emits divu then remu, in libgcc's 64-bit division
# too) cost one division, and the results are never copied. Every register write of a
# 32-bit value costs passes, so the unsigned entries check the cache before the operands
# are copied (the signed path copies its magnitudes first and answers its short
# quotients itself: its results land in x16, x17 too).
#
# Long division by radix-16 digits from the top, each three instructions of the chip's
# division digit (custom-0, millicode only): dquo x13 = the digit of the remainder x17 by
# x15 · 16^k (0 where that does not fit 32 bits), dstep x17 = the remainder less that
# digit's multiple, dacc x16 = x16 · 16 + x13. A quotient below 2^16 (x14 < x15 · 2^16)
# starts at digit 3. It uses x13, x14..x18 only.
        .macro  dquo rd, rs1, rs2, k
        .insn   r 0x0b, 0, \k, \rd, \rs1, \rs2
        .endm
        .macro  dstep rd, rs1, rs2, k
        .insn   r 0x0b, 1, \k, \rd, \rs1, \rs2
        .endm
        .macro  dacc rd, rs1, rs2
        .insn   r 0x0b, 2, 0, \rd, \rs1, \rs2
        .endm
        .macro  digit k
        dquo    x13, x17, x15, \k
        dstep   x17, x17, x15, \k
        dacc    x16, x16, x13
        .endm
# (A row's eighth instruction must have a zero top byte: dquo and dstep with k > 0 do
# not, dacc does. Six words that never run put the digits where each row's eighth is a
# dacc or digit 0's dquo; digit 3 runs its dacc second.)
        .rept   6
        nop
        .endr
udivmod_window:                         # the unsigned entries' operands
        mv      x14, x29
        mv      x15, x30
6:      srli    x18, x14, 16
        bltu    x18, x15, 2f
        dquo    x13, x14, x15, 7        # the first digit reads the dividend, and x16 = q
        dstep   x17, x14, x15, 7
        dacc    x16, x0, x13
        digit   6
        digit   5
        digit   4
        dquo    x13, x17, x15, 3
        dacc    x16, x16, x13
        dstep   x17, x17, x15, 3
3:      digit   2
        digit   1
        digit   0
        ret
2:      dquo    x13, x14, x15, 3        # x14 < x15 · 2^16: the quotient's digits 3..0
        dstep   x17, x14, x15, 3
        dacc    x16, x0, x13
        j       3b
