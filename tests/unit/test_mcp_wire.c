/*
 * test_mcp_wire.c — the MCP transport's header values (handler/mcp_wire.c):
 * Mcp-Name as plain text or "=?base64?...?=" (the 2026-07-28 encoding, the
 * specification's own examples), the Origin allowlist, the shape of an
 * MCP-Session-Id.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "mcp.h"
#include "sgrun.h"

static void expect_name(const char *header, const char *want)
{
    char out[64];
    size_t len = 99;
    assert_int_equal(sg_mcp_decode_name(header, strlen(header), out, sizeof(out), &len), 0);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(out, want, len);
    assert_int_equal(out[len], '\0');
}

static void expect_bad_name(const char *header, size_t outlen)
{
    char out[64];
    size_t len = 99;
    assert_int_equal(sg_mcp_decode_name(header, strlen(header), out, outlen, &len), -1);
}

static void test_mcp_name(void **state)
{
    expect_name("get_weather", "get_weather");
    expect_name("=?base64?bGlzdF9zZXNzaW9ucw==?=", "list_sessions");
    expect_name("=?base64?SGVsbG8sIOS4lueVjA==?=", "Hello, \xe4\xb8\x96\xe7\x95\x8c");
    expect_name("=?base64?IHBhZGRlZCA=?=", " padded ");
    expect_name("=?base64?bGluZTEKbGluZTI=?=", "line1\nline2");
    expect_name("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", "=?base64?literal?=");
    expect_name("=?base64?"
                "?=",
                "");                            /* an empty value */
    expect_name("=?base64?", "=?base64?");      /* not the sentinel: as given */
    expect_bad_name("=?base64?abc?=", 64);      /* not a multiple of four */
    expect_bad_name("=?base64?ab!c?=", 64);     /* not the alphabet */
    expect_bad_name("=?base64?a=bc?=", 64);     /* padding inside */
    expect_bad_name("=?base64?YQ==YQ==?=", 64); /* padding inside */
    expect_bad_name("0123456789", 10);          /* does not fit with its NUL */
    expect_bad_name("=?base64?YWJjZGVm?=", 6);  /* six bytes need seven */
}

static void test_origin_list(void **state)
{
    const char *list = " https://a.example ,http://b.example:8080,,";
    assert_true(sg_mcp_origin_listed(list, "https://a.example", 17));
    assert_true(sg_mcp_origin_listed(list, "http://b.example:8080", 21));
    assert_false(sg_mcp_origin_listed(list, "https://a.example.evil", 22));
    assert_false(sg_mcp_origin_listed(list, "https://a.exampl", 16));
    assert_false(sg_mcp_origin_listed(list, "", 0));
    assert_false(sg_mcp_origin_listed("", "https://a.example", 17));
}

static void test_session_id_shape(void **state)
{
    assert_true(sg_mcp_session_id_ok("0123456789abcdef0123456789abcdef", 32));
    assert_false(sg_mcp_session_id_ok("0123456789ABCDEF0123456789abcdef", 32));
    assert_false(sg_mcp_session_id_ok("0123456789abcdef0123456789abcde", 31));
    assert_false(sg_mcp_session_id_ok("0123456789abcdef0123456789abcde\n", 32));
}

int main(void)
{
    return SG_RUN_TESTS("mcp_wire", NULL, NULL, NULL, NULL, test_mcp_name, test_origin_list, test_session_id_shape);
}
