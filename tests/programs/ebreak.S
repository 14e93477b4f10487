/* ebreak traps. */
    .text
    .globl main
main:
    ebreak
    ret
