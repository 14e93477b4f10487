/* The smallest inband program. */
#include <stdio.h>

int main(void) {
    printf("Hello from inside the model!\n");
    return 0;
}
