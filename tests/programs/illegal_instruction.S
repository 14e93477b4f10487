/* Executes a word that is not an RV32IM instruction. */
    .text
    .globl main
main:
    li a0, 1
    .word 0xffffffff
    ret
