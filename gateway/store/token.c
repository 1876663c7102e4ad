#include "token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

#include "util.h"

static const char public_alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789"; /* 36 */
static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int is_public_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_b64url_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Base64url without padding: 32 bytes -> 43 chars. */
static void b64url_encode(const unsigned char *in, size_t n, char *out)
{
    size_t i = 0, o = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64url[(v >> 18) & 63];
        out[o++] = b64url[(v >> 12) & 63];
        out[o++] = b64url[(v >> 6) & 63];
        out[o++] = b64url[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)in[i] << 16;
        out[o++] = b64url[(v >> 18) & 63];
        out[o++] = b64url[(v >> 12) & 63];
    } else if (n - i == 2) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
        out[o++] = b64url[(v >> 18) & 63];
        out[o++] = b64url[(v >> 12) & 63];
        out[o++] = b64url[(v >> 6) & 63];
    }
    out[o] = '\0';
}

/* 8 chars of [a-z0-9], uniform: bytes >= 252 (7 * 36) are drawn again. */
static int random_public_id(char out[SG_TOKEN_PUBLIC_LEN + 1])
{
    unsigned char b[32];
    size_t have = 0;
    while (have < SG_TOKEN_PUBLIC_LEN) {
        if (sg_random_bytes(b, sizeof(b)) != 0)
            return -1;
        for (size_t i = 0; i < sizeof(b) && have < SG_TOKEN_PUBLIC_LEN; i++) {
            if (b[i] < 252)
                out[have++] = public_alphabet[b[i] % 36];
        }
    }
    out[SG_TOKEN_PUBLIC_LEN] = '\0';
    return 0;
}

int sg_token_generate(char out[SG_TOKEN_LEN + 1], char public_id[SG_TOKEN_PUBLIC_LEN + 1])
{
    unsigned char secret[32];
    char pub[SG_TOKEN_PUBLIC_LEN + 1];
    char enc[SG_TOKEN_SECRET_LEN + 1];

    if (random_public_id(pub) != 0 || sg_random_bytes(secret, sizeof(secret)) != 0)
        return -1;
    b64url_encode(secret, sizeof(secret), enc);
    OPENSSL_cleanse(secret, sizeof(secret));
    memcpy(out, SG_TOKEN_PREFIX, SG_TOKEN_PREFIX_LEN);
    memcpy(out + SG_TOKEN_PREFIX_LEN, pub, SG_TOKEN_PUBLIC_LEN);
    out[SG_TOKEN_PREFIX_LEN + SG_TOKEN_PUBLIC_LEN] = '_';
    memcpy(out + SG_TOKEN_PREFIX_LEN + SG_TOKEN_PUBLIC_LEN + 1, enc, SG_TOKEN_SECRET_LEN);
    out[SG_TOKEN_LEN] = '\0';
    OPENSSL_cleanse(enc, sizeof(enc));
    if (public_id != NULL)
        memcpy(public_id, pub, sizeof(pub));
    return 0;
}

int sg_token_is_public_id(const char *s, size_t len)
{
    if (s == NULL || len != SG_TOKEN_PUBLIC_LEN)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (!is_public_char(s[i]))
            return 0;
    }
    return 1;
}

int sg_token_parse(const char *tok, size_t len, char public_id[SG_TOKEN_PUBLIC_LEN + 1])
{
    const char *pub, *secret;

    if (tok == NULL || len != SG_TOKEN_LEN || memcmp(tok, SG_TOKEN_PREFIX, SG_TOKEN_PREFIX_LEN) != 0)
        return -1;
    pub = tok + SG_TOKEN_PREFIX_LEN;
    if (!sg_token_is_public_id(pub, SG_TOKEN_PUBLIC_LEN) || pub[SG_TOKEN_PUBLIC_LEN] != '_')
        return -1;
    secret = pub + SG_TOKEN_PUBLIC_LEN + 1;
    for (size_t i = 0; i < SG_TOKEN_SECRET_LEN; i++) {
        if (!is_b64url_char(secret[i]))
            return -1;
    }
    if (public_id != NULL) {
        memcpy(public_id, pub, SG_TOKEN_PUBLIC_LEN);
        public_id[SG_TOKEN_PUBLIC_LEN] = '\0';
    }
    return 0;
}

int sg_token_hash(const char *tok, size_t len, unsigned char out[SG_TOKEN_HASH_LEN])
{
    unsigned int n = 0;
    if (EVP_Digest(tok, len, out, &n, EVP_sha256(), NULL) != 1 || n != SG_TOKEN_HASH_LEN)
        return -1;
    return 0;
}

int sg_token_hash_equal(const unsigned char a[SG_TOKEN_HASH_LEN], const unsigned char b[SG_TOKEN_HASH_LEN])
{
    return CRYPTO_memcmp(a, b, SG_TOKEN_HASH_LEN) == 0;
}
