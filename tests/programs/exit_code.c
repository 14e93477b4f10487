/* main's return value is the exit code. */
#include <stdio.h>

int main(void) {
    printf("leaving with 42\n");
    return 42;
}
