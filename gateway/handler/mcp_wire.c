/*
 * mcp_wire.c — the MCP transport's header values (mcp.h), apart from any
 * request so that the unit tests and a fuzzer take them alone.
 */
#include "mcp.h"

#include <openssl/evp.h>
#include <string.h>

int sg_mcp_decode_name(const char *v, size_t vlen, char *out, size_t outlen, size_t *len)
{
    static const char pre[] = "=?base64?", post[] = "?=";
    size_t np = sizeof(pre) - 1, nq = sizeof(post) - 1;

    if (outlen == 0)
        return -1;
    if (vlen >= np + nq && memcmp(v, pre, np) == 0 && memcmp(v + vlen - nq, post, nq) == 0) {
        size_t n = vlen - np - nq;
        if (n % 4 != 0 || n / 4 * 3 >= outlen || n > 1 << 20)
            return -1;
        for (size_t i = 0; i < n; i++) {
            char c = v[np + i];
            int pad = c == '=' && i + 2 >= n && (i + 1 == n || v[np + n - 1] == '=');
            if (!(pad || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
                  c == '/'))
                return -1;
        }
        int d = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)v + np, (int)n);
        if (d < 0)
            return -1;
        /* padding decodes to zero bytes: drop them */
        for (size_t i = 0; i < 2 && n >= 1 + i && v[np + n - 1 - i] == '='; i++)
            d--;
        *len = (size_t)d;
        out[d] = '\0';
        return 0;
    }
    if (vlen >= outlen)
        return -1;
    memcpy(out, v, vlen);
    out[vlen] = '\0';
    *len = vlen;
    return 0;
}

int sg_mcp_origin_listed(const char *list, const char *origin, size_t olen)
{
    for (const char *p = list; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        while (n != 0 && *p == ' ')
            p++, n--;
        while (n != 0 && p[n - 1] == ' ')
            n--;
        if (n != 0 && n == olen && memcmp(p, origin, n) == 0)
            return 1;
        if (end == NULL)
            break;
        p = end + 1;
    }
    return 0;
}

int sg_mcp_session_id_ok(const char *v, size_t len)
{
    if (len != 32)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f')))
            return 0;
    return 1;
}
