/* String handling: the libc string functions, parsing and formatting. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reverse(char *s) {
    for (size_t i = 0, j = strlen(s); i + 1 < j; i++, j--) {
        char t = s[i];
        s[i] = s[j - 1];
        s[j - 1] = t;
    }
}

static int is_palindrome(const char *s) {
    size_t i = 0, j = strlen(s);
    while (i < j) {
        while (i < j && !isalnum((unsigned char)s[i])) i++;
        while (i < j && !isalnum((unsigned char)s[j - 1])) j--;
        if (i < j && tolower((unsigned char)s[i]) != tolower((unsigned char)s[j - 1])) return 0;
        i++, j--;
    }
    return 1;
}

static int count_words(const char *s) {
    int words = 0, inside = 0;
    for (; *s; s++) {
        if (isspace((unsigned char)*s))
            inside = 0;
        else if (!inside)
            inside = 1, words++;
    }
    return words;
}

int main(void) {
    char buffer[64];
    strcpy(buffer, "inband");
    strcat(buffer, " runs C");
    printf("'%s' has %u characters and %d words\n", buffer, (unsigned)strlen(buffer), count_words(buffer));
    reverse(buffer);
    printf("reversed: '%s'\n", buffer);

    const char *phrases[] = {"A man, a plan, a canal: Panama", "not a palindrome", "Was it a car or a cat I saw?"};
    for (int i = 0; i < 3; i++) printf("%-32s palindrome=%d\n", phrases[i], is_palindrome(phrases[i]));

    const char *numbers[] = {"42", "  -17", "+8x", "2147483647"};
    int sum = 0;
    for (int i = 0; i < 4; i++) sum += atoi(numbers[i]) % 1000;
    printf("atoi sum %d, strcmp %d %d %d, strncmp %d\n", sum, strcmp("abc", "abd") < 0, strcmp("b", "a") > 0,
           strcmp("same", "same"), strncmp("prefix-one", "prefix-two", 7));

    char *dot = strchr("file.name.txt", '.');
    printf("strchr: %s, strrchr: %s\n", dot, strrchr("file.name.txt", '.'));

    char formatted[48];
    int n = snprintf(formatted, sizeof formatted, "[%5d|%-5d|%05d|%x|%X|%c|%%]", 42, 42, 42, 255, 255, 'z');
    printf("%s (%d chars)\n", formatted, n);
    return 0;
}
