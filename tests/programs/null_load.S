/* Dereferencing a null pointer: nothing is mapped at address 0. */
    .text
    .globl main
main:
    lw a1, 0(zero)
    ret
