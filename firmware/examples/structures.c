/* Data structures on the heap: a linked list, a binary search tree and a hash map. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
    int value;
    struct node *next;
};

struct tree {
    int key, count;
    struct tree *left, *right;
};

static struct tree *tree_insert(struct tree *t, int key) {
    if (!t) {
        t = calloc(1, sizeof *t);
        t->key = key;
        t->count = 1;
        return t;
    }
    if (key == t->key)
        t->count++;
    else if (key < t->key)
        t->left = tree_insert(t->left, key);
    else
        t->right = tree_insert(t->right, key);
    return t;
}

static int tree_height(const struct tree *t) {
    if (!t) return 0;
    int l = tree_height(t->left), r = tree_height(t->right);
    return 1 + (l > r ? l : r);
}

static void tree_print(const struct tree *t, int *printed) {
    if (!t || *printed >= 8) return;
    tree_print(t->left, printed);
    if (*printed < 8) printf("%s%d", (*printed)++ ? " " : "", t->key);
    tree_print(t->right, printed);
}

static void tree_free(struct tree *t) {
    if (!t) return;
    tree_free(t->left);
    tree_free(t->right);
    free(t);
}

#define BUCKETS 31
struct entry {
    char *key;
    int value;
    struct entry *next;
};

static unsigned hash(const char *s) {
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

static void map_put(struct entry **map, const char *key, int value) {
    struct entry **slot = &map[hash(key) % BUCKETS];
    for (struct entry *e = *slot; e; e = e->next)
        if (!strcmp(e->key, key)) {
            e->value = value;
            return;
        }
    struct entry *e = malloc(sizeof *e);
    e->key = malloc(strlen(key) + 1);
    strcpy(e->key, key);
    e->value = value;
    e->next = *slot;
    *slot = e;
}

static int map_get(struct entry **map, const char *key, int missing) {
    for (struct entry *e = map[hash(key) % BUCKETS]; e; e = e->next)
        if (!strcmp(e->key, key)) return e->value;
    return missing;
}

int main(void) {
    struct node *list = NULL;
    for (int i = 1; i <= 10; i++) {
        struct node *n = malloc(sizeof *n);
        n->value = i * i;
        n->next = list;
        list = n;
    }
    int sum = 0;
    while (list) {
        struct node *next = list->next;
        sum += list->value;
        free(list);
        list = next;
    }
    printf("list sum of squares 1..10 = %d\n", sum);

    struct tree *root = NULL;
    unsigned x = 7;
    for (int i = 0; i < 200; i++) {
        x = x * 1664525u + 1013904223u;
        root = tree_insert(root, (int)(x >> 24));
    }
    int printed = 0;
    printf("tree height %d, smallest keys: ", tree_height(root));
    tree_print(root, &printed);
    printf("\n");
    tree_free(root);

    struct entry *map[BUCKETS] = {0};
    const char *words[] = {"alpha", "beta", "gamma", "delta", "beta", "alpha", "alpha"};
    for (int i = 0; i < 7; i++) map_put(map, words[i], map_get(map, words[i], 0) + 1);
    printf("counts: alpha=%d beta=%d gamma=%d delta=%d epsilon=%d\n", map_get(map, "alpha", 0),
           map_get(map, "beta", 0), map_get(map, "gamma", 0), map_get(map, "delta", 0), map_get(map, "epsilon", -1));

    int *grown = NULL;
    for (int n = 1; n <= 64; n *= 2) {
        grown = realloc(grown, (size_t)n * sizeof *grown);
        for (int i = n / 2; i < n; i++) grown[i] = i;
    }
    int total = 0;
    for (int i = 0; i < 64; i++) total += grown[i];
    free(grown);
    printf("realloc'd array total %d\n", total);
    return sum == 385 && total == 2016 ? 0 : 1;
}
