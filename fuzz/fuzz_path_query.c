/*
 * fuzz_path_query — a request target as both tiers route it: the path
 * split into route segments (sg_http_split_path, common/http.c), the
 * "path" query parameter percent-decoded (sg_http_query_param), checked as
 * a files-route path (sg_validate_path, proxy/api/validate.c) and quoted for
 * the shell (sg_shell_quote).
 *
 * Input: the request target ("/sessions/ID/files?path=..."). Invariants:
 * segments are non-empty, hold no '/', lie inside the path and join back
 * into it; the decoded value is no longer than the raw one and ends in a
 * NUL; a path validation accepts stays under /sandbox (relative, no ".."
 * nor "." nor empty component, no NUL, within SG_MAX_PATH) and one it
 * refuses is a 400 with a sentence; a quoted string unquotes, as sh would
 * read it, to the very bytes it came from.
 */
#include <string.h>

#include "fuzz.h"
#include "http.h"
#include "validate.h"

static void check_split(const char *p, size_t len)
{
    h2o_iovec_t seg[4];
    int n = sg_http_split_path(p, len, seg, 4);
    size_t at = 0;

    if (n < 0)
        return;
    CHECK(n <= 4 && len >= 1 && p[0] == '/');
    for (int i = 0; i < n; i++) {
        CHECK(seg[i].len != 0 && seg[i].base >= p && seg[i].base + seg[i].len <= p + len);
        CHECK(memchr(seg[i].base, '/', seg[i].len) == NULL);
        /* "/" seg "/" seg ... : each segment right after the slash */
        CHECK(p[at] == '/' && seg[i].base == p + at + 1);
        at += 1 + seg[i].len;
    }
    /* the rest is nothing, or one trailing slash */
    CHECK(at == len || (at + 1 == len && p[at] == '/'));
}

static void check_path(const char *v, size_t len)
{
    char out[SG_MAX_PATH + 1];
    sg_verr_t e;

    memset(&e, 0, sizeof(e));
    if (sg_validate_path(v, len, out, sizeof(out), &e) != 0) {
        CHECK(e.status == 400 && e.code != NULL && e.detail[0] != '\0');
        return;
    }
    size_t n = strlen(out);
    CHECK(n >= 1 && n <= len && n <= SG_MAX_PATH);
    CHECK(out[0] != '/' && out[n - 1] != '/');
    /* walk the components as the kernel would from /sandbox: never above it */
    for (size_t s = 0, i = 0; i <= n; i++) {
        if (i == n || out[i] == '/') {
            size_t c = i - s;
            CHECK(c != 0);
            CHECK(!(c == 2 && out[s] == '.' && out[s + 1] == '.'));
            s = i + 1;
        }
    }
    CHECK(strcmp(out, ".") != 0);
}

static void check_quote(const char *s, size_t len)
{
    size_t cap = len * 4 + 3;
    char *q = malloc(cap), *back = malloc(len + 1);
    size_t o = 0, i = 0;

    CHECK(sg_shell_quote(s, len, q, cap) == 0);
    /* read it back as sh does: '...' literally, \' an escaped quote */
    size_t qn = strlen(q);
    while (i < qn) {
        if (q[i] == '\'') {
            i++;
            while (i < qn && q[i] != '\'')
                back[o++] = q[i++];
            CHECK(i < qn); /* closed */
            i++;
        } else {
            CHECK(q[i] == '\\' && i + 1 < qn && q[i + 1] == '\'');
            back[o++] = '\'';
            i += 2;
        }
        CHECK(o <= len);
    }
    CHECK(o == len && memcmp(back, s, len) == 0);
    /* too small a buffer is refused, never overrun */
    if (qn > 0)
        CHECK(sg_shell_quote(s, len, q, qn) == -1);
    free(q);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    h2o_req_t req;
    char *target = malloc(size != 0 ? size : 1);
    const char *qm;

    memcpy(target, data, size);
    memset(&req, 0, sizeof(req));
    h2o_mem_init_pool(&req.pool);
    req.path = h2o_iovec_init(target, size);
    qm = memchr(target, '?', size);
    req.query_at = qm != NULL ? (size_t)(qm - target) : SIZE_MAX;

    h2o_iovec_t path = sg_http_path(&req);
    CHECK(path.base == target && path.len == (qm != NULL ? (size_t)(qm - target) : size));
    check_split(path.base, path.len);

    h2o_iovec_t v = sg_http_query_param(&req, "path");
    if (qm == NULL) {
        CHECK(v.base == NULL);
    } else if (v.base != NULL) {
        CHECK(v.len <= size - (size_t)(qm - target) && v.base[v.len] == '\0');
        check_path(v.base, v.len);
        if (v.len <= 4096 && memchr(v.base, '\0', v.len) == NULL) /* sh carries no NUL */
            check_quote(v.base, v.len);
    }
    h2o_mem_clear_pool(&req.pool);
    free(target);
    return 0;
}
