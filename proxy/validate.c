#include "validate.h"
#include "json.h"
#include "runtime.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int get_timeout(json_object *body, double def, double max, double *out, sg_verr_t *e)
{
    double v;
    int r = sg_json_get_num(body, "timeout", &v, e->detail, sizeof(e->detail));
    if (r < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"timeout\" must be a number of seconds");
    if (r == 0) {
        *out = def;
        return 0;
    }
    if (!(v > 0) || v > max)
        return sg_http_err_set(e, 400, "bad_field", "field \"timeout\" must be more than 0 and at most %g seconds",
                               max);
    *out = v;
    return 0;
}

static int get_lang(json_object *body, const sg_lang_t **out, sg_verr_t *e)
{
    const char *s = "python";
    size_t len = 6;
    if (sg_json_get_str(body, "lang", &s, &len, e->detail, sizeof(e->detail)) < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"lang\" must be a string");
    *out = sg_lang_find(s, len);
    if (*out == NULL)
        return sg_http_err_set(e, 400, "unknown_language", "unknown language \"%.*s\"; known: %s",
                               (int)(len > 64 ? 64 : len), s, sg_lang_names());
    return 0;
}

/* "runtime": absent or null is the proxy's default (NULL), else runc or runsc. */
static int get_runtime(json_object *body, const char **out, sg_verr_t *e)
{
    json_object *v;
    *out = NULL;
    if (!json_object_object_get_ex(body, "runtime", &v) || v == NULL)
        return 0;
    if (json_object_is_type(v, json_type_string))
        *out = sg_runtime_find(json_object_get_string(v), (size_t)json_object_get_string_len(v));
    if (*out == NULL)
        return sg_http_err_set(e, 400, "invalid_runtime",
                               "field \"runtime\" must be \"runc\" or \"runsc\" (or null: "
                               "the proxy's default)");
    return 0;
}

int sg_validate_create(json_object *body, const sg_policy_t *pol, sg_create_req_t *out, sg_verr_t *e)
{
    double num;
    int r, b;
    size_t len;

    memset(out, 0, sizeof(*out));
    out->limits = pol->defaults;
    if (get_lang(body, &out->lang, e) != 0)
        return -1;
    if ((r = sg_json_get_bool(body, "keep_template", &b, e->detail, sizeof(e->detail))) < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"keep_template\" must be true or false");
    out->keep_template = r == 1 && b;
    if (get_timeout(body, pol->defaults.timeout_s, pol->max_timeout_s, &out->limits.timeout_s, e) != 0)
        return -1;
    if ((r = sg_json_get_num(body, "memory_mb", &num, e->detail, sizeof(e->detail))) < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"memory_mb\" must be a number");
    if (r == 1) {
        if (num != floor(num) || num < 16 || num > (double)pol->max_memory_mb)
            return sg_http_err_set(e, 400, "bad_field", "field \"memory_mb\" must be a whole number from 16 to %ld",
                                   pol->max_memory_mb);
        out->limits.memory_mb = (long)num;
    }
    if ((r = sg_json_get_num(body, "cpus", &num, e->detail, sizeof(e->detail))) < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"cpus\" must be a number");
    if (r == 1) {
        if (!(num >= 0.01) || num > pol->max_cpus)
            return sg_http_err_set(e, 400, "bad_field", "field \"cpus\" must be from 0.01 to %g", pol->max_cpus);
        out->limits.cpus = num;
    }
    if ((r = sg_json_get_bool(body, "network", &b, e->detail, sizeof(e->detail))) < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"network\" must be true or false");
    if (r == 1) {
        if (b && !pol->allow_network)
            return sg_http_err_set(e, 400, "network_not_allowed",
                                   "field \"network\": this proxy does not allow network access");
        out->limits.network = b;
    }
    if ((r = sg_json_get_str(body, "image", &out->image, &len, e->detail, sizeof(e->detail))) < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"image\" must be a string");
    if (r == 1 && (len == 0 || len > 255 || strlen(out->image) != len))
        return sg_http_err_set(e, 400, "bad_field", "field \"image\" must be an image name of 1 to 255 characters");
    if ((r = sg_json_get_str(body, "owner", &out->owner, &len, e->detail, sizeof(e->detail))) < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"owner\" must be a string");
    if (r == 1 && !sg_validate_owner(out->owner, len))
        return sg_http_err_set(e, 400, "bad_field", "field \"owner\" must be 1 to 64 of [A-Za-z0-9._-]");
    if (get_runtime(body, &out->runtime, e) != 0)
        return -1;
    if (out->limits.network && out->runtime != NULL && strcmp(out->runtime, SG_RUNTIME_RUNSC) == 0)
        return sg_http_err_set(e, 400, "invalid_runtime",
                               "field \"runtime\": runsc sandboxes have no network; a session with \"network\": "
                               "true runs on runc");
    return 0;
}

int sg_validate_owner(const char *owner, size_t len)
{
    if (len == 0 || len > 64)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)owner[i]) && owner[i] != '.' && owner[i] != '_' && owner[i] != '-')
            return 0;
    return 1;
}

