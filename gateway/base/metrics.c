#include "metrics.h"

#include <stdio.h>
#include <string.h>

#define MAX_SERIES 256
#define NBUCKETS 12

static const double buckets[NBUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

typedef struct {
    char a[48], b[32], c[8]; /* label values, copied */
    int n;                   /* numeric label (status) */
    double value;
} series_t;

typedef struct {
    series_t s[MAX_SERIES];
    size_t count;
} family_t;

static family_t requests, executions, rejections, upstream_errors, closes, installs, errors;
static long live_sessions;
static unsigned long usage_from_body;
static const char *const runtime_names[SG_METRICS_RUNTIMES] = {"runc", "runsc", "unknown"};
static long live_by_runtime[SG_METRICS_RUNTIMES];
static int redis_up = -1;
static unsigned long hist_counts[NBUCKETS + 1];
static double hist_sum;
static unsigned long hist_total;

static series_t *series3(family_t *f, const char *a, const char *b, const char *c, int n)
{
    for (size_t i = 0; i < f->count; i++)
        if (f->s[i].n == n && strncmp(f->s[i].a, a, sizeof(f->s[i].a) - 1) == 0 &&
            strncmp(f->s[i].b, b, sizeof(f->s[i].b) - 1) == 0 && strncmp(f->s[i].c, c, sizeof(f->s[i].c) - 1) == 0)
            return &f->s[i];
    if (f->count == MAX_SERIES)
        return &f->s[MAX_SERIES - 1]; /* full: the last series absorbs the rest */
    series_t *s = &f->s[f->count++];
    snprintf(s->a, sizeof(s->a), "%s", f->count == MAX_SERIES ? "other" : a);
    snprintf(s->b, sizeof(s->b), "%s", f->count == MAX_SERIES ? "other" : b);
    snprintf(s->c, sizeof(s->c), "%s", f->count == MAX_SERIES ? "other" : c);
    s->n = n;
    s->value = 0;
    return s;
}

static series_t *series(family_t *f, const char *a, const char *b, int n)
{
    return series3(f, a, b, "", n);
}

void sg_metrics_request(const char *route, int status)
{
    series(&requests, route, "", status)->value++;
}

void sg_metrics_execution(const char *lang, const char *runtime, const char *outcome, double seconds)
{
    series3(&executions, lang, outcome, runtime, 0)->value++;
    if (seconds < 0)
        return;
    size_t i = 0;
    while (i < NBUCKETS && seconds > buckets[i])
        i++;
    hist_counts[i]++;
    hist_sum += seconds;
    hist_total++;
}

void sg_metrics_usage_from_body(void)
{
    usage_from_body++;
}

void sg_metrics_quota_rejection(const char *limit)
{
    series(&rejections, limit, "", 0)->value++;
}

void sg_metrics_upstream_error(const char *kind)
{
    series(&upstream_errors, kind, "", 0)->value++;
}

void sg_metrics_set_live_sessions(long n)
{
    live_sessions = n;
}

size_t sg_metrics_runtime_index(const char *runtime)
{
    size_t i = 0;
    while (i < SG_METRICS_RUNTIMES - 1 && strcmp(runtime_names[i], runtime) != 0)
        i++;
    return i;
}

void sg_metrics_set_live_by_runtime(const long n[SG_METRICS_RUNTIMES])
{
    memcpy(live_by_runtime, n, sizeof(live_by_runtime));
}

void sg_metrics_session_closed(const char *reason)
{
    series(&closes, reason, "", 0)->value++;
}

void sg_metrics_set_redis_up(int up)
{
    redis_up = up;
}

void sg_metrics_package_install(int success)
{
    series(&installs, success ? "success" : "failure", "", 0)->value++;
}

void sg_metrics_error(const char *type)
{
    series(&errors, type, "", 0)->value++;
}

/* The sum of f's series whose first label is a. */
static double first_total(const family_t *f, const char *a)
{
    double v = 0;
    for (size_t i = 0; i < f->count; i++)
        if (strcmp(f->s[i].a, a) == 0)
            v += f->s[i].value;
    return v;
}

/* The sum of f's series whose second label is b (any first label). */
static double second_total(const family_t *f, const char *b)
{
    double v = 0;
    for (size_t i = 0; i < f->count; i++)
        if (strcmp(f->s[i].b, b) == 0)
            v += f->s[i].value;
    return v;
}

/* The execution-time histogram under name (help its HELP line). */
static int put_duration_histogram(sg_buf_t *out, const char *name, const char *help)
{
    int rc = 0;
    unsigned long cum = 0;
    rc |= sg_buf_appendf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (size_t i = 0; i < NBUCKETS; i++) {
        cum += hist_counts[i];
        rc |= sg_buf_appendf(out, "%s_bucket{le=\"%g\"} %lu\n", name, buckets[i], cum);
    }
    rc |= sg_buf_appendf(out, "%s_bucket{le=\"+Inf\"} %lu\n%s_sum %.6f\n%s_count %lu\n", name, hist_total, name,
                         hist_sum, name, hist_total);
    return rc;
}

/* Seed 004's names (metrics.h), from the counters above. */
static int render_seed004(sg_buf_t *out)
{
    int rc = 0;
    rc |= sg_buf_appendf(out,
                         "# HELP sandbox_executions_total Total code executions (seed 004's name).\n"
                         "# TYPE sandbox_executions_total counter\nsandbox_executions_total %lu\n",
                         hist_total);
    rc |= put_duration_histogram(out, "sandbox_execution_duration_seconds",
                                 "Execution time histogram (seed 004's name).");
    rc |= sg_buf_appendf(out,
                         "# HELP sandbox_package_installs_total Package installations, by outcome (seed 004's name).\n"
                         "# TYPE sandbox_package_installs_total counter\n");
    rc |= sg_buf_appendf(out, "sandbox_package_installs_total{outcome=\"success\"} %.0f\n",
                         first_total(&installs, "success"));
    rc |= sg_buf_appendf(out, "sandbox_package_installs_total{outcome=\"failure\"} %.0f\n",
                         first_total(&installs, "failure"));
    rc |= sg_buf_appendf(out, "# HELP sandbox_errors_total Errors, by type (seed 004's name).\n"
                              "# TYPE sandbox_errors_total counter\n");
    rc |= sg_buf_appendf(out, "sandbox_errors_total{type=\"execution\"} %.0f\n", second_total(&executions, "error"));
    rc |= sg_buf_appendf(out, "sandbox_errors_total{type=\"timeout\"} %.0f\n", second_total(&executions, "timeout"));
    rc |= sg_buf_appendf(out, "sandbox_errors_total{type=\"no_result\"} %.0f\n", second_total(&executions, "failed"));
    rc |=
        sg_buf_appendf(out, "sandbox_errors_total{type=\"package_install\"} %.0f\n", first_total(&installs, "failure"));
    for (size_t i = 0; i < errors.count; i++)
        rc |= sg_buf_appendf(out, "sandbox_errors_total{type=\"%s\"} %.0f\n", errors.s[i].a, errors.s[i].value);
    for (size_t i = 0; i < upstream_errors.count; i++)
        rc |= sg_buf_appendf(out, "sandbox_errors_total{type=\"proxy_%s\"} %.0f\n", upstream_errors.s[i].a,
                             upstream_errors.s[i].value);
    return rc;
}

int sg_metrics_render(sg_buf_t *out)
{
    int rc = 0;
    rc |= sg_buf_appendf(out, "# HELP sandgate_requests_total Requests answered, by route and status.\n"
                              "# TYPE sandgate_requests_total counter\n");
    for (size_t i = 0; i < requests.count; i++)
        rc |= sg_buf_appendf(out, "sandgate_requests_total{route=\"%s\",status=\"%d\"} %.0f\n", requests.s[i].a,
                             requests.s[i].n, requests.s[i].value);
    rc |= sg_buf_appendf(out, "# HELP sandgate_executions_total Executions forwarded, by language, outcome and "
                              "runtime.\n# TYPE sandgate_executions_total counter\n");
    for (size_t i = 0; i < executions.count; i++)
        rc |= sg_buf_appendf(out, "sandgate_executions_total{lang=\"%s\",outcome=\"%s\",runtime=\"%s\"} %.0f\n",
                             executions.s[i].a, executions.s[i].b, executions.s[i].c, executions.s[i].value);
    rc |= put_duration_histogram(out, "sandgate_execution_duration_seconds",
                                 "Execution time as the sandbox measured it.");
    rc |= sg_buf_appendf(
        out,
        "# HELP sandgate_live_sessions Live sessions (all tenants).\n# TYPE sandgate_live_sessions gauge\n"
        "sandgate_live_sessions %ld\n",
        live_sessions);
    rc |= sg_buf_appendf(out, "# HELP sandgate_live_sessions_by_runtime Open sessions by the runtime the proxy "
                              "reported for each (session records).\n# TYPE sandgate_live_sessions_by_runtime gauge\n");
    for (size_t i = 0; i < SG_METRICS_RUNTIMES; i++)
        rc |= sg_buf_appendf(out, "sandgate_live_sessions_by_runtime{runtime=\"%s\"} %ld\n", runtime_names[i],
                             live_by_runtime[i]);
    rc |= sg_buf_appendf(out, "# HELP sandgate_quota_rejections_total Requests refused by a quota or rate limit.\n"
                              "# TYPE sandgate_quota_rejections_total counter\n");
    for (size_t i = 0; i < rejections.count; i++)
        rc |= sg_buf_appendf(out, "sandgate_quota_rejections_total{limit=\"%s\"} %.0f\n", rejections.s[i].a,
                             rejections.s[i].value);
    rc |= sg_buf_appendf(out, "# HELP sandgate_upstream_errors_total Failed calls to the proxy, by kind.\n"
                              "# TYPE sandgate_upstream_errors_total counter\n");
    for (size_t i = 0; i < upstream_errors.count; i++)
        rc |= sg_buf_appendf(out, "sandgate_upstream_errors_total{kind=\"%s\"} %.0f\n", upstream_errors.s[i].a,
                             upstream_errors.s[i].value);
    rc |= sg_buf_appendf(out,
                         "# HELP sandgate_usage_from_body_total Executions whose usage was read from their "
                         "result's JSON (a streamed run, or a proxy without X-Sandgate-Usage).\n"
                         "# TYPE sandgate_usage_from_body_total counter\nsandgate_usage_from_body_total %lu\n",
                         usage_from_body);
    rc |= sg_buf_appendf(out, "# HELP sandgate_sessions_closed_total Sessions closed, by reason.\n"
                              "# TYPE sandgate_sessions_closed_total counter\n");
    for (size_t i = 0; i < closes.count; i++)
        rc |= sg_buf_appendf(out, "sandgate_sessions_closed_total{reason=\"%s\"} %.0f\n", closes.s[i].a,
                             closes.s[i].value);
    rc |= render_seed004(out);
    if (redis_up >= 0)
        rc |= sg_buf_appendf(out,
                             "# HELP sandgate_redis_up Whether Redis answers.\n# TYPE sandgate_redis_up gauge\n"
                             "sandgate_redis_up %d\n",
                             redis_up);
    return rc ? -1 : 0;
}
