/*
 * test_docker_setup.c — how the proxy reads Docker's own settings
 * (docker.h, sg_docker_setup): DOCKER_HOST's forms and the TLS decision of
 * DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, which follow Docker's client.
 * The TLS handshake itself is tests/integration/test_proxy_tls_engine.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "docker.h"

static char err[512];

static int setup(const char *host, const char *verify, const char *certs)
{
    err[0] = '\0';
    return sg_docker_setup(host, "", verify, certs, err, sizeof(err));
}

static void test_unix_socket(void **state)
{
    (void)state;
    assert_int_equal(setup(NULL, NULL, NULL), 0);
    assert_string_equal(sg_docker_transport(), "unix socket");
    assert_int_equal(setup("unix:///run/other.sock", NULL, NULL), 0);
    assert_string_equal(sg_docker_transport(), "unix socket");
    /* as Docker: TLS settings do not apply to a socket (and its files are
     * not even read) */
    assert_int_equal(setup("unix:///var/run/docker.sock", "1", "/nonexistent"), 0);
    assert_string_equal(sg_docker_transport(), "unix socket");
}

static void test_plain_tcp(void **state)
{
    (void)state;
    assert_int_equal(setup("tcp://10.0.0.5:2375", NULL, ""), 0);
    assert_string_equal(sg_docker_transport(), "tcp, without TLS");
    assert_int_equal(setup("tcp://docker.internal", "", NULL), 0);
    assert_int_equal(setup("tcp://[fd00::5]:2375/", NULL, NULL), 0);
    assert_string_equal(sg_docker_transport(), "tcp, without TLS");
}

static void test_bad_hosts(void **state)
{
    const char *bad[] = {"http://h:1",      "tcp://",     "tcp://:2376",  "tcp://h:", "tcp://h:12ab",
                         "tcp://h:1234567", "tcp://[::1", "tcp://[::1]x", "ssh://h",  "h:2375"};
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(setup(bad[i], NULL, NULL), -1);
        assert_true(strstr(err, "DOCKER_HOST") != NULL);
    }
}

/* A certificate directory means TLS, DOCKER_TLS_VERIFY alone too (with
 * ~/.docker): the files are read at setup, a missing one named. */
static void test_tls_files_read_at_setup(void **state)
{
    (void)state;
    assert_int_equal(setup("tcp://10.0.0.5:2376", NULL, "/nonexistent/certs"), -1);
    assert_non_null(strstr(err, "cannot read /nonexistent/certs/cert.pem"));
    assert_int_equal(setup("tcp://10.0.0.5:2376", "1", "/nonexistent/certs"), -1);
    assert_non_null(strstr(err, "/nonexistent/certs/"));
    setenv("HOME", "/nonexistent/home", 1);
    assert_int_equal(setup("tcp://10.0.0.5", "1", NULL), -1);
    assert_non_null(strstr(err, "cannot read /nonexistent/home/.docker/cert.pem"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unix_socket),
        cmocka_unit_test(test_plain_tcp),
        cmocka_unit_test(test_bad_hosts),
        cmocka_unit_test(test_tls_files_read_at_setup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sg_docker_cleanup();
    return rc;
}
