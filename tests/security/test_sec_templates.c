/*
 * test_sec_templates.c — disk exhaustion and theft through keep_template
 * (issue 9, item 3). A keep_template session is committed as an image at
 * close; the attacks: fill the disk through the session's work dir, its
 * /tmp or its root file system; keep more templates than the tenant's
 * quota, also with creates sent all at once; list, delete or start from
 * another tenant's template; outlive the tenant's deletion.
 *
 * Real components: a sandgate-proxy on the Docker engine (a small /sandbox
 * cap, SANDGATE_TMPFS_MB, and a template repository of its own), a private
 * redis-server, a sandgate-gateway. Each test asserts the containment and
 * that the service and a fresh session still work afterwards. The
 * teardown removes every image of the test's template repository.
 */
#include "sgsec.h"
#include "sgrun.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TMPFS_MB 16
#define CAP_BYTES ((int64_t)TMPFS_MB << 20)

static sggw_stack_t stack;
static char repo[96];

static const char *data_dir(void)
{
    return sggw_gateway_data_dir(stack.gw);
}

/* ---- Docker: the images of the test's repository ---- */

/* GET /images/{name}/json into *r (asserts that Docker answers). */
static void image_inspect(const char *name, sgtest_reply_t *r)
{
    char path[400];
    char *enc = sgtest_urlencode(name);
    pathf(path, sizeof(path), "/images/%s/json", enc);
    free(enc);
    SG_CHECK(sgtest_docker_call("GET", path, NULL, r) == 0, NULL, "Docker did not answer");
}

/* 1 if the image exists, 0 if not. */
static int image_exists(const char *name)
{
    sgtest_reply_t r;
    image_inspect(name, &r);
    int found = r.status == 200;
    SG_CHECK(r.status == 200 || r.status == 404, NULL, "image inspect: %ld", r.status);
    sgtest_reply_free(&r);
    return found;
}

static int64_t image_size(const char *name)
{
    sgtest_reply_t r;
    image_inspect(name, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    int64_t size = SG_INT(o, "Size");
    json_object_put(o);
    return size;
}

/* Removes every image of the repository (what a failed test left). */
static int remove_repo_images(void)
{
    char path[512], filter[200];
    sgtest_reply_t r;
    int n = 0;
    pathf(filter, sizeof(filter), "{\"label\":[\"sandgate.template=%s\"]}", repo);
    char *enc = sgtest_urlencode(filter);
    pathf(path, sizeof(path), "/images/json?filters=%s", enc);
    free(enc);
    if (sgtest_docker_call("GET", path, NULL, &r) != 0 || r.status != 200) {
        sgtest_reply_free(&r);
        return -1;
    }
    json_object *arr = json_tokener_parse(r.body);
    sgtest_reply_free(&r);
    for (size_t i = 0; arr != NULL && i < json_object_array_length(arr); i++) {
        json_object *id;
        if (!json_object_object_get_ex(json_object_array_get_idx(arr, i), "Id", &id))
            continue;
        pathf(path, sizeof(path), "/images/%s?force=1", json_object_get_string(id));
        if (sgtest_docker_call("DELETE", path, NULL, &r) == 0 && r.status == 200)
            n++;
        sgtest_reply_free(&r);
    }
    json_object_put(arr);
    return n;
}

/* ---- the public API ---- */

static char *keep_session(const char *tok)
{
    return sggw_create_session(stack.gw, tok, "{\"lang\":\"python\",\"keep_template\":true}", NULL);
}

static json_object *command(const char *tok, const char *sid, const char *cmd)
{
    json_object *body = json_object_new_object();
    char path[128];
    json_object_object_add(body, "command", json_object_new_string(cmd));
    pathf(path, sizeof(path), "/sessions/%s/commands", sid);
    return sggw_post_result(stack.gw, tok, path, body);
}

/* GET /templates of tok: the array (owned by the returned object). */
static json_object *list_templates(const char *tok, json_object **arr)
{
    sgtest_reply_t r;
    sggw_call(stack.gw, tok, "GET", "/templates", NULL, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    sgtest_reply_free(&r);
    *arr = SG_ARR(o, "templates");
    return o;
}

/* The template of session sid in tok's list (its name, malloc'd), or NULL;
 * *size gets its size_bytes. */
static char *template_of(const char *tok, const char *sid, int64_t *size)
{
    json_object *arr, *o = list_templates(tok, &arr);
    char *name = NULL;
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        json_object *t = json_object_array_get_idx(arr, i);
        if (strcmp(SG_STR(t, "session_id"), sid) != 0)
            continue;
        name = strdup(SG_STR(t, "name"));
        SG_CHECK(SG_INT(t, "created_at") > 1000000000LL, t, "created_at");
        if (size != NULL)
            *size = SG_INT(t, "size_bytes");
    }
    json_object_put(o);
    return name;
}

/* A keep_template session that writes note, closed: its template's name. */
static char *make_template(const char *tok, const char *note)
{
    char cmd[200];
    char *sid = keep_session(tok);
    pathf(cmd, sizeof(cmd), "echo %s > /sandbox/note.txt && echo ok", note);
    json_object *o = command(tok, sid, cmd);
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "ok\n") == 0, o, "the note was written");
    json_object_put(o);
    sggw_delete_session(stack.gw, tok, sid);
    char *name = template_of(tok, sid, NULL);
    SG_CHECK(name != NULL, NULL, "GET /templates lists no template of session %s", sid);
    SG_CHECK(image_exists(name), NULL, "the image %s exists", name);
    free(sid);
    return name;
}

