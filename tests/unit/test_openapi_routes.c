/*
 * test_openapi_routes.c — GET /openapi.json (the document compiled into the
 * gateway, gateway/openapi/openapi.json) against the route tables the
 * gateway serves (routes.c, sg_gw_routes and sg_gw_www_dirs): every method
 * and pattern served is in the document, and the document has nothing
 * else. A pattern's "*" is a "{name}" segment of the document's path. Also:
 * every operation that needs a token documents its 401, and every error
 * reply of the document has the {"detail","code"} shape (MCP's are
 * JSON-RPC's; GET /health's 503 is its report).
 * (That the document is valid OpenAPI 3.1 is unit.openapi_validate.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "handlers.h"
#include "route.h"
#include "routes.h"
#include "sgrun.h"

static const struct {
    unsigned bit;
    const char *name;
} methods[] = {{SG_M_GET, "get"}, {SG_M_HEAD, "head"},     {SG_M_POST, "post"},
               {SG_M_PUT, "put"}, {SG_M_DELETE, "delete"}, {SG_M_PATCH, "patch"}};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))

static json_object *document(void)
{
    size_t len;
    const char *text = sg_gw_openapi_document(&len);
    assert_int_equal(strlen(text), len);
    json_object *doc = json_tokener_parse(text);
    assert_non_null(doc);
    return doc;
}

/* The document's path with every "{name}" segment written "*". */
static void as_pattern(const char *path, char *out, size_t outlen)
{
    size_t o = 0;
    for (const char *p = path; *p != '\0' && o + 2 < outlen;) {
        if (*p == '{') {
            out[o++] = '*';
            while (*p != '\0' && *p != '}')
                p++;
            if (*p == '}')
                p++;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
}

/* The methods (SG_M_*) the tables serve at pattern. */
static unsigned served(const char *pattern)
{
    unsigned m = 0;
    size_t n;
    sg_gw_table_t tables[] = {SG_GW_TABLE_PUBLIC, SG_GW_TABLE_ADMIN};
    for (size_t t = 0; t < 2; t++) {
        const sg_route_t *r = sg_gw_routes(tables[t], &n);
        for (size_t i = 0; i < n; i++)
            if (strcmp(r[i].pattern, pattern) == 0)
                m |= r[i].methods;
    }
    const sg_gw_www_t *w = sg_gw_www_dirs(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(w[i].url_path, pattern) == 0)
            m |= SG_M_GET;
    return m;
}

/* The methods the document has at pattern. */
static unsigned documented(json_object *paths, const char *pattern)
{
    unsigned m = 0;
    char pat[256];
    json_object_object_foreach(paths, path, item)
    {
        as_pattern(path, pat, sizeof(pat));
        if (strcmp(pat, pattern) != 0)
            continue;
        for (size_t i = 0; i < NMETHODS; i++)
            if (json_object_object_get_ex(item, methods[i].name, NULL))
                m |= methods[i].bit;
    }
    return m;
}

static void report(int *bad, const char *what, unsigned mask, const char *pattern)
{
    for (size_t i = 0; i < NMETHODS; i++)
        if (mask & methods[i].bit) {
            fprintf(stderr, "%s: %s %s\n", what, methods[i].name, pattern);
            (*bad)++;
        }
}

/* Every route served is documented... */
static void test_every_route_documented(void **state)
{
    json_object *doc = document(), *paths;
    int bad = 0;
    size_t n;
    assert_true(json_object_object_get_ex(doc, "paths", &paths));
    sg_gw_table_t tables[] = {SG_GW_TABLE_PUBLIC, SG_GW_TABLE_ADMIN};
    size_t total = 0;
    for (size_t t = 0; t < 2; t++) {
        const sg_route_t *r = sg_gw_routes(tables[t], &n);
        assert_true(n > 0);
        total += n;
        for (size_t i = 0; i < n; i++)
            report(&bad, "served but not in /openapi.json", r[i].methods & ~documented(paths, r[i].pattern),
                   r[i].pattern);
    }
    const sg_gw_www_t *w = sg_gw_www_dirs(&n);
    for (size_t i = 0; i < n; i++)
        report(&bad, "served but not in /openapi.json", SG_M_GET & ~documented(paths, w[i].url_path), w[i].url_path);
    assert_true(total >= 20);
    assert_int_equal(bad, 0);
    json_object_put(doc);
}

/* ...and the document has nothing else. */
static void test_nothing_else_documented(void **state)
{
    json_object *doc = document(), *paths;
    char pat[256];
    int bad = 0;
    assert_true(json_object_object_get_ex(doc, "paths", &paths));
    json_object_object_foreach(paths, path, item)
    {
        as_pattern(path, pat, sizeof(pat));
        report(&bad, "in /openapi.json but not served", documented(paths, pat) & ~served(pat), path);
        (void)item;
    }
    assert_int_equal(bad, 0);
    json_object_put(doc);
}

/* A $ref to components/responses/<name>, or the response itself. */
static json_object *resolve(json_object *doc, json_object *resp)
{
    json_object *ref, *comps, *rs, *out;
    if (!json_object_object_get_ex(resp, "$ref", &ref))
        return resp;
    const char *s = json_object_get_string(ref), *prefix = "#/components/responses/";
    assert_true(strncmp(s, prefix, strlen(prefix)) == 0);
    assert_true(json_object_object_get_ex(doc, "components", &comps));
    assert_true(json_object_object_get_ex(comps, "responses", &rs));
    assert_true(json_object_object_get_ex(rs, s + strlen(prefix), &out));
    return out;
}

static void test_errors_documented(void **state)
{
    json_object *doc = document(), *paths;
    int bad = 0;
    assert_true(json_object_object_get_ex(doc, "paths", &paths));
    json_object_object_foreach(paths, path, item)
    {
        for (size_t i = 0; i < NMETHODS; i++) {
            json_object *op, *sec, *responses;
            if (!json_object_object_get_ex(item, methods[i].name, &op))
                continue;
            assert_true(json_object_object_get_ex(op, "responses", &responses));
            if (json_object_object_get_ex(op, "security", &sec) && json_object_array_length(sec) > 0 &&
                !json_object_object_get_ex(responses, "401", NULL)) {
                fprintf(stderr, "%s %s needs a token but documents no 401\n", methods[i].name, path);
                bad++;
            }
            json_object_object_foreach(responses, status, resp)
            {
                json_object *content, *ctype, *schema, *ref;
                if (status[0] != '4' && status[0] != '5')
                    continue;
                /* MCP answers JSON-RPC errors in its own shape; a body-less error (h2o's own) says so */
                if (!json_object_object_get_ex(resolve(doc, resp), "content", &content) ||
                    !json_object_object_get_ex(content, "application/json", &ctype) ||
                    !json_object_object_get_ex(ctype, "schema", &schema) ||
                    !json_object_object_get_ex(schema, "$ref", &ref))
                    continue;
                const char *r = json_object_get_string(ref);
                /* GET /health's 503 is its report, whose fields say what is down */
                if (strcmp(path, "/health") == 0 && strcmp(r, "#/components/schemas/Health") == 0)
                    continue;
                if (strcmp(r, "#/components/schemas/Error") != 0 &&
                    strcmp(r, "#/components/schemas/JsonRpcResponse") != 0) {
                    fprintf(stderr, "%s %s: its %s is %s, not the error shape\n", methods[i].name, path, status, r);
                    bad++;
                }
            }
        }
    }
    assert_int_equal(bad, 0);
    json_object_put(doc);
}

int main(void)
{
    return SG_RUN_TESTS("openapi_routes", NULL, NULL, NULL, NULL, test_every_route_documented,
                        test_nothing_else_documented, test_errors_documented);
}
