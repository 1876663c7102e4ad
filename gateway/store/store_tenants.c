/*
 * store_tenants.c — tenants and their API tokens in SQLite (store.h).
 */
#include "store_sql.h"
#include "token.h"
#include "util.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

/* ---- tenants ---- */

int sg_store_tenant_create(sg_store_t *st, const char *name, sg_tenant_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_INSERT];
    sg_tenant_t t;
    int rc;

    if (!sg_tenant_name_valid(name)) {
        sg_store__errf(err, errlen, "tenant name must be 1 to %d characters of A-Z a-z 0-9 . _ -", SG_TENANT_NAME_MAX);
        return -1;
    }
    sg_tenant_defaults(&t);
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.created_at = sg_wall_s();
    sqlite3_bind_text(s, 1, t.name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, t.created_at);
    sg_store__bind_tenant_fields(s, &t);
    rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_CONSTRAINT_UNIQUE)
            sg_store__errf(err, errlen, "tenant \"%s\" already exists", name);
        else
            sg_store__db_err(st, "tenant create", err, errlen);
        sg_store__done(s);
        return -1;
    }
    t.id = sqlite3_last_insert_rowid(st->db);
    sg_store__done(s);
    if (out != NULL)
        *out = t;
    return 0;
}

int sg_store_tenant_get(sg_store_t *st, int64_t id, sg_tenant_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_GET];
    sqlite3_bind_int64(s, 1, id);
    return sg_store__get(st, s, sg_store__read_tenant_row, out, "tenant lookup", err, errlen);
}

int sg_store_tenant_by_name(sg_store_t *st, const char *name, sg_tenant_t *out, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_BY_NAME];
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    return sg_store__get(st, s, sg_store__read_tenant_row, out, "tenant lookup", err, errlen);
}

int sg_store_tenant_update(sg_store_t *st, const sg_tenant_t *t, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_UPDATE];
    int n;

    if (sg_tenant_validate(t, err, errlen) != 0)
        return -1;
    sqlite3_bind_int64(s, 1, t->id);
    sg_store__bind_tenant_fields(s, t);
    if ((n = sg_store__run(st, s, "tenant update", err, errlen)) < 0)
        return -1;
    if (n == 0) {
        sg_store__errf(err, errlen, "no tenant with id %lld", (long long)t->id);
        return -1;
    }
    return 0;
}

int sg_store_tenant_list(sg_store_t *st, void (*fn)(const sg_tenant_t *t, void *data), void *data, char *err,
                         size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TENANT_LIST];
    sg_tenant_t t;
    int rc;

    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        sg_store__read_tenant(s, 0, &t);
        fn(&t, data);
    }
    return sg_store__finish(st, s, rc, "tenant list", err, errlen);
}

/* ---- tokens ---- */

static int label_valid(const char *label)
{
    size_t n = strlen(label);
    if (n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)label[i] < 0x20 || (unsigned char)label[i] > 0x7e)
            return 0;
    }
    return 1;
}

int sg_store_token_create(sg_store_t *st, int64_t tenant_id, const char *label, char *token_out, sg_token_t *out,
                          char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TOKEN_INSERT];
    char token[SG_TOKEN_LEN + 1], pub[SG_TOKEN_PUBLIC_LEN + 1];
    unsigned char hash[SG_TOKEN_HASH_LEN];
    int64_t now = sg_wall_s();
    int rc, found;

    if (label == NULL)
        label = "";
    if (!label_valid(label)) {
        sg_store__errf(err, errlen, "label must be at most 64 printable ASCII characters");
        return -1;
    }
    found = sg_store_tenant_get(st, tenant_id, NULL, err, errlen);
    if (found <= 0) {
        if (found == 0)
            sg_store__errf(err, errlen, "no tenant with id %lld", (long long)tenant_id);
        return -1;
    }
    /* a public id already taken (one chance in 36^8 per token) is drawn again */
    for (int attempt = 0;; attempt++) {
        if (sg_token_generate(token, pub) != 0 || sg_token_hash(token, SG_TOKEN_LEN, hash) != 0) {
            sg_store__errf(err, errlen, "cannot generate a token: %s", strerror(errno));
            return -1;
        }
        sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
        sqlite3_bind_blob(s, 2, hash, sizeof(hash), SQLITE_STATIC);
        sqlite3_bind_int64(s, 3, tenant_id);
        sqlite3_bind_text(s, 4, label, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 5, now);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
            break;
        if (rc != SQLITE_CONSTRAINT_UNIQUE || attempt == 4) {
            sg_store__db_err(st, "token create", err, errlen);
            sg_store__done(s);
            return -1;
        }
        sg_store__done(s);
    }
    if (out != NULL) {
        memset(out, 0, sizeof(*out));
        out->id = sqlite3_last_insert_rowid(st->db);
        out->tenant_id = tenant_id;
        memcpy(out->public_id, pub, sizeof(out->public_id));
        snprintf(out->label, sizeof(out->label), "%s", label);
        out->created_at = now;
    }
    sg_store__done(s);
    memcpy(token_out, token, sizeof(token));
    OPENSSL_cleanse(token, sizeof(token));
    return 0;
}

