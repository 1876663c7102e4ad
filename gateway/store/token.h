/*
 * token.h — API token helpers, pure and thread-safe (no store, no state).
 *
 * A token is "sgk_" + public id + "_" + secret:
 *   public id  8 chars of [a-z0-9]: names the row in the store, not secret
 *   secret     43 chars of base64url (no padding) of 32 random bytes
 * e.g. sgk_k3v9q0a2_Zm9vYmFy...  (56 chars). Only SHA-256 of the whole token
 * is kept; hashes are compared in constant time.
 */
#ifndef SANDGATE_TOKEN_H
#define SANDGATE_TOKEN_H

#include <stddef.h>

#define SG_TOKEN_PREFIX "sgk_"
#define SG_TOKEN_PREFIX_LEN 4
#define SG_TOKEN_PUBLIC_LEN 8
#define SG_TOKEN_SECRET_LEN 43
#define SG_TOKEN_LEN (SG_TOKEN_PREFIX_LEN + SG_TOKEN_PUBLIC_LEN + 1 + SG_TOKEN_SECRET_LEN) /* 56 */
#define SG_TOKEN_HASH_LEN 32
/* A buffer that holds any token the store hands out, NUL included. */
#define SG_TOKEN_MAX 64

/* A new token from getrandom into out (>= SG_TOKEN_LEN + 1 bytes, NUL
 * terminated); its public id into public_id (NUL terminated). 0 or -1. */
int sg_token_generate(char out[SG_TOKEN_LEN + 1], char public_id[SG_TOKEN_PUBLIC_LEN + 1]);

/* 0 if tok[0..len) has the exact token format, with its public id copied
 * into public_id (may be NULL); -1 otherwise. Never reads past len. */
int sg_token_parse(const char *tok, size_t len, char public_id[SG_TOKEN_PUBLIC_LEN + 1]);

/* 1 if s[0..len) is a public id: exactly 8 of [a-z0-9]. */
int sg_token_is_public_id(const char *s, size_t len);

/* SHA-256 of tok[0..len) (the whole token). 0 or -1. */
int sg_token_hash(const char *tok, size_t len, unsigned char out[SG_TOKEN_HASH_LEN]);

/* 1 if the two hashes are equal, in time independent of where they differ
 * (CRYPTO_memcmp). */
int sg_token_hash_equal(const unsigned char a[SG_TOKEN_HASH_LEN], const unsigned char b[SG_TOKEN_HASH_LEN]);

#endif
