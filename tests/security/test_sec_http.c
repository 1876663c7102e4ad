/*
 * test_sec_http.c — the HTTP front door (issue 9, item 8).
 *
 * HTTP/2 over cleartext: an "Upgrade: h2c" request, and the HTTP/2 preface
 * sent at once (prior knowledge), are answered over HTTP/1.1 by the gateway
 * and by the proxy unless SANDGATE_HTTP2_CLEARTEXT=1 (a gateway started so
 * shows that the test sees an upgrade when there is one).
 *
 * Guessing the admin token: 50 wrong tokens in a row from one address get
 * 401 up to SANDGATE_ADMIN_FAIL_LIMIT, then 429 with Retry-After, and so
 * does the right token from that address meanwhile (no answer tells a
 * right guess); X-Forwarded-For changes nothing; the right token from
 * another address works at once, and from the same address once
 * Retry-After has passed; tenant traffic from the throttled address is
 * never affected.
 */
#include "sgsec.h"
#include "sgrun.h"

#include <curl/curl.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FAIL_LIMIT 10
#define FAIL_WINDOW_S 2

static sggw_stack_t stack;
static sggw_gateway_t *extra_gw;

static int group_setup(void **state)
{
    *state = &stack;
    char limit[64], window[64];
    snprintf(limit, sizeof(limit), "SANDGATE_ADMIN_FAIL_LIMIT=%d", FAIL_LIMIT);
    snprintf(window, sizeof(window), "SANDGATE_ADMIN_FAIL_WINDOW_S=%d", FAIL_WINDOW_S);
    const char *env[] = {limit, window, NULL};
    sggw_stack_opts_t o = {.gateway_env = env};
    return sggw_stack_start(&stack, &o);
}

static int after_test(void **state)
{
    (void)state;
    int rc = sggw_stack_after_test(&stack);
    if (extra_gw != NULL)
        sggw_gateway_stop(extra_gw);
    extra_gw = NULL;
    return rc;
}

/* ------------------------------------------------------------------------
 * h2c
 * ------------------------------------------------------------------------ */

/* Sends raw bytes to 127.0.0.1:port and returns what came back within 5 s
 * (until the server closed, or the end of a header block was seen and
 * nothing more came for 300 ms): malloc'd, NUL-terminated, *len bytes. */