static void delete_template(const char *tok, const char *name, long status, const char *code)
{
    char path[400];
    sgtest_reply_t r;
    char *enc = sgtest_urlencode(name);
    pathf(path, sizeof(path), "/templates/%s", enc);
    free(enc);
    sggw_call(stack.gw, tok, "DELETE", path, NULL, &r);
    json_object_put(status == 200 ? SG_EXPECT_JSON(&r, 200) : SG_EXPECT_ERROR(&r, status, code));
    sgtest_reply_free(&r);
}

static void create_from(const char *tok, const char *name, long status, const char *code, char **sid)
{
    char body[400];
    sgtest_reply_t r;
    pathf(body, sizeof(body), "{\"lang\":\"python\",\"image\":\"%s\"}", name);
    if (status == 200) {
        *sid = sggw_create_session(stack.gw, tok, body, NULL);
        return;
    }
    sggw_call(stack.gw, tok, "POST", "/sessions", body, &r);
    json_object_put(SG_EXPECT_ERROR(&r, status, code));
    sgtest_reply_free(&r);
}

/* The service and a fresh session still work. */
static void service_works(const char *tok)
{
    sgsec_fresh_session_runs(stack.gw, tok, NULL, "print(6 * 7)", 0, "42\n");
}

/* ------------------------------------------------------------------------
 * Fixtures
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    *state = &stack;
    char repo_kv[160];
    char *id = sgtest_new_proxy_id();
    if (id == NULL)
        return -1;
    snprintf(repo, sizeof(repo), "%s-tpl", id);
    snprintf(repo_kv, sizeof(repo_kv), "SANDGATE_TEMPLATE_REPO=%s", repo);
    const char *env[] = {"SANDGATE_POOL_SIZE=1", "SANDGATE_TMPFS_MB=16", repo_kv, NULL};
    sggw_stack_opts_t o = {.redis = true, .proxy_env = env, .proxy_id = id};
    int rc = sggw_stack_start(&stack, &o);
    free(id);
    return rc;
}

static int group_teardown(void **state)
{
    int rc = sggw_stack_end(&stack);
    if (remove_repo_images() < 0)
        rc = -1;
    return rc;
}

/* ------------------------------------------------------------------------
 * Filling the disk
 * ------------------------------------------------------------------------ */

