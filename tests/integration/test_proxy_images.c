/*
 * test_proxy_images.c — sessions on other images than the language's own:
 * a custom image the operator's allow-list admits (SANDGATE_IMAGE_ALLOWLIST;
 * the agent is mounted in, hardening unchanged, code runs one-shot), and a
 * template kept by keep_template (llm-sandbox's semantics: the container is
 * committed at close, and a later session can start from that image).
 *
 * One proxy for the group; its teardown checks that nothing of it is left:
 * containers, the agent volume, the template images this test made.
 */
#include "sgtest.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUSTOM_IMAGE "debian:bookworm-slim" /* made by deploy/base-image.sh; never pulled */

static sgtest_suite_t suite;
static char *templates[8];
static size_t ntemplates;

static int group_setup(void **state)
{
    const char *env[] = {"SANDGATE_POOL_SIZE=0", "SANDGATE_IMAGE_ALLOWLIST=" CUSTOM_IMAGE ",sgtest-allowed/*", NULL};
    return sgtest_suite_start(&suite, env);
}

/* The agent volume the proxy uses for custom images: from a container it
 * made for one (null when none is found). */
static char *agent_volume_of(const char *cid)
{
    long status = 0;
    json_object *c = sgtest_docker_inspect(cid, &status);
    char *name = NULL;
    json_object *mounts = c != NULL ? sgtest_jpath(c, "Mounts") : NULL;
    for (size_t i = 0; mounts != NULL && i < json_object_array_length(mounts); i++) {
        json_object *m = json_object_array_get_idx(mounts, i), *dst, *src;
        if (json_object_object_get_ex(m, "Destination", &dst) &&
            strcmp(json_object_get_string(dst), "/opt/sandgate/bin") == 0 && json_object_object_get_ex(m, "Name", &src))
            name = strdup(json_object_get_string(src));
    }
    json_object_put(c);
    return name;
}

static char *agent_volume;

static int group_teardown(void **state)
{
    int rc = sgtest_suite_stop(&suite, true);
    for (size_t i = 0; i < ntemplates; i++) {
        char path[512];
        sgtest_reply_t r;
        snprintf(path, sizeof(path), "/images/%s?force=1", templates[i]);
        sgtest_docker_call("DELETE", path, NULL, &r);
        if (r.status != 200) {
            fprintf(stderr, "teardown: cannot remove template image %s (%ld)\n", templates[i], r.status);
            rc = -1;
        }
        sgtest_reply_free(&r);
        free(templates[i]);
    }
    if (agent_volume != NULL) {
        /* the proxy removes it when it stops (nobody else uses it here) */
        char path[256];
        sgtest_reply_t r;
        snprintf(path, sizeof(path), "/volumes/%s", agent_volume);
        sgtest_docker_call("GET", path, NULL, &r);
        if (r.status != 404) {
            fprintf(stderr, "teardown: agent volume %s outlived the proxy (%ld)\n", agent_volume, r.status);
            rc = -1;
        }
        sgtest_reply_free(&r);
        free(agent_volume);
    }
    return rc;
}

static char *create_session(const char *body)
{
    json_object *o = SG_CALL_JSON(suite.proxy, "POST", "/sessions", body, 200);
    char *sid = strdup(SG_STR(o, "session_id"));
    json_object_put(o);
    return sid;
}

static json_object *run(const char *sid, const char *route, const char *body)
{
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s/%s", sid, route);
    return SG_CALL_JSON(suite.proxy, "POST", path, body, 200);
}

static json_object *delete_session(const char *sid)
{
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s", sid);
    json_object *o = SG_CALL_JSON(suite.proxy, "DELETE", path, NULL, 200);
    SG_CHECK(strcmp(SG_STR(o, "status"), "closed") == 0, o, "status");
    return o;
}

