/* sglibs.c — see sglibs.h. */
#include "sglibs.h"
#include "sgtest_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------
 * Bytes: a growable buffer, CRC-32, digests, base64
 * ------------------------------------------------------------------------ */

typedef struct {
    unsigned char *p;
    size_t len, cap;
} bytes_t;

static void b_put(bytes_t *b, const void *d, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        assert_non_null(p);
        b->p = p;
        b->cap = cap;
    }
    if (n != 0)
        memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void b_u8(bytes_t *b, unsigned v)
{
    unsigned char c = (unsigned char)v;
    b_put(b, &c, 1);
}

static void b_u16(bytes_t *b, unsigned v)
{
    unsigned char c[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    b_put(b, c, 2);
}

static void b_u32(bytes_t *b, uint32_t v)
{
    unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    b_put(b, c, 4);
}

static void b_free(bytes_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static uint32_t crc32_of(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* md must hold EVP_MAX_MD_SIZE bytes; returns the digest's length. */
static unsigned digest(const EVP_MD *type, const void *d, size_t n, unsigned char *md)
{
    unsigned len = 0;
    assert_int_equal(EVP_Digest(d, n, md, &len, type, NULL), 1);
    return len;
}

static void hex_of(const unsigned char *md, unsigned n, char *out)
{
    for (unsigned i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

/* urlsafe: '-' '_' and no padding (wheel RECORD); else standard, padded. */
static void base64_of(const unsigned char *d, size_t n, bool urlsafe, char *out)
{
    const char *a = urlsafe ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                            : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        if (i + 1 < n)
            out[o++] = a[v >> 6 & 63];
        else if (!urlsafe)
            out[o++] = '=';
        if (i + 2 < n)
            out[o++] = a[v & 63];
        else if (!urlsafe)
            out[o++] = '=';
    }
    out[o] = '\0';
}

/* ------------------------------------------------------------------------
 * Archives: a stored ZIP (wheels), a ustar tar, gzip with stored blocks
 * ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *data;
} entry_t;

#define DOS_DATE_1980_01_01 0x21

/* The fields a local file header and a central directory header share,
 * from "version needed" to the extra field's length: a stored entry of dl
 * bytes named by nl bytes, dated 1980-01-01 00:00. */
static void zip_entry_fields(bytes_t *out, uint32_t crc, size_t dl, size_t nl)
{
    b_u16(out, 20); /* version needed */
    b_u16(out, 0);  /* flags */
    b_u16(out, 0);  /* stored */
    b_u16(out, 0);  /* time */
    b_u16(out, DOS_DATE_1980_01_01);
    b_u32(out, crc);
    b_u32(out, (uint32_t)dl);
    b_u32(out, (uint32_t)dl);
    b_u16(out, (unsigned)nl);
    b_u16(out, 0); /* extra */
}

static void zip_build(const entry_t *e, size_t n, bytes_t *out)
{
    uint32_t crc[16], off[16];
    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(e[i].name), dl = strlen(e[i].data);
        crc[i] = crc32_of(e[i].data, dl);
        off[i] = (uint32_t)out->len;
        b_u32(out, 0x04034b50); /* local file header */
        zip_entry_fields(out, crc[i], dl, nl);
        b_put(out, e[i].name, nl);
        b_put(out, e[i].data, dl);
    }
    size_t cd = out->len;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(e[i].name), dl = strlen(e[i].data);
        b_u32(out, 0x02014b50);  /* central directory header */
        b_u16(out, 3 << 8 | 20); /* made by: Unix */
        zip_entry_fields(out, crc[i], dl, nl);
        b_u16(out, 0); /* comment */
        b_u16(out, 0); /* disk */
        b_u16(out, 0); /* internal attributes */
        b_u32(out, (uint32_t)0100644 << 16);
        b_u32(out, off[i]);
        b_put(out, e[i].name, nl);
    }
    size_t cd_size = out->len - cd;
    b_u32(out, 0x06054b50); /* end of central directory */
    b_u16(out, 0);
    b_u16(out, 0);
    b_u16(out, (unsigned)n);
    b_u16(out, (unsigned)n);
    b_u32(out, (uint32_t)cd_size);
    b_u32(out, (uint32_t)cd);
    b_u16(out, 0);
}

static void tar_add(bytes_t *out, const char *name, const char *data)
{
    unsigned char h[512] = {0};
    size_t dl = strlen(data);
    assert_true(strlen(name) < 100);
    memcpy(h, name, strlen(name));
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0001750", 8);
    memcpy(h + 116, "0001750", 8);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)dl);
    snprintf((char *)h + 136, 12, "%011o", 1700000000u);
    memset(h + 148, ' ', 8);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof(h); i++)
        sum += h[i];
    snprintf((char *)h + 148, 7, "%06o", sum);
    h[155] = ' ';
    b_put(out, h, sizeof(h));
    b_put(out, data, dl);
    static const unsigned char zero[512];
    if (dl % 512 != 0)
        b_put(out, zero, 512 - dl % 512);
}