/* A keep_template session writes past the cap into its work dir and /tmp
 * (ENOSPC) and into its root (read-only); the template it leaves is no
 * larger than the cap, and a session made from it is capped the same. */
SGGW_TEST(test_keep_template_disk_capped)
{
    char *tok = sggw_new_tenant(data_dir(), "fill", NULL);
    char *sid = keep_session(tok);

    json_object *o = command(tok, sid,
                             "echo kept > /sandbox/note.txt; dd if=/dev/zero of=/sandbox/big bs=1M count=64 2>&1; "
                             "echo rc=$?");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "No space left on device") != NULL, o, "ENOSPC in /sandbox");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "rc=0") == NULL, o, "dd failed");
    json_object_put(o);
    o = command(tok, sid, "dd if=/dev/zero of=/tmp/big bs=1M count=64 2>&1 | grep -v records; rm -f /tmp/big");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "No space left on device") != NULL, o, "ENOSPC in /tmp");
    json_object_put(o);
    o = command(tok, sid,
                "for d in / /usr /etc /opt /var /home; do echo x > $d/sg-fill 2>/dev/null && echo wrote $d; "
                "done; echo done");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "done\n") == 0, o, "nothing written to the root file system");
    json_object_put(o);
    o = command(tok, sid, "touch /sg-fill 2>&1");
    /* gVisor checks the directory's permissions first (uid 1000 may not
     * write to /): EACCES for EROFS */
    SG_CHECK(strstr(SG_STR(o, "stdout"), "Read-only file system") != NULL ||
                 (sgtest_docker_session_on_runsc(stack.proxy_id, sid) &&
                  strstr(SG_STR(o, "stdout"), "Permission denied") != NULL),
             o, "the root is read-only");
    json_object_put(o);

    sggw_delete_session(stack.gw, tok, sid);
    int64_t size = -1;
    char *name = template_of(tok, sid, &size);
    SG_CHECK(name != NULL, NULL, "the template of %s is listed", sid);
    SG_CHECK(size > (int64_t)TMPFS_MB / 2 << 20 && size <= CAP_BYTES, NULL,
             "size_bytes %lld: the filled work dir, no more than the cap %lld", (long long)size, (long long)CAP_BYTES);
    /* Docker's own count: the template adds at most the cap to its base */
    int64_t added = image_size(name) - image_size(sgtest_image("python"));
    SG_CHECK(added <= CAP_BYTES, NULL, "the template adds %lld bytes to its base, above the cap", (long long)added);

    /* a session from the template finds the work dir and the same cap */
    char *sid2 = NULL;
    create_from(tok, name, 200, NULL, &sid2);
    o = command(tok, sid2,
                "cat /sandbox/note.txt; dd if=/dev/zero of=/sandbox/more bs=1M count=64 2>&1 | grep -v records");
    SG_CHECK(strncmp(SG_STR(o, "stdout"), "kept\n", 5) == 0, o, "the template's work dir");
    SG_CHECK(strstr(SG_STR(o, "stdout"), "No space left on device") != NULL, o, "still capped");
    json_object_put(o);
    sggw_delete_session(stack.gw, tok, sid2);

    delete_template(tok, name, 200, NULL);
    SG_CHECK(!image_exists(name), NULL, "DELETE /templates removed the image");
    service_works(tok);
    free(sid2);
    free(name);
    free(sid);
    free(tok);
}

/* Files past the cap: a keep_template session's work dir is a tmpfs
 * volume, capped in inodes as every other tmpfs is (one per 4 KiB), so a
 * flood of empty files stops at ENOSPC, in a command and in the kernel. */
