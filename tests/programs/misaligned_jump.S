/* jalr to an address that is 2 modulo 4 (no compressed instructions here). */
    .text
    .globl main
main:
    lui t0, %hi(main)
    addi t0, t0, %lo(main)
    addi t0, t0, 2
    jr t0
