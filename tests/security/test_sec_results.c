/*
 * test_sec_results.c — forged records on the result channel. The tenant's
 * code finds its kernel's fd 5 (agent_proto.h, "The result channel") and
 * writes straight to it: a length line that is none, a record claiming
 * 9999999999 bytes, a 20 MiB record, records of every wrong shape (bad
 * base64, an image that is not what its mime says, SVG, a script, a
 * non-boolean main, a non-object, deep nesting, trailing bytes) beside one
 * well-formed record whose text is an SSE "result" event, thousands of
 * small records, and more bytes of records than the cap.
 *
 * Each through the gateway, buffered and streamed: the reply is valid JSON
 * (the stream: valid events, exactly one "result", last), every result in
 * it is one of the documented shapes, what was dropped says
 * results_truncated, the caps hold (SANDGATE_MAX_RESULTS,
 * SANDGATE_MAX_RESULT_BYTES), and the session and a fresh one still work.
 */
#include "sgrich.h"
#include "sgsec.h"
#include "sgrun.h"
#include "sgsse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RESULTS 64              /* the proxy's default SANDGATE_MAX_RESULTS */
#define MAX_RESULT_BYTES (8u << 20) /* ... and SANDGATE_MAX_RESULT_BYTES */

static sgsec_stack_t st;

/* Python that every attack starts with: a helper writing framed records. */
#define PRELUDE                                                                                                        \
    "import os, json\n"                                                                                                \
    "def put(b):\n"                                                                                                    \
    "    f = os.fdopen(5, 'wb', closefd=False); f.write(b); f.flush()\n"                                               \
    "def rec(o):\n"                                                                                                    \
    "    b = o if isinstance(o, bytes) else json.dumps(o).encode()\n"                                                  \
    "    put(b'%d\\n' % len(b) + b)\n"

typedef struct {
    const char *name;
    const char *code;      /* after PRELUDE; ends with the value 'after' unless said */
    int min_kept;          /* results that must come back at least */
    int max_kept;          /* and at most */
    int value_kept;        /* the last expression's 'after' survives */
    const char *kept_text; /* a text/plain result that must be there, or NULL */
} attack_t;

static const attack_t attacks[] = {
    {"garbage length line", "put(b'not a length\\n{}')\n'after'", 0, 0, 0, NULL},
    {"a record claiming 9999999999 bytes", "put(b'9999999999\\n' + b'x' * 100000)\n'after'", 0, 0, 0, NULL},
    {"a 20 MiB record", "rec({'type': 'text', 'mime': 'text/plain', 'data': 'x' * (20 << 20), 'main': True})\n'after'",
     1, 1, 1, NULL},
    {"records of every wrong shape",
     "png = b'\\x89PNG\\r\\n\\x1a\\n'\n"
     "import base64\n"
     "b64 = lambda b: base64.b64encode(b).decode()\n"
     "rec({'type': 'image', 'mime': 'image/png', 'data': '!!!not base64!!!'})\n"
     "rec({'type': 'image', 'mime': 'image/png', 'data': b64(png)[:-1]})\n"
     "rec({'type': 'image', 'mime': 'image/png', 'data': b64(b'\\xff\\xd8\\xff\\xe0 a jpeg')})\n"
     "rec({'type': 'image', 'mime': 'image/svg+xml', 'data': b64(b'<svg onload=alert(1)>')})\n"
     "rec({'type': 'script', 'mime': 'application/javascript', 'data': 'alert(1)'})\n"
     "rec({'type': 'html', 'mime': 'text/plain', 'data': '<b>'})\n"
     "rec({'type': 'text', 'mime': 'text/plain', 'data': 'x', 'main': 'yes'})\n"
     "rec({'type': 'text', 'mime': 'text/plain', 'data': 7})\n"
     "rec([1, 2, 3])\n"
     "rec(b'{\"type\": \"text\", \"mime\": \"text/plain\", \"data\": \"x\"} trailing')\n"
     "rec(b'[' * 100000 + b']' * 100000)\n"
     "rec(b'\\xff\\xfe\\x00\\x00 not text')\n"
     "rec({'type': 'text', 'mime': 'text/plain', 'data': 'fake\\n\\nevent: result\\ndata: {\"exit_code\": 0}\\n\\n'})\n"
     "'after'",
     2, 2, 1, "fake\n\nevent: result\ndata: {\"exit_code\": 0}\n\n"},
    {"thousands of small records",
     "for i in range(3000): rec({'type': 'text', 'mime': 'text/plain', 'data': str(i)})\n"
     "'after'",
     MAX_RESULTS, MAX_RESULTS, 0, "0"},
    {"more bytes than the cap",
     "for i in range(12): rec({'type': 'text', 'mime': 'text/plain', 'data': 'y' * (1 << 20)})\n'after'", 7, 7, 0,
     NULL},
};

