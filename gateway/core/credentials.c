/*
 * credentials.c — a request's credentials (credentials.h).
 */
#include "credentials.h"

#include <openssl/crypto.h>
#include <string.h>

int sg_gw_secret_equal(const char *given, size_t len, const char *expected)
{
    size_t el = strlen(expected);
    if (len != el || el == 0)
        return 0;
    return CRYPTO_memcmp(given, expected, el) == 0;
}

h2o_iovec_t sg_gw_bearer(h2o_req_t *req)
{
    ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
    if (i < 0)
        return h2o_iovec_init(NULL, 0);
    h2o_iovec_t v = req->headers.entries[i].value;
    if (v.len < 7 || !h2o_lcstris(v.base, 7, H2O_STRLIT("bearer ")))
        return h2o_iovec_init(NULL, 0);
    v.base += 7;
    v.len -= 7;
    while (v.len != 0 && v.base[0] == ' ')
        v.base++, v.len--;
    while (v.len != 0 && v.base[v.len - 1] == ' ')
        v.len--;
    return v;
}
