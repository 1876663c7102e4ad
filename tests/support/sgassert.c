/*
 * sgassert.c — assertions on replies and JSON (see sgtest.h). On a failure
 * they print what was expected, the reply, and the tail of every live
 * proxy's log, then fail the cmocka test.
 */
#include "sgtest_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

static void print_reply(const sgtest_reply_t *r)
{
    if (r->status == 0) {
        fprintf(stderr, "  transfer failed after %.3f s: %s\n", r->seconds, r->error);
        return;
    }
    const size_t show = 4096;
    fprintf(stderr, "  reply: HTTP %ld after %.3f s, %zu body bytes:\n  %.*s%s\n", r->status, r->seconds, r->body_len,
            (int)(r->body_len < show ? r->body_len : show), r->body ? r->body : "", r->body_len > show ? " [...]" : "");
}

static void fail_here(const char *file, int line) __attribute__((noreturn));
static void fail_here(const char *file, int line)
{
    sgtest__live_print(SGTEST__PROXY, 40);
    fflush(stderr);
    _fail(file, line);
    abort(); /* _fail longjmps back into cmocka */
}

static void print_json(json_object *o)
{
    if (o != NULL)
        fprintf(stderr, "  in: %s\n",
                json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

void sgtest__fail(json_object *o, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    print_json(o);
    fail_here(file, line);
}

void sgtest__check_failed(json_object *o, const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: check failed: %s\n  ", file, line, cond);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    print_json(o);
    fail_here(file, line);
}

void sgtest__assert_status(const sgtest_reply_t *r, long status, const char *file, int line)
{
    if (r->status == status)
        return;
    fprintf(stderr, "%s:%d: expected HTTP %ld\n", file, line, status);
    print_reply(r);
    fail_here(file, line);
}

bool sgtest_utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p;
        size_t n;
        unsigned min;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if ((size_t)(end - p) <= n)
            return false;
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            c = (c << 6) | (p[i] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        p += n + 1;
    }
    return true;
}

json_object *sgtest__json(const sgtest_reply_t *r, const char *file, int line)
{
    if (r->status == 0 || r->body == NULL) {
        fprintf(stderr, "%s:%d: expected a JSON reply\n", file, line);
        print_reply(r);
        fail_here(file, line);
    }
    if (!sgtest_utf8_valid(r->body, r->body_len)) {
        fprintf(stderr, "%s:%d: reply body is not valid UTF-8\n", file, line);
        print_reply(r);
        fail_here(file, line);
    }
    json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(tok, r->body, (int)r->body_len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    while (o != NULL && used < r->body_len && strchr(" \t\r\n", r->body[used]) != NULL)
        used++;
    if (o == NULL || err != json_tokener_success || used != r->body_len) {
        fprintf(stderr, "%s:%d: reply body is not one JSON value (%s, parsed %zu of %zu)\n", file, line,
                json_tokener_error_desc(err), used, r->body_len);
        print_reply(r);
        json_object_put(o);
        fail_here(file, line);
    }
    return o;
}

json_object *sgtest__expect_json(const sgtest_reply_t *r, long status, const char *file, int line)
{
    sgtest__assert_status(r, status, file, line);
    json_object *o = sgtest__json(r, file, line);
    char *ct = sgtest_reply_header(r, "Content-Type");
    bool ok = ct != NULL && strncasecmp(ct, "application/json", 16) == 0;
    if (!ok) {
        fprintf(stderr, "%s:%d: JSON reply with Content-Type %s\n", file, line, ct ? ct : "(none)");
        free(ct);
        print_reply(r);
        fail_here(file, line);
    }
    free(ct);
    return o;
}

static json_object *field(json_object *o, const char *key, json_type type, const char *file, int line)
{
    json_object *v = NULL;
    if (o == NULL || !json_object_is_type(o, json_type_object))
        sgtest__fail(o, file, line, "expected a JSON object with field \"%s\"", key);
    if (!json_object_object_get_ex(o, key, &v))
        sgtest__fail(o, file, line, "missing field \"%s\"", key);
    if (!json_object_is_type(v, type))
        sgtest__fail(o, file, line, "field \"%s\" is %s, expected %s", key, json_type_to_name(json_object_get_type(v)),
                     json_type_to_name(type));
    return v;
}

const char *sgtest__get_str(json_object *o, const char *key, const char *file, int line)
{
    return json_object_get_string(field(o, key, json_type_string, file, line));
}

int64_t sgtest__get_int(json_object *o, const char *key, const char *file, int line)
{
    return json_object_get_int64(field(o, key, json_type_int, file, line));
}

bool sgtest__get_bool(json_object *o, const char *key, const char *file, int line)
{
    return json_object_get_boolean(field(o, key, json_type_boolean, file, line));
}

double sgtest__get_double(json_object *o, const char *key, const char *file, int line)
{
    json_object *v = NULL;
    if (o == NULL || !json_object_object_get_ex(o, key, &v))
        sgtest__fail(o, file, line, "missing field \"%s\"", key);
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        sgtest__fail(o, file, line, "field \"%s\" is not a number", key);
    return json_object_get_double(v);
}

json_object *sgtest__get_obj(json_object *o, const char *key, json_type type, const char *file, int line)
{
    return field(o, key, type, file, line);
}

json_object *sgtest__expect_error(const sgtest_reply_t *r, long status, const char *code, const char *file, int line)
{
    json_object *o = sgtest__expect_json(r, status, file, line);
    const char *detail = sgtest__get_str(o, "detail", file, line);
    const char *got = sgtest__get_str(o, "code", file, line);
    if (*detail == '\0')
        sgtest__fail(o, file, line, "error \"detail\" is empty");
    if (*got == '\0')
        sgtest__fail(o, file, line, "error \"code\" is empty");
    if (code != NULL && strcmp(got, code) != 0)
        sgtest__fail(o, file, line, "error code \"%s\", expected \"%s\"", got, code);
    return o;
}

json_object *sgtest__take_json(sgtest_reply_t *r, long status, const char *file, int line)
{
    json_object *o = sgtest__expect_json(r, status, file, line);
    sgtest_reply_free(r);
    return o;
}

void sgtest__take_error(sgtest_reply_t *r, long status, const char *code, const char *file, int line)
{
    json_object_put(sgtest__expect_error(r, status, code, file, line));
    sgtest_reply_free(r);
}

char *sgtest__take_id(json_object *o, const char *key, json_object **keep, const char *file, int line)
{
    const char *id = sgtest__get_str(o, key, file, line);
    if (*id == '\0')
        sgtest__fail(o, file, line, "empty %s", key);
    char *copy = strdup(id);
    if (keep != NULL)
        *keep = o;
    else
        json_object_put(o);
    return copy;
}

char *sgtest_urlencode(const char *s)
{
    sgtest__curl_ready();
    char *e = curl_easy_escape(NULL, s, 0);
    char *copy = e ? strdup(e) : NULL;
    curl_free(e);
    return copy;
}

bool sgtest_json_array_has_string(json_object *arr, const char *s)
{
    if (arr == NULL || !json_object_is_type(arr, json_type_array))
        return false;
    size_t n = json_object_array_length(arr);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        if (json_object_is_type(e, json_type_string) && strcmp(json_object_get_string(e), s) == 0)
            return true;
    }
    return false;
}

void pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < len);
}

