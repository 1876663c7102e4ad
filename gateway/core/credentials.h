/*
 * credentials.h — the credentials a request presents: the bearer token of its
 * Authorization header, and the constant-time check of a secret (the admin
 * token). Tenants' tokens are looked up in the store (token.h, store.h).
 */
#ifndef SANDGATE_GW_CREDENTIALS_H
#define SANDGATE_GW_CREDENTIALS_H

#include <h2o.h>

/* Constant-time comparison of a presented secret with the expected one;
 * an empty expected secret matches nothing. */
int sg_gw_secret_equal(const char *given, size_t len, const char *expected);
/* The bearer token of a request ("Bearer " in any case, spaces around it
 * trimmed), or {NULL,0}. Points into the request's header. */
h2o_iovec_t sg_gw_bearer(h2o_req_t *req);

#endif
