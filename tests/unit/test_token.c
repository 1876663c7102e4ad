/*
 * test_token.c — API token helpers (gateway/store/token.c): the format of new
 * tokens, their uniqueness, parsing that rejects anything off-format, the
 * SHA-256 of a known token and the constant-time hash comparison.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "token.h"
#include "sgrun.h"

/* The executable's definition wins over libcrypto's for the calls token.c
 * makes (symbol interposition), so this counts them: the comparison must go
 * through OpenSSL's constant-time CRYPTO_memcmp, not memcmp. Same contract:
 * no early exit. */
static int crypto_memcmp_calls;
int CRYPTO_memcmp(const void *in_a, const void *in_b, size_t len)
{
    const volatile unsigned char *a = in_a, *b = in_b;
    unsigned char x = 0;
    crypto_memcmp_calls++;
    for (size_t i = 0; i < len; i++)
        x |= a[i] ^ b[i];
    return x;
}

#define GOOD "sgk_abcd1234_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

static int in_set(char c, const char *set)
{
    return c != '\0' && strchr(set, c) != NULL;
}

static void assert_token_format(const char *tok)
{
    static const char pub_set[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    static const char b64_set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    assert_int_equal(strlen(tok), SG_TOKEN_LEN);
    assert_int_equal(SG_TOKEN_LEN, 56);
    assert_memory_equal(tok, "sgk_", 4);
    for (int i = 4; i < 12; i++)
        assert_true(in_set(tok[i], pub_set));
    assert_int_equal(tok[12], '_');
    for (int i = 13; i < 56; i++)
        assert_true(in_set(tok[i], b64_set));
    /* 32 bytes = 256 bits: the 43rd char carries 4 bits, its 2 low bits are 0 */
    assert_int_equal((strchr(b64_set, tok[55]) - b64_set) & 3, 0);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_generate_format(void **state)
{
    char tok[SG_TOKEN_LEN + 1], pub[SG_TOKEN_PUBLIC_LEN + 1], parsed[SG_TOKEN_PUBLIC_LEN + 1];

    for (int i = 0; i < 200; i++) {
        memset(tok, 'x', sizeof(tok));
        assert_int_equal(sg_token_generate(tok, pub), 0);
        assert_token_format(tok);
        assert_int_equal(strlen(pub), 8);
        assert_memory_equal(pub, tok + 4, 8);
        assert_int_equal(sg_token_parse(tok, strlen(tok), parsed), 0);
        assert_string_equal(parsed, pub);
        assert_true(sg_token_is_public_id(pub, strlen(pub)));
    }
    /* public_id may be NULL */
    assert_int_equal(sg_token_generate(tok, NULL), 0);
    assert_token_format(tok);
}

static void test_generate_unique(void **state)
{
    enum { N = 1000 };
    char **toks = calloc(N, sizeof(*toks));
    char **pubs = calloc(N, sizeof(*pubs));
    assert_non_null(toks);
    assert_non_null(pubs);

    for (int i = 0; i < N; i++) {
        toks[i] = malloc(SG_TOKEN_LEN + 1);
        pubs[i] = malloc(SG_TOKEN_PUBLIC_LEN + 1);
        assert_int_equal(sg_token_generate(toks[i], pubs[i]), 0);
    }
    qsort(toks, N, sizeof(*toks), cmp_str);
    qsort(pubs, N, sizeof(*pubs), cmp_str);
    for (int i = 1; i < N; i++) {
        assert_string_not_equal(toks[i - 1], toks[i]);
        assert_string_not_equal(pubs[i - 1], pubs[i]); /* 36^8 ids: a clash here would mean bad randomness */
    }
    /* the secrets are distinct too (not just the public ids) */
    for (int i = 0; i < N; i++) {
        for (int j = i + 1; j < N && j < i + 50; j++)
            assert_memory_not_equal(toks[i] + 13, toks[j] + 13, SG_TOKEN_SECRET_LEN);
    }
    for (int i = 0; i < N; i++) {
        free(toks[i]);
        free(pubs[i]);
    }
    free(toks);
    free(pubs);
}

static void test_public_id_chars_spread(void **state)
{
    /* every one of the 36 chars turns up in 2000 ids (16000 draws); a
     * biased or truncated alphabet would not */
    int seen[256] = {0};
    char tok[SG_TOKEN_LEN + 1], pub[SG_TOKEN_PUBLIC_LEN + 1];
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(sg_token_generate(tok, pub), 0);
        for (int k = 0; k < 8; k++)
            seen[(unsigned char)pub[k]]++;
    }
    for (const char *c = "abcdefghijklmnopqrstuvwxyz0123456789"; *c; c++)
        assert_true(seen[(unsigned char)*c] > 0);
}

static void test_parse_good(void **state)
{
    char pub[SG_TOKEN_PUBLIC_LEN + 1];
    assert_int_equal(sg_token_parse(GOOD, strlen(GOOD), pub), 0);
    assert_string_equal(pub, "abcd1234");
    assert_int_equal(sg_token_parse(GOOD, strlen(GOOD), NULL), 0);
    /* '-' and '_' are base64url, so a secret may hold them anywhere */
    const char *t = "sgk_0000zzzz_-_-_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA_";
    assert_int_equal(strlen(t), 56);
    assert_int_equal(sg_token_parse(t, strlen(t), pub), 0);
    assert_string_equal(pub, "0000zzzz");
    /* len decides, not a NUL: a good token followed by more bytes is read only to len */
    char buf[80];
    snprintf(buf, sizeof(buf), "%sEXTRA", GOOD);
    assert_int_equal(sg_token_parse(buf, 56, pub), 0);
    assert_int_equal(sg_token_parse(buf, strlen(buf), pub), -1);
}

static void test_parse_rejects(void **state)
{
    char pub[SG_TOKEN_PUBLIC_LEN + 1];
    char t[SG_TOKEN_LEN + 2];
    static const struct {
        int pos;
        char c;
    } bad_chars[] = {
        {0, 'S'},  {3, '-'},  {4, 'A'},  {5, '-'},  {11, '_'}, {11, '.'},  {12, 'x'},   {12, '-'},
        {13, '='}, {13, '+'}, {30, '/'}, {55, '='}, {55, ' '}, {40, '\0'}, {4, '\xc3'},
    };

    assert_int_equal(sg_token_parse(NULL, 0, pub), -1);
    assert_int_equal(sg_token_parse("", 0, pub), -1);
    /* wrong prefix */
    assert_int_equal(sg_token_parse("sgx_abcd1234_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 56, pub), -1);
    assert_int_equal(sg_token_parse("SGK_abcd1234_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 56, pub), -1);
    assert_int_equal(sg_token_parse("sk_abcd1234_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 56, pub), -1);
    /* wrong length: one short, one long, prefix only, no secret */
    assert_int_equal(sg_token_parse(GOOD, 55, pub), -1);
    assert_int_equal(sg_token_parse(GOOD "A", 57, pub), -1);
    assert_int_equal(sg_token_parse("sgk_", 4, pub), -1);
    assert_int_equal(sg_token_parse("sgk_abcd1234_", 13, pub), -1);
    assert_int_equal(sg_token_parse("sgk_abcd123_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 56, pub), -1);
    /* wrong charset at each part */
    for (size_t i = 0; i < sizeof(bad_chars) / sizeof(bad_chars[0]); i++) {
        memcpy(t, GOOD, sizeof(GOOD));
        t[bad_chars[i].pos] = bad_chars[i].c;
        if (sg_token_parse(t, 56, pub) != -1)
            fail_msg("accepted with '%c' at %d", bad_chars[i].c, bad_chars[i].pos);
    }
    /* nothing was written to pub on failure paths that matter: parse of good still works */
    assert_int_equal(sg_token_parse(GOOD, 56, pub), 0);
}

static void test_is_public_id(void **state)
{
    assert_true(sg_token_is_public_id("abcd1234", 8));
    assert_true(sg_token_is_public_id("00000000", 8));
    assert_false(sg_token_is_public_id("abcd123", 7));
    assert_false(sg_token_is_public_id("abcd12345", 9));
    assert_false(sg_token_is_public_id("ABCD1234", 8));
    assert_false(sg_token_is_public_id("abcd-234", 8));
    assert_false(sg_token_is_public_id("abcd_234", 8));
    assert_false(sg_token_is_public_id(NULL, 8));
    assert_false(sg_token_is_public_id(GOOD, strlen(GOOD)));
}

static void test_hash_stable(void **state)
{
    /* printf '%s' TOKEN | sha256sum */
    static const unsigned char want[32] = {0xa2, 0x72, 0xa1, 0x15, 0x21, 0x0b, 0x53, 0x29, 0x1f, 0x07, 0x88,
                                           0x75, 0x80, 0x20, 0x1f, 0x91, 0x8a, 0xda, 0x7c, 0x7f, 0x62, 0x9e,
                                           0xc5, 0xe8, 0xbd, 0x8c, 0xa0, 0xc2, 0xc0, 0xb0, 0x25, 0xe1};
    unsigned char h1[32], h2[32];
    char tok[SG_TOKEN_LEN + 1];

    assert_int_equal(sg_token_hash(GOOD, strlen(GOOD), h1), 0);
    assert_memory_equal(h1, want, 32);
    assert_int_equal(sg_token_hash(GOOD, strlen(GOOD), h2), 0);
    assert_memory_equal(h1, h2, 32);

    /* the whole token is hashed: changing the prefix, public id or secret changes it */
    memcpy(tok, GOOD, sizeof(GOOD));
    for (int pos = 0; pos < SG_TOKEN_LEN; pos += 5) {
        tok[pos] ^= 1;
        assert_int_equal(sg_token_hash(tok, SG_TOKEN_LEN, h2), 0);
        assert_memory_not_equal(h1, h2, 32);
        tok[pos] ^= 1;
    }
    /* and only len bytes are hashed */
    char buf[80];
    snprintf(buf, sizeof(buf), "%sEXTRA", GOOD);
    assert_int_equal(sg_token_hash(buf, 56, h2), 0);
    assert_memory_equal(h1, h2, 32);
}

static void test_hash_equal(void **state)
{
    unsigned char a[32], b[32];

    assert_int_equal(sg_token_hash(GOOD, strlen(GOOD), a), 0);
    memcpy(b, a, 32);
    crypto_memcmp_calls = 0;
    assert_int_equal(sg_token_hash_equal(a, b), 1);
    assert_int_equal(crypto_memcmp_calls, 1);
    /* a difference at the first, a middle and the last byte is found */
    for (int pos = 0; pos < 32; pos += 31) {
        b[pos] ^= 0x80;
        assert_int_equal(sg_token_hash_equal(a, b), 0);
        b[pos] ^= 0x80;
    }
    b[16] ^= 1;
    assert_int_equal(sg_token_hash_equal(a, b), 0);
    b[16] ^= 1;
    assert_int_equal(sg_token_hash_equal(a, b), 1);
    /* the result is exactly 0 or 1, whichever byte differs by how much */
    for (int v = 1; v < 256; v++) {
        b[7] = (unsigned char)(a[7] ^ v);
        assert_int_equal(sg_token_hash_equal(a, b), 0);
    }
}

int main(void)
{
    return SG_RUN_TESTS("token", NULL, NULL, NULL, NULL, test_generate_format, test_generate_unique,
                        test_public_id_chars_spread, test_parse_good, test_parse_rejects, test_is_public_id,
                        test_hash_stable, test_hash_equal);
}