static void test_custom_image(void **state)
{
    char *sid = create_session("{\"lang\":\"python\",\"image\":\"" CUSTOM_IMAGE "\"}");
    char *cid = sgtest_docker_session_container(suite.proxy_id, sid);
    SG_CHECK(cid != NULL, NULL, "no container for session %s", sid);

    /* the image is the custom one, with its own tools (and no python) */
    json_object *o =
        run(sid, "commands", "{\"command\":\"cat /etc/debian_version; id -u; command -v python3 || echo none\"}");
    SG_CHECK(SG_INT(o, "exit_code") == 0, o, "exit_code");
    const char *out = SG_STR(o, "stdout");
    SG_CHECK(strstr(out, "\n1000\nnone\n") != NULL, o, "a non-root user and no python3 in the custom image");
    SG_CHECK(strcmp(SG_STR(o, "state"), "none") == 0, o, "state");
    json_object_put(o);
    o = run(sid, "execute", "{\"code\":\"print(1)\"}");
    SG_CHECK(SG_INT(o, "exit_code") == 127, o, "python code in an image without python: the shell's 127");
    SG_CHECK(strstr(SG_STR(o, "stderr"), "python3") != NULL, o, "stderr names python3");
    json_object_put(o);

    /* hardening unchanged; the agent is mounted read-only */
    long status = 0;
    json_object *c = sgtest_docker_inspect(cid, &status);
    SG_CHECK(c != NULL && status == 200, c, "inspect %s", cid);
    SG_ASSERT_HARDENED(c);
    SG_CHECK(strcmp(json_object_get_string(sgtest_jpath(c, "Config.Image")), CUSTOM_IMAGE) == 0, c, "Config.Image");
    json_object_put(c);
    agent_volume = agent_volume_of(cid);
    SG_CHECK(agent_volume != NULL, NULL, "the agent volume is mounted at /opt/sandgate/bin");

    /* no library installs in a custom image */
    char path[256];
    snprintf(path, sizeof(path), "/sessions/%s/libraries", sid);
    SG_CALL_ERROR(suite.proxy, "POST", path, "{\"package\":\"requests\"}", 400, "bad_library");

    json_object_put(delete_session(sid));
    SG_CHECK(sgtest_docker_wait_gone(cid, 10, NULL) == 0, NULL, "container %s gone after delete", cid);
    free(cid);
    free(sid);
}

static void test_image_not_allowed(void **state)
{
    const char *bodies[] = {
        "{\"lang\":\"python\",\"image\":\"alpine:latest\"}",
        "{\"lang\":\"python\",\"image\":\"debian:bookworm\"}",          /* not the exact name */
        "{\"lang\":\"python\",\"image\":\"sgtest-allowedX/thing:1\"}",  /* the prefix is sgtest-allowed/ */
        "{\"lang\":\"python\",\"image\":\"sandgate-template:nosuch\"}", /* a template name that does not exist */
    };
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        SG_CALL_ERROR(suite.proxy, "POST", "/sessions", bodies[i], 400, i < 3 ? "image_not_allowed" : "unknown_image");
    }
    SG_CHECK(sgtest_docker_count(suite.proxy_id) == 0, NULL, "no container for a refused image");
}

/* keep_template: the container is committed at close; a new session can
 * start from the template and finds what the first one left. */
static void test_keep_template(void **state)
{
    char *sid = create_session("{\"lang\":\"python\",\"keep_template\":true}");
    json_object *o =
        run(sid, "commands", "{\"command\":\"echo kept > /sandbox/note.txt && pip --version >/dev/null; echo ok\"}");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "ok\n") == 0, o, "stdout");
    json_object_put(o);
    o = delete_session(sid);
    const char *tmpl = SG_STR(o, "template_image");
    SG_CHECK(strstr(tmpl, sid) != NULL, o, "the template is named after the session");
    templates[ntemplates++] = strdup(tmpl);

    char body[400];
    snprintf(body, sizeof(body), "{\"lang\":\"python\",\"image\":\"%s\"}", tmpl);
    json_object_put(o);
    char *sid2 = create_session(body);
    o = run(sid2, "commands", "{\"command\":\"cat /sandbox/note.txt\"}");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "kept\n") == 0, o, "the file the first session wrote");
    json_object_put(o);
    /* a template is a sandgate image: its interpreter keeps state */
    json_object_put(run(sid2, "execute", "{\"code\":\"x = 6\"}"));
    o = run(sid2, "execute", "{\"code\":\"print(x * 7)\"}");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "42\n") == 0, o, "stdout");
    SG_CHECK(strcmp(SG_STR(o, "state"), "kept") == 0, o, "state");
    json_object_put(o);
    json_object_put(delete_session(sid2));
    free(sid2);
    free(sid);
}

int main(void)
{
    return SG_RUN_TESTS("proxy_images", group_setup, group_teardown, NULL, NULL, test_custom_image,
                        test_image_not_allowed, test_keep_template);
}
