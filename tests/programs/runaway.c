/* Never exits: only the instruction budget stops it. */
int main(void) {
    volatile unsigned spins = 0;
    for (;;) spins++;
}