static char *raw_exchange(int port, const char *req, size_t reqlen, size_t *len)
{
    int fd = sgtest_connect_loopback(port);
    SG_CHECK(fd >= 0, NULL, "connect to port %d", port);
    SG_CHECK(write(fd, req, reqlen) == (ssize_t)reqlen, NULL, "write the request");
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    double deadline = sgtest_now() + 5;
    for (;;) {
        int wait_ms = memmem(buf, n, "\r\n\r\n", 4) != NULL || n >= 9 ? 300 : 1000;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (sgtest_now() > deadline || poll(&p, 1, wait_ms) <= 0)
            break;
        ssize_t k = read(fd, buf + n, cap - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        if (n == cap)
            break;
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static const char H2C_UPGRADE[] = "GET / HTTP/1.1\r\n"
                                  "Host: 127.0.0.1\r\n"
                                  "Connection: Upgrade, HTTP2-Settings\r\n"
                                  "Upgrade: h2c\r\n"
                                  "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
                                  "\r\n";
/* the client preface, then an empty SETTINGS frame */
static const char H2_PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

static int url_port(const char *url)
{
    const char *colon = strrchr(url, ':');
    return colon != NULL ? atoi(colon + 1) : -1;
}

/* No HTTP/2 on this port: the upgrade request is answered 200 over
 * HTTP/1.1, and the preface gets no HTTP/2 frames (an HTTP/1.1 error or a
 * closed connection). */
static void expect_no_h2c(const char *url, const char *who)
{
    size_t n;
    char *reply = raw_exchange(url_port(url), H2C_UPGRADE, sizeof(H2C_UPGRADE) - 1, &n);
    SG_CHECK(n >= 12 && strncmp(reply, "HTTP/1.1 200", 12) == 0, NULL,
             "%s: an Upgrade: h2c request must get HTTP/1.1 200, not: %.60s", who, reply);
    SG_CHECK(strstr(reply, "\r\nupgrade:") == NULL && strstr(reply, "\r\nUpgrade:") == NULL, NULL,
             "%s: the reply offers an upgrade: %.300s", who, reply);
    free(reply);

    reply = raw_exchange(url_port(url), H2_PREFACE, sizeof(H2_PREFACE) - 1, &n);
    /* an HTTP/2 server answers with a SETTINGS frame: type 4 at byte 3 */
    SG_CHECK(!(n >= 9 && (unsigned char)reply[3] == 4 && strncmp(reply, "HTTP/", 5) != 0), NULL,
             "%s: the HTTP/2 preface got an HTTP/2 answer (%zu bytes)", who, n);
    SG_CHECK(n == 0 || strncmp(reply, "HTTP/1.1 ", 9) == 0, NULL, "%s: the preface got: %.60s", who, reply);
    free(reply);
}

SGGW_TEST(test_h2c_refused)
{
    expect_no_h2c(sggw_gateway_url(stack.gw), "the gateway");
    expect_no_h2c(sgtest_proxy_url(stack.proxy), "the proxy");

    /* the same request to a gateway that allows h2c is upgraded: the check
     * above does see an upgrade when there is one */
    const char *env[] = {"SANDGATE_HTTP2_CLEARTEXT=1", NULL};
    sggw_opts_t o = {.proxy_url = sgtest_proxy_url(stack.proxy), .env = env};
    extra_gw = sggw_gateway_start(&o);
    SG_CHECK(extra_gw != NULL, NULL, "a gateway with SANDGATE_HTTP2_CLEARTEXT=1 starts");
    size_t n;
    char *reply = raw_exchange(url_port(sggw_gateway_url(extra_gw)), H2C_UPGRADE, sizeof(H2C_UPGRADE) - 1, &n);
    SG_CHECK(n >= 12 && strncmp(reply, "HTTP/1.1 101", 12) == 0, NULL,
             "with SANDGATE_HTTP2_CLEARTEXT=1 the upgrade is taken: %.60s", reply);
    free(reply);

    /* and both still serve */
    sgtest_reply_t r;
    sggw_call(stack.gw, NULL, "GET", "/", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
    sgtest_call(stack.proxy, "GET", "/", NULL, &r);
    SG_ASSERT_STATUS(&r, 200);
    sgtest_reply_free(&r);
}

/* ------------------------------------------------------------------------
 * Admin token guessing
 * ------------------------------------------------------------------------ */

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    size_t len = size * n;
    double *retry = ud;
    if (len > 12 && strncasecmp(p, "retry-after:", 12) == 0)
        *retry = atof(p + 12);
    return len;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

/* GET path with a bearer token from source address src; the status, and
 * Retry-After (-1 when absent). */
static long get_from(const char *src, const char *path, const char *token, const char *extra_header, double *retry)
{
    char url[512], auth[512];
    pathf(url, sizeof(url), "%s%s", sggw_gateway_url(stack.gw), path);
    pathf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    if (extra_header != NULL)
        h = curl_slist_append(h, extra_header);
    CURL *c = curl_easy_init();
    *retry = -1;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_INTERFACE, src);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, retry);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    SG_CHECK(rc == CURLE_OK, NULL, "GET %s from %s: %s", path, src, curl_easy_strerror(rc));
    return status;
}

SGGW_TEST(test_admin_token_guessing)
{
    const char *admin = sggw_gateway_admin_token(stack.gw);
    char *tenant = sggw_new_tenant(sggw_gateway_data_dir(stack.gw), "http-tenant", NULL);
    double retry;
    char wrong[128], xff[64];

    /* 50 wrong tokens in a row from 127.0.0.1, each naming another
     * X-Forwarded-For: 401 up to the limit, 429 with Retry-After after */
    for (int i = 1; i <= 50; i++) {
        snprintf(wrong, sizeof(wrong), "%s-wrong-%d", admin, i);
        snprintf(xff, sizeof(xff), "X-Forwarded-For: 10.0.0.%d", i);
        long st = get_from("127.0.0.1", "/admin/tenants", wrong, xff, &retry);
        if (i <= FAIL_LIMIT)
            SG_CHECK(st == 401, NULL, "wrong token %d of 50: HTTP %ld, not 401", i, st);
        else
            SG_CHECK(st == 429 && retry >= 1 && retry <= FAIL_WINDOW_S + 1, NULL,
                     "wrong token %d of 50: HTTP %ld, Retry-After %g; expected 429 with Retry-After", i, st, retry);
    }
    /* the right token from the same address waits too */
    long st = get_from("127.0.0.1", "/admin/tenants", admin, NULL, &retry);
    SG_CHECK(st == 429 && retry >= 1, NULL, "the right token from the throttled address: HTTP %ld", st);
    double wait = retry;
    /* from another address it works at once */
    st = get_from("127.0.0.2", "/admin/tenants", admin, NULL, &retry);
    SG_CHECK(st == 200, NULL, "the right token from 127.0.0.2: HTTP %ld", st);
    /* tenant traffic from the throttled address is not affected */
    st = get_from("127.0.0.1", "/sessions", tenant, NULL, &retry);
    SG_CHECK(st == 200, NULL, "a tenant's request from the throttled address: HTTP %ld", st);

    /* once Retry-After has passed, the right token from 127.0.0.1 works */
    usleep((useconds_t)(wait * 1e6) + 100000);
    st = get_from("127.0.0.1", "/admin/tenants", admin, NULL, &retry);
    SG_CHECK(st == 200, NULL, "the right token after Retry-After (%g s): HTTP %ld", wait, st);
    /* and a fresh window starts: a single wrong token is a 401 again */
    st = get_from("127.0.0.1", "/admin/tenants", "wrong", NULL, &retry);
    SG_CHECK(st == 401, NULL, "one wrong token after the window: HTTP %ld", st);

    /* the service works: a fresh session runs code */
    sgsec_fresh_session_runs(stack.gw, tenant, NULL, "print('up')", 5, "up\n");
    free(tenant);
}

int main(void)
{
    return SG_RUN_TESTS("sec_http", group_setup, sggw_stack_group_teardown, NULL, after_test, test_h2c_refused,
                        test_admin_token_guessing);
}
