/* A table-driven state machine: a lexer that classifies each byte and steps a transition
 * table, counting words, numbers and punctuation in a generated text. */
#include <stdio.h>

enum { SPACE, LETTER, DIGIT, PUNCT, CLASSES };
enum { IDLE, WORD, NUMBER, STATES };

static const unsigned char next_state[STATES][CLASSES] = {
    /* IDLE */ {IDLE, WORD, NUMBER, IDLE},
    /* WORD */ {IDLE, WORD, WORD, IDLE},
    /* NUMBER */ {IDLE, WORD, NUMBER, IDLE},
};

static unsigned char class_of[256];
static char text[3000];

int main(void) {
    for (int c = 0; c < 256; c++)
        class_of[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ? LETTER
                      : (c >= '0' && c <= '9')                         ? DIGIT
                      : (c == ' ' || c == '\n')                        ? SPACE
                                                                       : PUNCT;
    /* 64 bytes: the generator picks one with a mask, dividing by nothing. */
    const char alphabet[] = "the chip runs 42 programs, 7 at once; x86 arm64 rv32im! ok.\n 123";
    unsigned seed = 99;
    for (unsigned i = 0; i < sizeof text; i++) {
        seed = seed * 1103515245u + 12345u;
        text[i] = alphabet[(seed >> 16) & 63];
    }
    int counts[STATES] = {0}, punct = 0, state = IDLE;
    for (unsigned i = 0; i < sizeof text; i++) {
        int cls = class_of[(unsigned char)text[i]];
        int next = next_state[state][cls];
        if (next != state && next != IDLE) counts[next]++;
        punct += cls == PUNCT;
        state = next;
    }
    printf("words %d numbers %d punctuation %d\n", counts[WORD], counts[NUMBER], punct);
    return 0;
}