static void tar_end(bytes_t *out)
{
    static const unsigned char zero[1024];
    b_put(out, zero, sizeof(zero));
}

static void gzip_stored(const bytes_t *in, bytes_t *out)
{
    static const unsigned char hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    b_put(out, hdr, sizeof(hdr));
    size_t off = 0;
    do {
        size_t n = in->len - off > 65535 ? 65535 : in->len - off;
        b_u8(out, off + n == in->len ? 1 : 0); /* BFINAL, BTYPE 00 (stored) */
        b_u16(out, (unsigned)n);
        b_u16(out, (unsigned)~n & 0xFFFF);
        b_put(out, in->p + off, n);
        off += n;
    } while (off < in->len);
    b_u32(out, crc32_of(in->p, in->len));
    b_u32(out, (uint32_t)in->len);
}

/* ------------------------------------------------------------------------
 * Files
 * ------------------------------------------------------------------------ */

void sglibs_mkdirs(const char *path)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1; *s != '\0'; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                SG_FAIL(NULL, "mkdir %s: %s", p, strerror(errno));
            *s = '/';
        }
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        SG_FAIL(NULL, "mkdir %s: %s", p, strerror(errno));
}

void sglibs_write(const char *root, const char *rel, const void *data, size_t n)
{
    char path[1024], dir[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    snprintf(dir, sizeof(dir), "%s", path);
    *strrchr(dir, '/') = '\0';
    sglibs_mkdirs(dir);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        SG_FAIL(NULL, "fopen %s: %s", path, strerror(errno));
    SG_CHECK(fwrite(data, 1, n, f) == n && fclose(f) == 0, NULL, "cannot write %s", path);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

void sglibs_rm_tree(const char *path)
{
    if (path[0] != '\0')
        nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
/* ------------------------------------------------------------------------
 * The packages
 * ------------------------------------------------------------------------ */

void sglibs_wheel(const char *root, const char *dist, const char *version, const char *build, const char *init_py,
                  char *file, size_t cap)
{
    char init[2048], metadata[512], wheel[256], record[2048];
    char dist_info[160], init_name[160], meta_name[200], wheel_name[200], record_name[200];
    unsigned char md[EVP_MAX_MD_SIZE];
    char b64[128];

    if (init_py != NULL)
        snprintf(init, sizeof(init), "%s", init_py);
    else
        snprintf(init, sizeof(init),
                 "\"\"\"sandgate's test package (built by tests/support/sglibs.c).\"\"\"\n"
                 "VALUE = 42\nVERSION = \"%s\"\n\n\ndef double(x):\n    return 2 * x\n",
                 version);
    snprintf(metadata, sizeof(metadata),
             "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: sandgate test package\n", dist, version);
    snprintf(wheel, sizeof(wheel),
             "Wheel-Version: 1.0\nGenerator: sgtest\nRoot-Is-Purelib: true\n%s%s%sTag: py3-none-any\n",
             build != NULL ? "Build: " : "", build != NULL ? build : "", build != NULL ? "\n" : "");
    snprintf(dist_info, sizeof(dist_info), "%s-%s.dist-info", dist, version);
    snprintf(init_name, sizeof(init_name), "%s/__init__.py", dist);
    snprintf(meta_name, sizeof(meta_name), "%s/METADATA", dist_info);
    snprintf(wheel_name, sizeof(wheel_name), "%s/WHEEL", dist_info);
    snprintf(record_name, sizeof(record_name), "%s/RECORD", dist_info);

    size_t rl = 0;
    const entry_t hashed[] = {{init_name, init}, {meta_name, metadata}, {wheel_name, wheel}};
    for (size_t i = 0; i < 3; i++) {
        unsigned n = digest(EVP_sha256(), hashed[i].data, strlen(hashed[i].data), md);
        base64_of(md, n, true, b64);
        rl += (size_t)snprintf(record + rl, sizeof(record) - rl, "%s,sha256=%s,%zu\n", hashed[i].name, b64,
                               strlen(hashed[i].data));
    }
    snprintf(record + rl, sizeof(record) - rl, "%s,,\n", record_name);

    const entry_t entries[] = {{init_name, init}, {meta_name, metadata}, {wheel_name, wheel}, {record_name, record}};
    bytes_t zip = {0};
    zip_build(entries, 4, &zip);
    snprintf(file, cap, "%s-%s%s%s-py3-none-any.whl", dist, version, build != NULL ? "-" : "",
             build != NULL ? build : "");
    char rel[400];
    snprintf(rel, sizeof(rel), "packages/%s", file);
    sglibs_write(root, rel, zip.p, zip.len);
    b_free(&zip);
}

void sglibs_simple_index(const char *root, int port, const char *norm, char *const *files, size_t n)
{
    char html[8192], rel[300], path[1024];
    unsigned char md[EVP_MAX_MD_SIZE];
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    size_t o = (size_t)snprintf(html, sizeof(html), "<!DOCTYPE html>\n<html><body>\n");
    for (size_t i = 0; i < n; i++) {
        size_t len;
        snprintf(path, sizeof(path), "%s/packages/%s", root, files[i]);
        char *whl = sgtest__slurp(path, &len);
        SG_CHECK(whl != NULL, NULL, "cannot read back %s", path);
        hex_of(md, digest(EVP_sha256(), whl, len, md), hex);
        free(whl);
        o += (size_t)snprintf(html + o, sizeof(html) - o,
                              "<a href=\"http://127.0.0.1:%d/packages/%s#sha256=%s\">%s</a><br/>\n", port, files[i],
                              hex, files[i]);
        SG_CHECK(o < sizeof(html), NULL, "the index page of %s is too long", norm);
    }
    snprintf(html + o, sizeof(html) - o, "</body></html>\n");
    snprintf(rel, sizeof(rel), "simple/%s/index.html", norm);
    sglibs_write(root, rel, html, strlen(html));
    snprintf(html, sizeof(html), "<!DOCTYPE html>\n<html><body>\n<a href=\"%s/\">%s</a>\n</body></html>\n", norm, norm);
    sglibs_write(root, "simple/index.html", html, strlen(html));
}

void sglibs_npm_package(const char *root, int port, const char *name, const char *version, const char *index_js,
                        char *tgz, size_t cap)
{
    char pkg_json[512], rel[400];
    snprintf(pkg_json, sizeof(pkg_json),
             "{\n  \"name\": \"%s\",\n  \"version\": \"%s\",\n  \"description\": \"sandgate test package\",\n"
             "  \"main\": \"index.js\",\n  \"license\": \"MIT\"\n}\n",
             name, version);
    bytes_t tar = {0}, gz = {0};
    tar_add(&tar, "package/package.json", pkg_json);
    tar_add(&tar, "package/index.js", index_js);
    tar_end(&tar);
    gzip_stored(&tar, &gz);
    b_free(&tar);
    snprintf(tgz, cap, "%s-%s.tgz", name, version);
    snprintf(rel, sizeof(rel), "%s/-/%s", name, tgz);
    sglibs_write(root, rel, gz.p, gz.len);

    unsigned char md[EVP_MAX_MD_SIZE];
    char sha1[2 * EVP_MAX_MD_SIZE + 1], b64[200], integrity[220], url[400];
    hex_of(md, digest(EVP_sha1(), gz.p, gz.len, md), sha1);
    base64_of(md, digest(EVP_sha512(), gz.p, gz.len, md), false, b64);
    snprintf(integrity, sizeof(integrity), "sha512-%s", b64);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/%s/-/%s", port, name, tgz);
    b_free(&gz);

    json_object *doc = json_object_new_object(), *tags = json_object_new_object();
    json_object *versions = json_object_new_object(), *v = json_object_new_object();
    json_object *dist = json_object_new_object();
    json_object_object_add(doc, "name", json_object_new_string(name));
    json_object_object_add(tags, "latest", json_object_new_string(version));
    json_object_object_add(doc, "dist-tags", tags);
    json_object_object_add(v, "name", json_object_new_string(name));
    json_object_object_add(v, "version", json_object_new_string(version));
    json_object_object_add(v, "main", json_object_new_string("index.js"));
    json_object_object_add(dist, "tarball", json_object_new_string(url));
    json_object_object_add(dist, "shasum", json_object_new_string(sha1));
    json_object_object_add(dist, "integrity", json_object_new_string(integrity));
    json_object_object_add(v, "dist", dist);
    json_object_object_add(versions, version, v);
    json_object_object_add(doc, "versions", versions);
    const char *s = json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PLAIN);
    snprintf(rel, sizeof(rel), "%s/index.json", name);
    sglibs_write(root, rel, s, strlen(s));
    json_object_put(doc);
}

/* ------------------------------------------------------------------------
 * Docker: installers created (from the event log), volumes
 * ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------
 * Docker: installer containers created (from the event log), volumes
 * ------------------------------------------------------------------------ */

sglibs_wall_t sglibs_wall_now(void)
{
    sglibs_wall_t t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t;
}

int sglibs_installers_created_since(const char *pid, sglibs_wall_t since)
{
    sglibs_wall_t until = sglibs_wall_now();
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", pid);
    json_object *f = json_object_new_object(), *a;
    a = json_object_new_array();
    json_object_array_add(a, json_object_new_string("container"));
    json_object_object_add(f, "type", a);
    a = json_object_new_array();
    json_object_array_add(a, json_object_new_string("create"));
    json_object_object_add(f, "event", a);
    a = json_object_new_array();
    json_object_array_add(a, json_object_new_string(l1));
    json_object_array_add(a, json_object_new_string("sandgate.kind=installer"));
    json_object_object_add(f, "label", a);
    char *enc = sgtest_urlencode(json_object_to_json_string_ext(f, JSON_C_TO_STRING_PLAIN));
    json_object_put(f);
    char path[1024];
    snprintf(path, sizeof(path), "/events?since=%lld.%09ld&until=%lld.%09ld&filters=%s", (long long)since.tv_sec,
             since.tv_nsec, (long long)until.tv_sec, until.tv_nsec, enc);
    free(enc);
    sgtest_reply_t r;
    sgtest_docker_call("GET", path, NULL, &r);
    if (r.status != 200)
        SG_FAIL(NULL, "docker GET /events: HTTP %ld %s %s", r.status, r.error, r.body);
    int n = 0;
    for (char *line = strtok(r.body, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        json_object *e = json_tokener_parse(line);
        json_object *act = e != NULL ? sgtest_jpath(e, "Action") : NULL;
        if (act != NULL && strcmp(json_object_get_string(act), "create") == 0)
            n++;
        json_object_put(e);
    }
    sgtest_reply_free(&r);
    return n;
}

int sglibs_installers_now(const char *pid)
{
    return sglibs_count_labelled(pid, "sandgate.kind=installer");
}

int sglibs_count_labelled(const char *pid, const char *extra)
{
    char l1[192];
    snprintf(l1, sizeof(l1), "sandgate.proxy=%s", pid);
    const char *labels[] = {l1, extra, NULL};
    json_object *a = sgtest_docker_list(labels);
    if (a == NULL)
        SG_FAIL(NULL, "cannot list containers from Docker");
    int n = (int)json_object_array_length(a);
    json_object_put(a);
    return n;
}

/* method /volumes/<name><query> on Docker's API into *r: the status. */
static long volume_call(const char *method, const char *name, const char *query, sgtest_reply_t *r)
{
    char path[256];
    snprintf(path, sizeof(path), "/volumes/%s%s", name, query);
    sgtest_docker_call(method, path, NULL, r);
    return r->status;
}

long sglibs_volume_status(const char *name)
{
    sgtest_reply_t r;
    long st = volume_call("GET", name, "", &r);
    sgtest_reply_free(&r);
    return st;
}

long sglibs_volume_remove(const char *name)
{
    sgtest_reply_t r;
    long st = volume_call("DELETE", name, "?force=1", &r);
    if (st != 204 && st != 404)
        fprintf(stderr, "removing volume %s: HTTP %ld %s %s\n", name, st, r.error, r.body);
    sgtest_reply_free(&r);
    return st;
}

int sglibs_proxy_finish(sgtest_proxy_t **pp, const char *proxy_id, const char *volume, double removal_s)
{
    int rc = proxy_id != NULL ? sgtest_proxy_finish(pp, proxy_id, removal_s) : 0;
    if (volume[0] != '\0' && sglibs_volume_status(volume) == 200 && sglibs_volume_remove(volume) != 204)
        rc = -1;
    return rc;
}

int sglibs_volume_run(const char *volume, const char *image, const char *label_proxy_id, const char *script, char **out)
{
    json_object *c = json_object_new_object(), *hc = json_object_new_object(), *m, *mounts;
    json_object *labels = json_object_new_object();
    const char *entrypoint[] = {"/bin/sh", "-c", NULL}, *cmd[] = {script, NULL};
    json_object_object_add(c, "Image", json_object_new_string(image));
    json_object_object_add(c, "User", json_object_new_string("1000:1000"));
    json_object_object_add(c, "Entrypoint", sgtest_libs_array(entrypoint));
    json_object_object_add(c, "Cmd", sgtest_libs_array(cmd));
    json_object_object_add(labels, "sandgate.proxy", json_object_new_string(label_proxy_id));
    json_object_object_add(labels, "sandgate.kind", json_object_new_string("sgtest-helper"));
    json_object_object_add(c, "Labels", labels);
    json_object_object_add(hc, "NetworkMode", json_object_new_string("none"));
    m = json_object_new_object();
    json_object_object_add(m, "Type", json_object_new_string("volume"));
    json_object_object_add(m, "Source", json_object_new_string(volume));
    json_object_object_add(m, "Target", json_object_new_string("/opt/sandgate/store"));
    mounts = json_object_new_array();
    json_object_array_add(mounts, m);
    json_object_object_add(hc, "Mounts", mounts);
    json_object_object_add(c, "HostConfig", hc);

    sgtest_reply_t r;
    sgtest_docker_call("POST", "/containers/create", json_object_to_json_string_ext(c, JSON_C_TO_STRING_PLAIN), &r);
    json_object_put(c);
    if (r.status != 201)
        SG_FAIL(NULL, "docker create (helper on %s): HTTP %ld %s %s", volume, r.status, r.error, r.body);
    json_object *o = json_tokener_parse(r.body);
    sgtest_reply_free(&r);
    json_object *idv = o != NULL ? sgtest_jpath(o, "Id") : NULL;
    SG_CHECK(idv != NULL, o, "no Id from docker create");
    char id[128], path[256];
    snprintf(id, sizeof(id), "%s", json_object_get_string(idv));
    json_object_put(o);

    int code = -1;
    pathf(path, sizeof(path), "/containers/%s/start", id);
    sgtest_docker_call("POST", path, NULL, &r);
    long st = r.status;
    sgtest_reply_free(&r);
    if (st == 204) {
        pathf(path, sizeof(path), "/containers/%s/wait", id);
        sgtest_docker_call("POST", path, NULL, &r);
        json_object *w = r.status == 200 ? json_tokener_parse(r.body) : NULL;
        json_object *sc = w != NULL ? sgtest_jpath(w, "StatusCode") : NULL;
        if (sc != NULL)
            code = json_object_get_int(sc);
        json_object_put(w);
        sgtest_reply_free(&r);
    }
    if (out != NULL) {
        /* the multiplexed log: 8-byte headers {stream, 0, 0, 0, size BE} */
        pathf(path, sizeof(path), "/containers/%s/logs?stdout=1&stderr=1", id);
        sgtest_docker_call("GET", path, NULL, &r);
        bytes_t b = {0};
        for (size_t off = 0; r.status == 200 && off + 8 <= r.body_len;) {
            const unsigned char *h = (const unsigned char *)r.body + off;
            size_t n = (size_t)h[4] << 24 | (size_t)h[5] << 16 | (size_t)h[6] << 8 | h[7];
            if (off + 8 + n > r.body_len)
                break;
            b_put(&b, h + 8, n);
            off += 8 + n;
        }
        b_put(&b, "", 1);
        *out = (char *)b.p;
        sgtest_reply_free(&r);
    }
    pathf(path, sizeof(path), "/containers/%s?force=1", id);
    sgtest_docker_call("DELETE", path, NULL, &r);
    sgtest_reply_free(&r);
    SG_CHECK(st == 204 && code >= 0, NULL, "the helper container on %s did not run (start: HTTP %ld)", volume, st);
    return code;
}

int sglibs_random_hex(char *out, size_t nbytes)
{
    unsigned char rnd[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (nbytes > sizeof(rnd) || fd < 0 || read(fd, rnd, nbytes) != (ssize_t)nbytes) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    for (size_t i = 0; i < nbytes; i++)
        sprintf(out + 2 * i, "%02x", rnd[i]);
    return 0;
}

int sglibs_suite_dir(char *dir, size_t size, char *www, size_t wsize, const char *name, char *hex, size_t nbytes)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (mkdtemp(dir) == NULL || sglibs_random_hex(hex, nbytes) != 0) {
        perror("setup");
        dir[0] = '\0';
        return -1;
    }
    snprintf(www, wsize, "%s/www", dir);
    return 0;
}

void sglibs_py_names(const char *stem, const char *hex, char *name, char *norm, size_t size)
{
    snprintf(name, size, "%s_%s", stem, hex);
    snprintf(norm, size, "%s-%s", stem, hex);
}

/* ------------------------------------------------------------------------
 * The proxy's library calls
 * ------------------------------------------------------------------------ */

void sglibs_check_install_shape(json_object *o)
{
    bool success = SG_BOOL(o, "success");
    SG_STR(o, "message");
    double t = SG_DBL(o, "installation_time");
    SG_BOOL(o, "from_store");
    SG_CHECK(t >= 0, o, "installation_time is negative");
    json_object *v = NULL;
    SG_CHECK(json_object_object_get_ex(o, "installed_version", &v), o, "installed_version is missing");
    if (success)
        SG_CHECK(json_object_is_type(v, json_type_string) && json_object_get_string_len(v) > 0, o,
                 "a successful install must name the installed version");
    else
        SG_CHECK(v == NULL, o, "a failed install has installed_version null");
}

int sglibs_post_library(const sgtest_proxy_t *p, const char *sid, const char *package, const char *version,
                        sgtest_reply_t *out)
{
    json_object *b = json_object_new_object();
    json_object_object_add(b, "package", json_object_new_string(package));
    if (version != NULL)
        json_object_object_add(b, "version", json_object_new_string(version));
    char path[256];
    pathf(path, sizeof(path), "/sessions/%s/libraries", sid);
    int rc = sgtest_call_json(p, "POST", path, b, 0, out);
    json_object_put(b);
    return rc;
}

json_object *sglibs_install(const sgtest_proxy_t *p, const char *sid, const char *package, const char *version,
                            double *seconds)
{
    sgtest_reply_t r;
    sglibs_post_library(p, sid, package, version, &r);
    json_object *o = SG_EXPECT_JSON(&r, 200);
    if (seconds != NULL)
        *seconds = r.seconds;
    sgtest_reply_free(&r);
    sglibs_check_install_shape(o);
    return o;
}

void sglibs_expect_installed(json_object *o, const char *version, bool from_store)
{
    if (!SG_BOOL(o, "success"))
        SG_FAIL(o, "the install failed");
    if (strcmp(SG_STR(o, "installed_version"), version) != 0)
        SG_FAIL(o, "installed_version: expected \"%s\"", version);
    if (SG_BOOL(o, "from_store") != from_store)
        SG_FAIL(o, "from_store: expected %s", from_store ? "true" : "false");
    SG_CHECK(SG_DBL(o, "installation_time") > 0, o, "installation_time must be > 0");
}