SGGW_TEST(test_keep_template_inode_flood_capped)
{
    char *tok = sggw_new_tenant(data_dir(), "files", NULL);
    char *sid = keep_session(tok);
    const long cap = CAP_BYTES / 4096;

    json_object *o = command(tok, sid,
                             "mkdir /sandbox/f && cd /sandbox/f && i=0; while [ $i -lt 100000 ]; do "
                             "true > $i 2>/dev/null || break; i=$((i+1)); done; echo $i; cd / && rm -rf /sandbox/f");
    long n = atol(SG_STR(o, "stdout"));
    SG_CHECK(n > cap / 2 && n <= cap, o, "the flood made %ld files: it must stop at the cap of %ld inodes", n, cap);
    json_object_put(o);
    o = sggw_execute(stack.gw, tok, sid,
                     "import errno, os\n"
                     "n, res = 0, 'NO LIMIT'\n"
                     "os.makedirs('/sandbox/g')\n"
                     "try:\n"
                     "    while n < 100000:\n"
                     "        os.close(os.open('/sandbox/g/%d' % n, os.O_CREAT | os.O_WRONLY, 0o644))\n"
                     "        n += 1\n"
                     "except OSError as e:\n"
                     "    res = errno.errorcode[e.errno]\n"
                     "import shutil; shutil.rmtree('/sandbox/g')\n"
                     "print(res, n)\n",
                     60);
    char res[32] = "";
    n = -1;
    SG_CHECK(sscanf(SG_STR(o, "stdout"), "%31s %ld", res, &n) == 2 && strcmp(res, "ENOSPC") == 0 && n > cap / 2 &&
                 n <= cap,
             o, "the kernel's flood must stop with ENOSPC at the cap of %ld inodes", cap);
    json_object_put(o);

    sggw_delete_session(stack.gw, tok, sid);
    int64_t size = -1;
    char *name = template_of(tok, sid, &size);
    SG_CHECK(name != NULL, NULL, "the template of %s is listed", sid);
    delete_template(tok, name, 200, NULL);
    service_works(tok);
    free(name);
    free(sid);
    free(tok);
}

/* ------------------------------------------------------------------------
 * The quota
 * ------------------------------------------------------------------------ */

#define PARALLEL 6

/* max_templates counts kept templates and live keep_template sessions,
 * exactly, also when the creates arrive all at once. */
SGGW_TEST(test_max_templates)
{
    const char *q[] = {"max_templates=2", NULL};
    char *tok = sggw_new_tenant(data_dir(), "hoarder", q);
    const char *body = "{\"lang\":\"python\",\"keep_template\":true}";
    char url[256];
    sggw_par_req_t reqs[PARALLEL];
    char *sids[PARALLEL] = {0};
    int ok = 0, refused = 0;

    pathf(url, sizeof(url), "%s/sessions", sggw_gateway_url(stack.gw));
    memset(reqs, 0, sizeof(reqs));
    for (int i = 0; i < PARALLEL; i++) {
        reqs[i].method = "POST";
        reqs[i].url = url;
        reqs[i].token = tok;
        reqs[i].body = body;
        reqs[i].body_len = strlen(body);
        reqs[i].content_type = "application/json";
        reqs[i].timeout_s = 60;
    }
    SG_CHECK(sggw_parallel(reqs, PARALLEL) == 0, NULL, "the batch ran");
    for (int i = 0; i < PARALLEL; i++) {
        if (reqs[i].reply.status == 200) {
            json_object *o = SG_JSON(&reqs[i].reply);
            sids[ok++] = strdup(SG_STR(o, "session_id"));
            json_object_put(o);
        } else {
            json_object_put(SG_EXPECT_ERROR(&reqs[i].reply, 429, "quota_exceeded"));
            refused++;
        }
        sgtest_reply_free(&reqs[i].reply);
    }
    SG_CHECK(ok == 2 && refused == PARALLEL - 2, NULL, "%d created, %d refused; the quota is 2", ok, refused);

    /* closed, they are two templates: still full */
    for (int i = 0; i < ok; i++)
        sggw_delete_session(stack.gw, tok, sids[i]);
    json_object *arr, *o = list_templates(tok, &arr);
    SG_CHECK(json_object_array_length(arr) == 2, o, "two templates listed");
    char *first = strdup(SG_STR(json_object_array_get_idx(arr, 0), "name"));
    json_object_put(o);
    sgtest_reply_t r;
    sggw_call(stack.gw, tok, "POST", "/sessions", body, &r);
    json_object_put(SG_EXPECT_ERROR(&r, 429, "quota_exceeded"));
    sgtest_reply_free(&r);
    /* other sessions are not templates */
    service_works(tok);

    /* one deleted: room for one more */
    delete_template(tok, first, 200, NULL);
    SG_CHECK(!image_exists(first), NULL, "the image is gone");
    char *sid = keep_session(tok);
    sggw_delete_session(stack.gw, tok, sid);
    o = list_templates(tok, &arr);
    SG_CHECK(json_object_array_length(arr) == 2, o, "two templates again");
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        delete_template(tok, SG_STR(json_object_array_get_idx(arr, i), "name"), 200, NULL);
    json_object_put(o);
    for (int i = 0; i < ok; i++)
        free(sids[i]);
    free(sid);
    free(first);
    free(tok);
}

