/*
 * fuzz.h — what every libFuzzer target in fuzz/ shares: the entry point's
 * declaration and CHECK, an invariant that aborts (a crash to libFuzzer,
 * with the input saved) when it does not hold.
 */
#ifndef SANDGATE_FUZZ_H
#define SANDGATE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);                               \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)

/* A cursor over the fuzzer's bytes, for targets that draw a few choices
 * (split points, flags) before the input proper. Past the end: zeros. */
typedef struct {
    const uint8_t *p;
    size_t len;
} fuzz_in_t;

static inline uint8_t fuzz_u8(fuzz_in_t *in)
{
    uint8_t v = 0;
    if (in->len != 0) {
        v = in->p[0];
        in->p++;
        in->len--;
    }
    return v;
}

#endif
