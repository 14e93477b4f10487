/* A word load from an address that is not a multiple of four. */
    .text
    .globl main
main:
    li a0, 0x40001
    lw a1, 0(a0)
    ret
