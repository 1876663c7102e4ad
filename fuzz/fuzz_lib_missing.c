/*
 * fuzz_lib_missing — the library check's output, printed inside the
 * sandbox, matched against the names the request gave
 * (sg_lib_match_missing, proxy/libraries/libraries.c): nothing a sandbox prints may
 * become a name to fetch.
 *
 * Input: up to 4 names (lines of the first bytes, up to a NUL), then the
 * output. Invariants: only requested names are marked, each one an exact
 * line of the output, a name given twice once (its first index), and the
 * count returned is the number newly marked.
 */
#include <string.h>

#include "fuzz.h"
#include "libraries.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *nul = memchr(data, '\0', size);
    char *names[5] = {0}, *list;
    unsigned char missing[4] = {0}, before[4];
    size_t n = 0, marked;

    if (nul == NULL)
        return 0;
    list = strndup((const char *)data, (size_t)(nul - (const char *)data));
    for (char *save = NULL, *t = strtok_r(list, "\n", &save); t != NULL && n < 4; t = strtok_r(NULL, "\n", &save))
        names[n++] = t;
    const char *out = nul + 1;
    size_t len = size - (size_t)(out - (const char *)data);
    char *copy = malloc(len != 0 ? len : 1); /* exact size: ASan sees overreads */
    memcpy(copy, out, len);
    if (len != 0 && (data[0] & 1))
        missing[0] = 1; /* a name already known missing stays so, and is not counted again */
    memcpy(before, missing, sizeof(before));

    marked = sg_lib_match_missing(names, n, copy, len, missing);

    size_t newly = 0;
    for (size_t i = 0; i < 4; i++) {
        if (i >= n) {
            CHECK(missing[i] == 0);
            continue;
        }
        CHECK(missing[i] == 0 || missing[i] == 1);
        if (missing[i] && !before[i]) {
            newly++;
            /* an exact line of the output */
            size_t l = strlen(names[i]);
            int found = 0;
            for (const char *p = copy, *end = copy + len; p <= end && !found;) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t k = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
                found = k == l && memcmp(p, names[i], l) == 0;
                if (nl == NULL)
                    break;
                p = nl + 1;
            }
            CHECK(found);
            /* the first of equal names only */
            for (size_t j = 0; j < i; j++)
                CHECK(strcmp(names[j], names[i]) != 0);
        }
    }
    CHECK(marked == newly);
    free(copy);
    free(list);
    return 0;
}
