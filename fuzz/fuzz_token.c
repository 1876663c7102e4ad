/*
 * fuzz_token — the Authorization header and the API token in it: the
 * bearer extraction both the public and the admin API use (sg_gw_bearer,
 * gateway/core/credentials.c), the token format check that comes before any
 * database look-up (sg_token_parse, gateway/store/token.c), and the admin
 * token's comparison (sg_gw_secret_equal).
 *
 * Input: the header's value. Invariants: the bearer credential lies inside
 * the value, right after a case-insensitive "Bearer ", with no space at
 * either end; a token that parses is exactly "sgk_" + its public id + "_" +
 * 43 base64url characters and is rebuilt byte for byte from those parts; a
 * token shorter or longer by one byte does not parse; the secret comparison
 * agrees with memcmp.
 */
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "credentials.h"
#include "http.h"
#include "token.h"

static const char admin[] = "sgadmin-fuzz-0123456789";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char tok[SG_TOKEN_LEN + 1], pub[SG_TOKEN_PUBLIC_LEN + 1], pub2[SG_TOKEN_PUBLIC_LEN + 1];

    /* what the service hands out parses, and names the same public id */
    CHECK(sg_token_generate(tok, pub) == 0);
    CHECK(sg_token_parse(tok, strlen(tok), pub2) == 0 && strcmp(pub, pub2) == 0);
    return 0;
}

static void check_token(const char *t, size_t len)
{
    char pub[SG_TOKEN_PUBLIC_LEN + 1], rebuilt[SG_TOKEN_LEN + 1];

    memset(pub, 0x7f, sizeof(pub));
    if (sg_token_parse(t, len, pub) != 0) {
        CHECK(sg_token_parse(t, len, NULL) != 0);
        return;
    }
    CHECK(sg_token_parse(t, len, NULL) == 0);
    CHECK(len == SG_TOKEN_LEN && memcmp(t, SG_TOKEN_PREFIX, SG_TOKEN_PREFIX_LEN) == 0);
    CHECK(pub[SG_TOKEN_PUBLIC_LEN] == '\0' && sg_token_is_public_id(pub, SG_TOKEN_PUBLIC_LEN));
    for (size_t i = SG_TOKEN_PREFIX_LEN + SG_TOKEN_PUBLIC_LEN + 1; i < len; i++)
        CHECK(isalnum((unsigned char)t[i]) || t[i] == '-' || t[i] == '_');
    snprintf(rebuilt, sizeof(rebuilt), "%s%s_%.*s", SG_TOKEN_PREFIX, pub, SG_TOKEN_SECRET_LEN,
             t + SG_TOKEN_PREFIX_LEN + SG_TOKEN_PUBLIC_LEN + 1);
    CHECK(memcmp(rebuilt, t, len) == 0);
    CHECK(sg_token_parse(t, len - 1, NULL) != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    h2o_req_t req;
    char *value = malloc(size != 0 ? size : 1);

    memcpy(value, data, size);
    memset(&req, 0, sizeof(req));
    h2o_mem_init_pool(&req.pool);
    h2o_add_header(&req.pool, &req.headers, H2O_TOKEN_AUTHORIZATION, NULL, value, size);

    h2o_iovec_t v = sg_gw_bearer(&req);
    if (size >= 7 && h2o_lcstris(value, 7, H2O_STRLIT("bearer "))) {
        CHECK(v.base != NULL && v.base >= value + 7 && v.base + v.len <= value + size);
        CHECK(v.len == 0 || (v.base[0] != ' ' && v.base[v.len - 1] != ' '));
        for (const char *p = value + 7; p < v.base; p++)
            CHECK(*p == ' ');
        /* the public API refuses longer credentials before any look-up */
        if (v.len <= SG_TOKEN_MAX) {
            check_token(v.base, v.len);
            /* one byte more never parses (reads stay inside the copy) */
            char *longer = malloc(v.len + 1);
            memcpy(longer, v.base, v.len);
            longer[v.len] = 'A';
            CHECK(sg_token_parse(longer, v.len + 1, NULL) != 0 || v.len + 1 == SG_TOKEN_LEN);
            free(longer);
        }
        int same = v.len == sizeof(admin) - 1 && memcmp(v.base, admin, v.len) == 0;
        CHECK(sg_gw_secret_equal(v.base, v.len, admin) == same);
        CHECK(sg_gw_secret_equal(v.base, v.len, "") == 0);
    } else {
        CHECK(v.base == NULL && v.len == 0);
    }
    /* the token parser on the raw bytes as well (sandgate-admin, revoke) */
    check_token(value, size);
    h2o_mem_clear_pool(&req.pool);
    free(value);
    return 0;
}
