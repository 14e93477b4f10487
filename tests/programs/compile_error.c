/* Does not compile: a missing semicolon. */
int main(void) {
    return 0
}
