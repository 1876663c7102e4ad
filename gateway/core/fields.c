#include "fields.h"
#include "http.h"

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

int sg_gw_template_name(h2o_iovec_t seg, char *out, size_t outlen)
{
    return sg_http_decode_segment(seg, out, outlen);
}