/* ------------------------------------------------------------------------
 * Another tenant's template
 * ------------------------------------------------------------------------ */

SGGW_TEST(test_other_tenants_template)
{
    char *tok_a = sggw_new_tenant(data_dir(), "owner-a", NULL);
    char *tok_b = sggw_new_tenant(data_dir(), "thief-b", NULL);
    char *name = make_template(tok_a, "secret-of-a");
    char *sid = NULL, *enc;
    json_object *arr, *o;

    /* B: not listed, not deletable, not startable — as if it did not exist */
    o = list_templates(tok_b, &arr);
    SG_CHECK(json_object_array_length(arr) == 0, o, "B lists no template");
    json_object_put(o);
    delete_template(tok_b, name, 404, "no_such_template");
    enc = sgtest_urlencode(name);
    delete_template(tok_b, enc, 404, "no_such_template"); /* encoded twice: still unknown */
    free(enc);
    create_from(tok_b, name, 404, "no_such_template", NULL);
    create_from(tok_b, sgtest_image("python"), 404, "no_such_template", NULL);
    SG_CHECK(image_exists(name), NULL, "B's attempts left A's template in place");
    /* the admin sees whose it is */
    o = SGSEC_ADMIN_GET(stack.gw, "/admin/templates?tenant=%s", "owner-a");
    SG_CHECK(json_object_array_length(SG_ARR(o, "templates")) == 1, o, "the admin lists A's template");
    json_object_put(o);

    /* A: listed, startable; in use it cannot be removed; then it can */
    o = list_templates(tok_a, &arr);
    SG_CHECK(json_object_array_length(arr) == 1 && strcmp(SG_STR(json_object_array_get_idx(arr, 0), "name"), name) == 0,
             o, "A lists its template");
    json_object_put(o);
    create_from(tok_a, name, 200, NULL, &sid);
    o = command(tok_a, sid, "cat /sandbox/note.txt");
    SG_CHECK(strcmp(SG_STR(o, "stdout"), "secret-of-a\n") == 0, o, "A's session from its template");
    json_object_put(o);
    delete_template(tok_a, name, 409, "template_in_use");
    sggw_delete_session(stack.gw, tok_a, sid);
    delete_template(tok_a, name, 200, NULL);
    SG_CHECK(!image_exists(name), NULL, "the image is gone after DELETE /templates");
    delete_template(tok_a, name, 404, "no_such_template");
    create_from(tok_a, name, 404, "no_such_template", NULL);
    service_works(tok_b);
    free(sid);
    free(name);
    free(tok_a);
    free(tok_b);
}

/* ------------------------------------------------------------------------
 * Deleting the tenant
 * ------------------------------------------------------------------------ */