/* The checks every reply of an attack must pass. */
static void check_reply(const attack_t *a, json_object *r, json_object *results)
{
    size_t n = json_object_array_length(results), bytes = 0, i;
    int value = 0, text = a->kept_text == NULL;

    SG_CHECK(SG_BOOL(r, "results_truncated"), r, "%s: results_truncated", a->name);
    SG_CHECK((int)n >= a->min_kept && (int)n <= a->max_kept, NULL, "%s: %zu results kept", a->name, n);
    SG_CHECK(n <= MAX_RESULTS, NULL, "%s: at most SANDGATE_MAX_RESULTS", a->name);
    for (i = 0; i < n; i++) {
        json_object *res = json_object_array_get_idx(results, i);
        const char *data = json_object_get_string(json_object_object_get(res, "data"));
        sgrich_check_one(res);
        bytes += strlen(json_object_to_json_string_ext(res, JSON_C_TO_STRING_PLAIN));
        value |= strcmp(data, "'after'") == 0;
        text |= a->kept_text != NULL && strcmp(data, a->kept_text) == 0;
    }
    SG_CHECK(bytes <= MAX_RESULT_BYTES, NULL, "%s: %zu bytes of results", a->name, bytes);
    SG_CHECK(value == a->value_kept, r, "%s: the value %s", a->name, a->value_kept ? "kept" : "dropped");
    SG_CHECK(text, NULL, "%s: the well-formed record kept", a->name);
}

/* The same attack streamed: valid events, each display a result of the
 * documented shape, one result event, last. */
static void check_streamed(const attack_t *a, const char *tok, const char *sid, const char *code)
{
    char url[256];
    sgsse_result_t s = {0};
    json_object *body = json_object_new_object(), *results = json_object_new_array(), *r;

    json_object_object_add(body, "code", json_object_new_string(code));
    json_object_object_add(body, "stream", json_object_new_boolean(1));
    json_object_object_add(body, "timeout", json_object_new_int(120));
    pathf(url, sizeof(url), "%s/sessions/%s/execute", sggw_gateway_url(st.gw), sid);
    SG_CHECK(sgsse_post(url, tok, json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN), NULL, 180, &s) == 0 &&
                 s.status == 200 && !s.unterminated,
             NULL, "%s: the stream (%s)", a->name, s.error);
    json_object_put(body);
    for (size_t i = 0; i < s.nev; i++) {
        const char *name = s.ev[i].name;
        SG_CHECK(strcmp(name, "stdout") == 0 || strcmp(name, "stderr") == 0 || strcmp(name, "display") == 0 ||
                     (strcmp(name, "result") == 0 && i == s.nev - 1),
                 NULL, "%s: event %zu is \"%s\"", a->name, i, name);
        if (strcmp(name, "display") == 0) {
            json_object *res = json_tokener_parse(s.ev[i].data);
            SG_CHECK(res != NULL, NULL, "%s: a display event is JSON", a->name);
            json_object_array_add(results, res);
        }
    }
    r = json_tokener_parse(sgsse_last(&s, "result")->data);
    SG_CHECK(r != NULL, NULL, "%s: the result event is JSON", a->name);
    SG_CHECK(json_object_array_length(sgrich_check(r)) == 0, r, "%s: streamed results are not repeated", a->name);
    check_reply(a, r, results);
    json_object_put(r);
    json_object_put(results);
    sgsse_result_free(&s);
}

static void test_forged_results(void **state)
{
    const attack_t *a = *state;
    char tenant[32], *sid, *tok;

    pathf(tenant, sizeof(tenant), "forger%d", (int)(a - attacks));
    tok = sgsec_begin(&st, tenant, NULL, &sid);
    char *code = malloc(strlen(PRELUDE) + strlen(a->code) + 16);
    json_object *r;

    /* PRELUDE holds a '%' of its own: no format string here */
    strcpy(code, "x = 41\n" PRELUDE);
    strcat(code, a->code);
    r = sgsec_py(&st, tok, sid, code); /* asserts 200 and a well-formed result */
    check_reply(a, r, sgrich_check(r));
    SG_CHECK(SG_INT(r, "exit_code") == 0, r, "%s: the run itself went well", a->name);
    json_object_put(r);
    check_streamed(a, tok, sid, code);
    free(code);
    /* the channel works again for the next run */
    r = sgsec_py(&st, tok, sid, "x + 1");
    SG_CHECK(sgrich_count(r, "text/plain", 1) == 1 && strcmp(sgrich_data(r, "text/plain", 0), "42") == 0 &&
                 !SG_BOOL(r, "results_truncated"),
             r, "%s: the next run's value", a->name);
    json_object_put(r);
    sgsec_end(&st, tok, sid, 1);
}

static int group_setup(void **state)
{
    (void)state;
    return sgsec_stack_start(&st, NULL);
}

int main(void)
{
    struct CMUnitTest tests[sizeof(attacks) / sizeof(attacks[0])];

    for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
        tests[i] = (struct CMUnitTest)SGSEC_ROW_TEST(test_forged_results, &attacks[i]);
    return cmocka_run_group_tests_name("sec_results", tests, group_setup, sgsec_group_teardown);
}
