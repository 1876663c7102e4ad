/*
 * test_libraries.c — what the proxy takes from a sandbox's library check
 * (libraries.h, sg_lib_match_missing): only the names the request gave,
 * matched whole; every other line is ignored. The check runs inside the
 * tenant's sandbox, so its output is the tenant's to write.
 * Pure function: no I/O, no daemons.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "libraries.h"
#include "sgrun.h"

static size_t match(char *const *names, size_t n, const char *out, unsigned char *missing)
{
    memset(missing, 0, n);
    return sg_lib_match_missing(names, n, out, strlen(out), missing);
}

static void test_only_requested_names(void **state)
{
    char *names[] = {"tabulate", "numpy"};
    unsigned char m[2];
    assert_int_equal(match(names, 2, "numpy\n", m), 1);
    assert_int_equal(m[0], 0);
    assert_int_equal(m[1], 1);
    /* no trailing newline */
    assert_int_equal(match(names, 2, "tabulate", m), 1);
    assert_int_equal(m[0], 1);
    assert_int_equal(m[1], 0);
    assert_int_equal(match(names, 2, "", m), 0);
}

static void test_attacker_lines_ignored(void **state)
{
    char *names[] = {"numpy"};
    unsigned char m[1];
    /* a direct reference, an unrequested name, near misses of a requested one */
    const char *out = "tabulate @ http://127.0.0.1:1/evil.whl\n"
                      "requests\n"
                      "numpy @ http://127.0.0.1:1/numpy-99-py3-none-any.whl\n"
                      "numpy==99\n"
                      " numpy\n"
                      "numpy \n"
                      "numpy\r\n"
                      "NUMPY\n"
                      "numpyx\n"
                      "num\n"
                      "--index-url=http://evil/\n";
    assert_int_equal(match(names, 1, out, m), 0);
    assert_int_equal(m[0], 0);
    /* a NUL cannot end a name early */
    static const char nul[] = "numpy\0evil\n";
    memset(m, 0, 1);
    assert_int_equal(sg_lib_match_missing(names, 1, nul, sizeof(nul) - 1, m), 0);
}

static void test_repeated(void **state)
{
    char *names[] = {"six", "six", "numpy"};
    unsigned char m[3];
    /* a name given twice is installed once; a line repeated counts once */
    assert_int_equal(match(names, 3, "six\nsix\nsix\n", m), 1);
    assert_int_equal(m[0], 1);
    assert_int_equal(m[1], 0);
    assert_int_equal(m[2], 0);
}

int main(void)
{
    return SG_RUN_TESTS("libraries", NULL, NULL, NULL, NULL, test_only_requested_names, test_attacker_lines_ignored,
                        test_repeated);
}
