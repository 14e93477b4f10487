/* Self-checking ISA tests. t3 (x28) holds the number of the test being run; a
 * mismatch exits with that number, success prints "PASS" and exits 0.
 * Checks use `beq ...; j fail` so that the failure path is reachable from any
 * distance (conditional branches only reach +-4 KiB). */

#define CHECK(reg, expected) \
    li t2, expected; beq reg, t2, 9f; j fail; 9:

#define TEST_BEGIN \
    .text; .globl main; main: addi sp, sp, -16; sw ra, 12(sp);

#define TEST_END \
    la a0, pass_message; call puts; li a0, 0; lw ra, 12(sp); addi sp, sp, 16; ret; \
fail: mv a0, t3; call exit; \
    .section .rodata; pass_message: .string "PASS"; .text

/* rd = rs1 op rs2 with distinct registers. */
#define TEST_RR(n, op, result, a, b) \
    li t3, n; li a1, a; li a2, b; op a4, a1, a2; CHECK(a4, result)
/* Both sources the same register. */
#define TEST_RR_SAME_SRC(n, op, result, a) \
    li t3, n; li a1, a; op a4, a1, a1; CHECK(a4, result)
/* Destination is the first source. */
#define TEST_RR_DEST_RS1(n, op, result, a, b) \
    li t3, n; li a1, a; li a2, b; op a1, a1, a2; CHECK(a1, result)
/* x0 as the first source reads zero. */
#define TEST_RR_ZERO_SRC1(n, op, result, b) \
    li t3, n; li a2, b; op a4, zero, a2; CHECK(a4, result)
/* x0 as the destination stays zero. */
#define TEST_RR_ZERO_DEST(n, op, a, b) \
    li t3, n; li a1, a; li a2, b; op zero, a1, a2; mv a4, zero; CHECK(a4, 0)

#define TEST_IMM(n, op, result, a, imm) \
    li t3, n; li a1, a; op a4, a1, imm; CHECK(a4, result)
#define TEST_IMM_DEST_RS1(n, op, result, a, imm) \
    li t3, n; li a1, a; op a1, a1, imm; CHECK(a1, result)
#define TEST_IMM_ZERO_DEST(n, op, a, imm) \
    li t3, n; li a1, a; op zero, a1, imm; mv a4, zero; CHECK(a4, 0)

/* Branch that must be taken / must fall through. */
#define TEST_BR_TAKEN(n, op, a, b) \
    li t3, n; li a1, a; li a2, b; op a1, a2, 8f; j fail; 8:
#define TEST_BR_NOT_TAKEN(n, op, a, b) \
    li t3, n; li a1, a; li a2, b; op a1, a2, 7f; j 8f; 7: j fail; 8:
