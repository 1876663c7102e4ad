/*
 * fuzz_json_body — request bodies as the proxy takes them: the JSON parse
 * both tiers share (sg_json_parse_object, common/json.c), then the proxy's
 * validation (proxy/api/validate.c) of POST /sessions, POST
 * /sessions/{id}/execute, POST /sessions/{id}/commands and POST /execute,
 * and of POST /sessions/{id}/libraries (sg_lib_check, proxy/libraries/libraries.c).
 *
 * Input: one byte choosing the route, then the body. Invariants: a parsed
 * body is an object; whatever validation accepts is inside the policy
 * (finite numbers in their ranges, network only where allowed, a known
 * language, an image name without NUL, at most SG_MAX_LIBRARIES valid
 * library names, no NUL in a command, a package name and version made of
 * their allowed characters only); whatever it refuses is a 400 with a code
 * and a sentence that fits its buffer.
 */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "json.h"
#include "lang.h"
#include "libraries.h"
#include "policy_fixture.h"
#include "validate.h"

static const sg_policy_t policy = SGTEST_POLICY(2);

static void check_err(const sg_verr_t *e)
{
    CHECK(e->status == 400);
    CHECK(e->code != NULL && e->code[0] != '\0');
    CHECK(memchr(e->detail, '\0', sizeof(e->detail)) != NULL && e->detail[0] != '\0');
}

static void check_library_list(json_object *libs, const char *pm)
{
    if (libs == NULL)
        return;
    size_t n = json_object_array_length(libs);
    CHECK(n >= 1 && n <= SG_MAX_LIBRARIES);
    for (size_t i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx(libs, i);
        const char *s = json_object_get_string(v);
        size_t len = (size_t)json_object_get_string_len(v);
        CHECK(len >= 1 && len <= 214 && memchr(s, '\0', len) == NULL);
        CHECK(sg_validate_library_name(s, len, pm) || sg_validate_library_name(s, len, "npm"));
        for (size_t j = 0; j < len; j++)
            CHECK(isalnum((unsigned char)s[j]) || strchr("._-@/", s[j]) != NULL);
    }
}

static void route_create(json_object *body)
{
    sg_create_req_t cr;
    sg_verr_t e;

    memset(&e, 0, sizeof(e));
    if (sg_validate_create(body, &policy, &cr, &e) != 0) {
        check_err(&e);
        return;
    }
    CHECK(cr.lang != NULL && sg_lang_find(cr.lang->name, strlen(cr.lang->name)) == cr.lang);
    CHECK(isfinite(cr.limits.timeout_s) && cr.limits.timeout_s > 0 && cr.limits.timeout_s <= policy.max_timeout_s);
    CHECK(cr.limits.memory_mb >= 16 && cr.limits.memory_mb <= policy.max_memory_mb);
    CHECK(isfinite(cr.limits.cpus) && cr.limits.cpus >= 0.01 && cr.limits.cpus <= policy.max_cpus);
    CHECK(!cr.limits.network || policy.allow_network);
    CHECK(cr.limits.pids == policy.defaults.pids && cr.limits.tmpfs_mb == policy.defaults.tmpfs_mb);
    CHECK(cr.keep_template == 0 || cr.keep_template == 1);
    /* a runtime is absent, or one of the two static names; runsc has no network */
    CHECK(cr.runtime == NULL || strcmp(cr.runtime, "runc") == 0 || strcmp(cr.runtime, "runsc") == 0);
    CHECK(cr.runtime == NULL || !cr.limits.network || strcmp(cr.runtime, "runc") == 0);
    if (cr.image != NULL) {
        size_t n = strlen(cr.image);
        CHECK(n >= 1 && n <= 255);
    }
}

static void route_exec(json_object *body, const char *field, int want_lang)
{
    sg_exec_req_t ex;
    sg_verr_t e;
    const sg_lang_t *python = sg_lang_find("python", 6);

    memset(&e, 0, sizeof(e));
    if (sg_validate_exec(body, field, want_lang, 20, &policy, &ex, &e) != 0) {
        check_err(&e);
        return;
    }
    CHECK(ex.code != NULL && ex.code[ex.code_len] == '\0');
    if (strcmp(field, "command") == 0)
        CHECK(strlen(ex.code) == ex.code_len);
    CHECK(isfinite(ex.timeout_s) && ex.timeout_s > 0 && ex.timeout_s <= policy.max_timeout_s);
    CHECK(want_lang ? ex.lang != NULL : ex.lang == NULL);
    CHECK(ex.runtime == NULL || (want_lang && (strcmp(ex.runtime, "runc") == 0 || strcmp(ex.runtime, "runsc") == 0)));
    check_library_list(ex.libraries, ex.lang != NULL ? ex.lang->package_manager : "pip");
    if (ex.lang != NULL && ex.lang->package_manager == NULL)
        CHECK(ex.libraries == NULL);
    /* the session routes check the list against the session's language too */
    if (!want_lang && sg_validate_libraries_for(python, ex.libraries, &e) != 0)
        check_err(&e);
}

static void route_library(json_object *body, uint8_t which)
{
    const char *name = NULL, *version = NULL;
    char err[512];
    const sg_lang_t *lang = sg_lang_at(which % sg_lang_count());

    if (sg_json_get_str(body, "package", &name, NULL, err, sizeof(err)) != 1 ||
        sg_json_get_str(body, "version", &version, NULL, err, sizeof(err)) < 0)
        return;
    err[0] = '\0';
    if (sg_lib_check(lang, name, version, err, sizeof(err)) != 0) {
        CHECK(err[0] != '\0');
        return;
    }
    CHECK(lang->package_manager != NULL);
    for (const char *p = name; *p; p++)
        CHECK(isalnum((unsigned char)*p) || strchr("._-@/", *p) != NULL);
    for (const char *p = version != NULL ? version : ""; *p; p++)
        CHECK(isalnum((unsigned char)*p) || strchr(".+!*_-", *p) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t route = fuzz_u8(&in);
    char err[256];
    json_object *body;

    err[0] = '\0';
    body = sg_json_parse_object((const char *)in.p, in.len, err, sizeof(err));
    if (body == NULL) {
        CHECK(err[0] != '\0');
        return 0;
    }
    CHECK(json_object_is_type(body, json_type_object));
    switch (route % 5) {
    case 0:
        route_create(body);
        break;
    case 1:
        route_exec(body, "code", 0);
        break;
    case 2:
        route_exec(body, "command", 0);
        break;
    case 3:
        route_exec(body, "code", 1);
        break;
    case 4:
        route_library(body, route / 5);
        break;
    }
    json_object_put(body);
    return 0;
}
