# crt0: the first instructions of every inband program.
# Sets up gp and sp, calls main(0, 0) and passes its return value to exit().
    .section .text.start, "ax"
    .globl _start
_start:
    .option push
    .option norelax
    la      gp, __global_pointer$
    .option pop
    la      sp, __stack_top
#ifdef INBAND_PICOLIBC
    # picolibc's thread-local data: the image's block, in place.
    la      tp, __tls_base
#endif
    li      a0, 0
    li      a1, 0
    call    main
    call    exit
1:  j       1b