int sg_store_token_auth(sg_store_t *st, const char *token, size_t len, sg_tenant_t *tenant, char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TOKEN_AUTH];
    char pub[SG_TOKEN_PUBLIC_LEN + 1];
    unsigned char hash[SG_TOKEN_HASH_LEN];
    int rc, ret = 0;

    if (sg_token_parse(token, len, pub) != 0)
        return 0;
    if (sg_token_hash(token, len, hash) != 0) {
        sg_store__errf(err, errlen, "cannot hash the token");
        return -1;
    }
    sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const void *stored = sqlite3_column_blob(s, 0);
        int stored_len = sqlite3_column_bytes(s, 0);
        int revoked = sqlite3_column_type(s, 1) != SQLITE_NULL;
        if (stored != NULL && stored_len == SG_TOKEN_HASH_LEN && sg_token_hash_equal(stored, hash) && !revoked) {
            sg_tenant_t t;
            sg_store__read_tenant(s, 2, &t);
            if (!t.disabled) {
                if (tenant != NULL)
                    *tenant = t;
                ret = 1;
            }
        }
    } else if (rc != SQLITE_DONE) {
        ret = sg_store__db_err(st, "token auth", err, errlen);
    }
    sg_store__done(s);
    return ret;
}

int sg_store_token_revoke(sg_store_t *st, const char *public_id, char *err, size_t errlen)
{
    char pub[SG_TOKEN_PUBLIC_LEN + 1];
    size_t len = public_id != NULL ? strlen(public_id) : 0;
    sqlite3_stmt *s;
    int rc;

    if (sg_token_is_public_id(public_id, len)) {
        memcpy(pub, public_id, sizeof(pub));
    } else if (sg_token_parse(public_id, len, pub) == 0) {
        /* a whole token names its row only if its secret matches */
        unsigned char hash[SG_TOKEN_HASH_LEN];
        int match = 0;
        if (sg_token_hash(public_id, len, hash) != 0) {
            sg_store__errf(err, errlen, "cannot hash the token");
            return -1;
        }
        s = st->stmt[S_TOKEN_HASH];
        sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            match = sqlite3_column_bytes(s, 0) == SG_TOKEN_HASH_LEN && sqlite3_column_blob(s, 0) != NULL &&
                    sg_token_hash_equal(sqlite3_column_blob(s, 0), hash);
        } else if (rc != SQLITE_DONE) {
            sg_store__db_err(st, "token revoke", err, errlen);
            sg_store__done(s);
            return -1;
        }
        sg_store__done(s);
        if (!match)
            return 0;
    } else {
        return 0;
    }
    s = st->stmt[S_TOKEN_REVOKE];
    sqlite3_bind_text(s, 1, pub, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, sg_wall_s());
    if ((rc = sg_store__run(st, s, "token revoke", err, errlen)) < 0)
        return -1;
    return rc > 0 ? 1 : 0;
}

int sg_store_token_list(sg_store_t *st, int64_t tenant_id, void (*fn)(const sg_token_t *t, void *data), void *data,
                        char *err, size_t errlen)
{
    sqlite3_stmt *s = st->stmt[S_TOKEN_LIST];
    sg_token_t t;
    int rc;

    sqlite3_bind_int64(s, 1, tenant_id);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        memset(&t, 0, sizeof(t));
        t.id = sqlite3_column_int64(s, 0);
        t.tenant_id = sqlite3_column_int64(s, 1);
        sg_store__col_text(s, 2, t.public_id, sizeof(t.public_id));
        sg_store__col_text(s, 3, t.label, sizeof(t.label));
        t.created_at = sqlite3_column_int64(s, 4);
        t.revoked_at = sqlite3_column_int64(s, 5);
        fn(&t, data);
    }
    return sg_store__finish(st, s, rc, "token list", err, errlen);
}