void sgtest__check_result_shape(json_object *r, const char *file, int line)
{
    sgtest__get_str(r, "stdout", file, line);
    sgtest__get_str(r, "stderr", file, line);
    int64_t exit_code = sgtest__get_int(r, "exit_code", file, line);
    double t = sgtest__get_double(r, "execution_time", file, line);
    bool success = sgtest__get_bool(r, "success", file, line);
    bool timed_out = sgtest__get_bool(r, "timed_out", file, line);
    bool truncated = sgtest__get_bool(r, "truncated", file, line);
    const char *reason = sgtest__get_str(r, "reason", file, line);
    const char *st = sgtest__get_str(r, "state", file, line);
    sgtest__get_str(r, "stage", file, line);
    if (t < 0)
        sgtest__check_failed(r, file, line, "execution_time >= 0", "execution_time is negative");
    if (sgtest__get_double(r, "wall_time", file, line) < 0)
        sgtest__check_failed(r, file, line, "wall_time >= 0", "wall_time is negative");
    if (success != (exit_code == 0 && !timed_out && !truncated && strcmp(reason, "exited") == 0))
        sgtest__check_failed(r, file, line, "success", "success must be exit_code == 0 and not cut short");
    if (timed_out != (strcmp(reason, "timeout") == 0))
        sgtest__check_failed(r, file, line, "timed_out", "timed_out must match reason \"timeout\"");
    if (strcmp(st, "kept") != 0 && strcmp(st, "new") != 0 && strcmp(st, "lost") != 0 && strcmp(st, "none") != 0)
        sgtest__check_failed(r, file, line, "state", "state must be one of kept, new, lost, none");
}

void sgtest_expect_stdout(json_object *r, const char *want)
{
    if (strcmp(SG_STR(r, "stdout"), want) != 0)
        SG_FAIL(r, "stdout differs: expected \"%s\"", want);
}

void sgtest_expect_success(json_object *r)
{
    if (!SG_BOOL(r, "success") || SG_INT(r, "exit_code") != 0)
        SG_FAIL(r, "expected a successful run");
}

void sgtest_expect_ok(json_object *r, const char *want_stdout)
{
    sgtest_expect_stdout(r, want_stdout);
    sgtest_expect_success(r);
    json_object_put(r);
}