static void wait_image_gone(const char *name, double timeout_s)
{
    double deadline = sgtest_now() + timeout_s;
    while (image_exists(name)) {
        SG_CHECK(sgtest_now() < deadline, NULL, "image %s still exists %.0f s after the tenant's deletion", name,
                 timeout_s);
        usleep(100000);
    }
}

SGGW_TEST(test_tenant_delete_removes_templates)
{
    char *tok = sggw_new_tenant(data_dir(), "leaving", NULL);
    char *t1 = make_template(tok, "one");
    char *t2 = make_template(tok, "two");
    /* a keep_template session still live: its template is made at the
     * close the deletion does, and removed too */
    char *live = keep_session(tok);
    sgtest_reply_t r;

    sggw_admin_call(stack.gw, "DELETE", "/admin/tenants/leaving", NULL, &r);
    json_object_put(SG_EXPECT_JSON(&r, 200));
    sgtest_reply_free(&r);
    SG_CHECK(!image_exists(t1) && !image_exists(t2), NULL, "the tenant's templates are gone");
    char live_name[200];
    pathf(live_name, sizeof(live_name), "%s:%s", repo, live);
    SG_CHECK(!image_exists(live_name), NULL, "the live session's template is gone");
    char *cid = sgtest_docker_session_container(stack.proxy_id, live);
    SG_CHECK(cid == NULL, NULL, "the live session's container is gone");
    sggw_call(stack.gw, tok, "GET", "/templates", NULL, &r);
    SG_ASSERT_STATUS(&r, 401);
    sgtest_reply_free(&r);
    json_object *o = SGSEC_ADMIN_GET(stack.gw, "/admin/templates");
    json_object *arr = SG_ARR(o, "templates");
    for (size_t i = 0; i < json_object_array_length(arr); i++) {
        const char *n = SG_STR(json_object_array_get_idx(arr, i), "name");
        SG_CHECK(strcmp(n, t1) != 0 && strcmp(n, t2) != 0 && strcmp(n, live_name) != 0, o, "%s left on record", n);
    }
    json_object_put(o);
    sggw_admin_call(stack.gw, "GET", "/admin/tenants/leaving", NULL, &r);
    json_object_put(SG_EXPECT_ERROR(&r, 404, NULL));
    sgtest_reply_free(&r);

    /* sandgate-admin marks; the gateway finishes within ten reaper rounds */
    char *tok2 = sggw_new_tenant(data_dir(), "leaving-cli", NULL);
    char *t3 = make_template(tok2, "three");
    char *out = NULL;
    SG_CHECK(sggw_admin(data_dir(), &out, "tenant", "delete", "leaving-cli", NULL) == 0, NULL, "tenant delete");
    free(out);
    sggw_call(stack.gw, tok2, "GET", "/templates", NULL, &r);
    SG_ASSERT_STATUS(&r, 401); /* locked out at once */
    sgtest_reply_free(&r);
    wait_image_gone(t3, 20);
    double deadline = sgtest_now() + 10;
    for (;;) {
        sggw_admin_call(stack.gw, "GET", "/admin/tenants/leaving-cli", NULL, &r);
        long st = r.status;
        sgtest_reply_free(&r);
        if (st == 404)
            break;
        SG_CHECK(sgtest_now() < deadline, NULL, "the tenant marked by sandgate-admin is still there");
        usleep(100000);
    }

    char *tok3 = sggw_new_tenant(data_dir(), "staying", NULL);
    service_works(tok3);
    free(cid);
    free(live);
    free(t1);
    free(t2);
    free(t3);
    free(tok);
    free(tok2);
    free(tok3);
}

int main(void)
{
    return SG_RUN_TESTS("sec_templates", group_setup, group_teardown, NULL, sggw_stack_teardown,
                        test_keep_template_disk_capped, test_keep_template_inode_flood_capped, test_max_templates,
                        test_other_tenants_template, test_tenant_delete_removes_templates);
}
