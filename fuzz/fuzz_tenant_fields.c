/*
 * fuzz_tenant_fields — a tenant's quota fields as the admin API and
 * `sandgate-admin tenant set NAME key=value ...` give them
 * (sg_tenant_set_field, gateway/store/tenant.c), checked by the same ranges the
 * store applies (sg_tenant_validate) and printed back (sg_tenant_format).
 *
 * Input: "key=value" lines. Invariants: a value the setter takes leaves a
 * tenant the validator accepts (the two agree on every range); a refused
 * one leaves the tenant as it was and names its key; the printed tenant
 * ("k=v k=v ...") parses back, field by field, into the same tenant
 * (reals to the six decimals printed), and its length is what it says.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "tenant.h"

/* Printed with six decimals, read back: half a unit of the sixth decimal,
 * plus the double's own spacing at that size. */
static int near(double a, double b)
{
    return fabs(a - b) <= 5e-7 + fabs(a) * 4.5e-16 + 1e-12;
}

static void same_tenant(const sg_tenant_t *a, const sg_tenant_t *b)
{
    /* longs, ints and the language list exactly; reals as printed (%.6f) */
    CHECK(a->disabled == b->disabled && a->rate_per_min == b->rate_per_min && a->burst == b->burst);
    CHECK(a->max_sessions == b->max_sessions && a->execs_per_day == b->execs_per_day);
    CHECK(a->max_memory_mb == b->max_memory_mb && a->network_allowed == b->network_allowed);
    CHECK(a->idle_timeout == b->idle_timeout && a->max_lifetime == b->max_lifetime);
    CHECK(strcmp(a->allowed_langs, b->allowed_langs) == 0 && strcmp(a->runtime, b->runtime) == 0);
    CHECK(near(a->exec_seconds_per_day, b->exec_seconds_per_day));
    CHECK(near(a->max_timeout, b->max_timeout));
    CHECK(near(a->max_cpus, b->max_cpus));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = strndup((const char *)data, size), *save = NULL, err[512];
    sg_tenant_t t, before, back;
    char printed[4096];

    sg_tenant_defaults(&t);
    CHECK(sg_tenant_validate(&t, err, sizeof(err)) == 0);
    for (char *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        before = t;
        err[0] = '\0';
        if (sg_tenant_set_field(&t, line, eq + 1, err, sizeof(err)) != 0) {
            CHECK(memcmp(&t, &before, sizeof(t)) == 0);
            CHECK(err[0] != '\0' && strncmp(err, line, strlen(line) < 40 ? strlen(line) : 40) == 0);
            continue;
        }
        if (sg_tenant_validate(&t, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s=%s was taken, then refused: %s\n", line, eq + 1, err);
            CHECK(!"the setter and the validator agree");
        }
    }

    int n = sg_tenant_format(&t, printed, sizeof(printed));
    CHECK(n > 0 && (size_t)n < sizeof(printed) && strlen(printed) == (size_t)n);
    sg_tenant_defaults(&back);
    char *s2 = NULL;
    for (char *kv = strtok_r(printed, " ", &s2); kv != NULL; kv = strtok_r(NULL, " ", &s2)) {
        char *eq = strchr(kv, '=');
        CHECK(eq != NULL);
        *eq = '\0';
        if (sg_tenant_set_field(&back, kv, eq + 1, err, sizeof(err)) != 0) {
            fprintf(stderr, "printed %s=%s does not parse: %s\n", kv, eq + 1, err);
            CHECK(!"the printed tenant parses back");
        }
    }
    same_tenant(&t, &back);
    free(text);
    return 0;
}