int sg_validate_library_name(const char *name, size_t len, const char *package_manager)
{
    size_t i = 0;
    if (len == 0 || len > 214)
        return 0;
    if (strcmp(package_manager, "npm") == 0 && name[0] == '@') {
        const char *slash = memchr(name, '/', len);
        if (slash == NULL || slash == name + 1)
            return 0;
        for (i = 1; name + i < slash; i++) {
            char c = name[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'))
                return 0;
        }
        i++; /* past the slash */
        if (i >= len)
            return 0;
    }
    for (size_t j = i; j < len; j++) {
        char c = name[j];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (alnum)
            continue;
        if ((c == '.' || c == '_' || c == '-') && j != i && j != len - 1)
            continue;
        return 0;
    }
    return 1;
}

int sg_validate_exec(json_object *body, const char *field, int want_lang, double session_timeout_s,
                     const sg_policy_t *pol, sg_exec_req_t *out, sg_verr_t *e)
{
    int r;

    memset(out, 0, sizeof(*out));
    if (want_lang && (get_lang(body, &out->lang, e) != 0 || get_runtime(body, &out->runtime, e) != 0))
        return -1;
    r = sg_json_get_str(body, field, &out->code, &out->code_len, e->detail, sizeof(e->detail));
    if (r < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"%s\" must be a string", field);
    if (r == 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"%s\" is required", field);
    if (memchr(out->code, '\0', out->code_len) != NULL && strcmp(field, "command") == 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"command\" must not contain NUL characters");
    if (get_timeout(body, session_timeout_s, pol->max_timeout_s, &out->timeout_s, e) != 0)
        return -1;
    r = sg_json_get_str_array(body, "libraries", &out->libraries, e->detail, sizeof(e->detail));
    if (r < 0)
        return sg_http_err_set(e, 400, "bad_field", "field \"libraries\" must be an array of strings");
    if (r == 1) {
        size_t n = json_object_array_length(out->libraries);
        const char *pm = out->lang != NULL ? out->lang->package_manager : "pip";
        if (n > 0 && out->lang != NULL && sg_validate_libraries_for(out->lang, out->libraries, e) != 0)
            return -1;
        if (n > SG_MAX_LIBRARIES)
            return sg_http_err_set(e, 400, "bad_field", "field \"libraries\" may name at most %d libraries",
                                   SG_MAX_LIBRARIES);
        for (size_t i = 0; i < n; i++) {
            json_object *v = json_object_array_get_idx(out->libraries, i);
            const char *s = json_object_get_string(v);
            size_t len = (size_t)json_object_get_string_len(v);
            /* the session's package manager is checked again by the caller when it differs */
            if (!sg_validate_library_name(s, len, pm) && !sg_validate_library_name(s, len, "npm"))
                return sg_http_err_set(e, 400, "bad_field", "field \"libraries\": \"%.*s\" is not a valid package name",
                                       (int)(len > 100 ? 100 : len), s);
        }
        if (n == 0)
            out->libraries = NULL;
    }
    return 0;
}

int sg_validate_libraries_for(const sg_lang_t *lang, json_object *libraries, sg_verr_t *e)
{
    if (libraries != NULL && json_object_array_length(libraries) > 0 && lang->package_manager == NULL)
        return sg_http_err_set(e, 400, "bad_field", "libraries are not supported for %s (field \"libraries\")",
                               lang->name);
    return 0;
}

int sg_validate_path(const char *p, size_t len, char *out, size_t outlen, sg_verr_t *e)
{
    static const char root[] = "/sandbox";
    size_t rl = sizeof(root) - 1;

    if (p == NULL || len == 0)
        return sg_http_err_set(e, 400, "bad_path", "query parameter \"path\" is required");
    if (len > SG_MAX_PATH || len + 1 > outlen)
        return sg_http_err_set(e, 400, "bad_path", "path is longer than %d bytes", SG_MAX_PATH);
    if (memchr(p, '\0', len) != NULL)
        return sg_http_err_set(e, 400, "bad_path", "path must not contain NUL bytes");
    if (p[0] == '/') {
        if (len <= rl + 1 || memcmp(p, root, rl) != 0 || p[rl] != '/')
            return sg_http_err_set(e, 400, "bad_path", "path must be inside the sandbox working directory /sandbox");
        p += rl + 1;
        len -= rl + 1;
    }
    /* every component: not empty-at-end, not ".." */
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || p[i] == '/') {
            size_t clen = i - start;
            if (clen == 2 && p[start] == '.' && p[start + 1] == '.')
                return sg_http_err_set(e, 400, "bad_path", "path must not contain \"..\"");
            if (clen == 0 && i != len)
                return sg_http_err_set(e, 400, "bad_path", "path must not contain empty components (\"//\")");
            start = i + 1;
        }
    }
    if (p[len - 1] == '/' || (len == 1 && p[0] == '.'))
        return sg_http_err_set(e, 400, "bad_path", "path must name a file, not a directory");
    memcpy(out, p, len);
    out[len] = '\0';
    return 0;
}

int sg_shell_quote(const char *s, size_t len, char *out, size_t outlen)
{
    size_t o = 0;
#define PUT(c)                                                                                                         \
    do {                                                                                                               \
        if (o + 1 >= outlen)                                                                                           \
            return -1;                                                                                                 \
        out[o++] = (c);                                                                                                \
    } while (0)
    PUT('\'');
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\'') {
            PUT('\'');
            PUT('\\');
            PUT('\'');
            PUT('\'');
        } else {
            PUT(s[i]);
        }
    }
    PUT('\'');
#undef PUT
    out[o] = '\0';
    return 0;
}
