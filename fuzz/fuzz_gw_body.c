/*
 * fuzz_gw_body — request bodies as the gateway takes them before it
 * forwards them: the shared JSON parse (sg_json_parse_object), the
 * tenant's caps on the numbers (sg_gw_number_field, gateway/core/fields.c, with
 * the arguments gateway/handler/sessions.c and executions.c pass for POST /sessions and the execution
 * routes) and the tenant's language list (sg_tenant_lang_allowed,
 * gateway/store/tenant.c); and the admin API's numbers given as text
 * (sg_gw_number_text).
 *
 * Input: one byte choosing the route and the caps, then the body.
 * Invariants: an accepted number is finite, above its floor (a whole
 * number of at least 1 for memory_mb) and at most the tenant's cap, so the
 * conversions api.c makes afterwards are defined (UBSan checks them here:
 * the same casts); a refusal is "bad_field" or "above_cap" with a sentence
 * naming the field; the language check agrees with a plain reading of the
 * list; a number read from text is finite, in its range, and written in
 * decimal only.
 */
#include <math.h>
#include <string.h>

#include "fields.h"
#include "fuzz.h"
#include "json.h"
#include "store.h"

/* The bounds sandgate-admin and the admin API put on a tenant's caps
 * (gateway/store/tenant.c), the upper ones and the defaults. */
static const double caps[2][3] = {{86400, 1048576, 1024}, {300, 1024, 2}};

static int number(json_object *body, const char *field, int whole, double cap, double def, double *out)
{
    const char *code = NULL;
    char detail[256];
    double d = -12345;

    detail[0] = '\0';
    int r = sg_gw_number_field(body, field, 0, whole, cap, &d, &code, detail, sizeof(detail));
    if (r < 0) {
        CHECK(code != NULL && (strcmp(code, "bad_field") == 0 || strcmp(code, "above_cap") == 0));
        CHECK(strstr(detail, field) != NULL);
        return -1;
    }
    if (r == 0) {
        CHECK(d == -12345); /* untouched */
        *out = def < cap ? def : cap;
        return 0;
    }
    CHECK(isfinite(d) && d <= cap);
    if (whole)
        CHECK(d >= 1 && d == floor(d));
    else
        CHECK(d > 0);
    *out = d;
    return 0;
}

static void check_lang(json_object *body, uint8_t how)
{
    static const char *const lists[] = {"*", "python", "python,javascript", "go,python,c++"};
    sg_tenant_t t;
    json_object *v;
    const char *lang = "python";
    char buf[32];

    memset(&t, 0, sizeof(t));
    snprintf(t.allowed_langs, sizeof(t.allowed_langs), "%s", lists[how % 4]);
    if (json_object_object_get_ex(body, "lang", &v) && v != NULL) {
        if (!json_object_is_type(v, json_type_string))
            return;
        lang = json_object_get_string(v);
    }
    snprintf(buf, sizeof(buf), "%s", lang); /* as api.c keeps it */
    size_t n = strlen(buf);
    int allowed = sg_tenant_lang_allowed(&t, buf, n);
    /* the reference: "*", or one of the comma-separated names exactly */
    int want = strcmp(t.allowed_langs, "*") == 0;
    for (const char *p = t.allowed_langs; !want && *p;) {
        const char *e = strchr(p, ',');
        size_t k = e != NULL ? (size_t)(e - p) : strlen(p);
        want = n != 0 && k == n && memcmp(p, buf, n) == 0;
        p = e != NULL ? e + 1 : p + k;
    }
    CHECK(allowed == want);
}

static void check_text(const char *s, size_t len)
{
    double d = -1;
    if (sg_gw_number_text(s, len, -1e12, 1e12, &d) != 0)
        return;
    CHECK(isfinite(d) && d >= -1e12 && d <= 1e12);
    for (size_t i = 0; i < len; i++)
        CHECK(strchr("0123456789.eE+-", s[i]) != NULL);
    CHECK(len != 0 && s[0] != '+');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t how = fuzz_u8(&in);
    const double *cap = caps[how & 1];
    char err[256];
    double d;

    if (in.len < 64) {
        char *copy = malloc(in.len != 0 ? in.len : 1);
        memcpy(copy, in.p, in.len);
        check_text(copy, in.len);
        free(copy);
    }
    json_object *body = sg_json_parse_object((const char *)in.p, in.len, err, sizeof(err));
    if (body == NULL)
        return 0;
    check_lang(body, how >> 2);
    if (how & 2) {
        /* POST /sessions: timeout, memory_mb, cpus, then the casts api.c makes */
        if (number(body, "timeout", 0, cap[0], 30, &d) == 0) {
            json_object_put(json_object_new_double(d));
            if (number(body, "memory_mb", 1, cap[1], 512, &d) == 0) {
                int64_t mb = (int64_t)d;
                CHECK(mb >= 1 && mb <= (int64_t)cap[1]);
                if (number(body, "cpus", 0, cap[2], 1, &d) == 0)
                    CHECK(d > 0 && d <= cap[2]);
            }
        }
    } else {
        /* the execution routes: the timeout becomes the upstream's budget */
        if (number(body, "timeout", 0, cap[0], 30, &d) == 0) {
            long timeout_ms = (long)(d * 1000) + 5000;
            CHECK(timeout_ms > 5000 - 1 && timeout_ms <= (long)(cap[0] * 1000) + 5000);
        }
    }
    json_object_put(body);
    return 0;
}
