#include "fields.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sg_gw_number_field(json_object *body, const char *field, double above, int whole, double cap, double *out,
                       const char **code, char *detail, size_t detail_len)
{
    json_object *v;
    double d;

    *code = "bad_field";
    if (!json_object_object_get_ex(body, field, &v) || v == NULL)
        return 0;
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)) {
        snprintf(detail, detail_len, "field \"%s\" must be a number", field);
        return -1;
    }
    d = json_object_get_double(v);
    if (!isfinite(d)) {
        snprintf(detail, detail_len, "field \"%s\" must be a finite number", field);
        return -1;
    }
    if (whole && (d < 1 || d != floor(d))) {
        snprintf(detail, detail_len, "field \"%s\" must be a whole number of at least 1", field);
        return -1;
    }
    if (!whole && !(d > above)) {
        snprintf(detail, detail_len, "field \"%s\" must be more than %g", field, above);
        return -1;
    }
    if (d > cap) {
        *code = "above_cap";
        snprintf(detail, detail_len, "field \"%s\" is %g, above this tenant's cap of %g", field, d, cap);
        return -1;
    }
    *out = d;
    return 1;
}

int sg_gw_number_text(const char *s, size_t len, double min, double max, double *out)
{
    char buf[64], *end;
    double d;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!(buf[0] == '-' || buf[0] == '.' || (buf[0] >= '0' && buf[0] <= '9')))
        return -1; /* no "nan", "inf", spaces or a leading "+" */
    for (size_t i = 0; i < len; i++)
        if (strchr("0123456789.eE+-", buf[i]) == NULL || buf[i] == '\0')
            return -1; /* decimal only: strtod would also take hex ("0x10") */
    errno = 0;
    d = strtod(buf, &end);
    if (*end != '\0' || errno != 0 || !isfinite(d) || d < min || d > max)
        return -1;
    *out = d;
    return 0;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int sg_gw_template_name(h2o_iovec_t seg, char *out, size_t outlen)
{
    size_t o = 0;
    for (size_t i = 0; i < seg.len; i++) {
        int c = (unsigned char)seg.base[i];
        if (c == '%') {
            int hi = i + 2 < seg.len ? hexval(seg.base[i + 1]) : -1, lo = i + 2 < seg.len ? hexval(seg.base[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0 || o + 1 >= outlen)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return o != 0 ? 0 : -1;
}
