/*
 * stats.c — the dashboard's own figures (stats.h): a ring of one-second
 * latency histograms, and rejection counts in an open-addressed table of
 * tenants.
 */
#include "stats.h"

#include <math.h>
#include <string.h>

#define NBUCKETS 72
#define BUCKET_BASE 1e-4 /* upper bound of bucket 0, seconds */
#define BUCKET_GROWTH 1.25

typedef struct {
    int64_t second; /* the unix second this slot holds; 0: none */
    uint32_t executions;
    uint32_t timed; /* executions with a latency */
    uint32_t hist[NBUCKETS];
} slot_t;

typedef struct {
    int64_t tenant; /* 0: a free row (tenant ids start at 1) */
    uint64_t counts[SG_STATS_NLIMITS];
} tenant_row_t;

static slot_t ring[SG_STATS_SECONDS];
static tenant_row_t tenants[SG_STATS_TENANTS];
static size_t ntenants;
static uint64_t overflow[SG_STATS_NLIMITS]; /* tenants past the table's size */
static int64_t since;

const char *const sg_stats_limits[SG_STATS_NLIMITS] = {
    "rate", "sessions", "concurrent_execs", "execs_per_day", "exec_seconds_per_day", "templates", "other"};

static double bucket_upper(int i)
{
    return BUCKET_BASE * pow(BUCKET_GROWTH, i);
}

static int bucket_of(double s)
{
    if (s <= BUCKET_BASE)
        return 0;
    int i = (int)ceil(log(s / BUCKET_BASE) / log(BUCKET_GROWTH));
    /* guard the rounding of log() at a bound */
    while (i > 0 && bucket_upper(i - 1) >= s)
        i--;
    while (i < NBUCKETS - 1 && bucket_upper(i) < s)
        i++;
    return i < NBUCKETS ? i : NBUCKETS - 1;
}

static slot_t *slot_for(int64_t second)
{
    slot_t *s = &ring[(uint64_t)second % SG_STATS_SECONDS];
    if (s->second != second) {
        memset(s, 0, sizeof(*s));
        s->second = second;
    }
    return s;
}

void sg_stats_execution(int64_t now_s, double latency_s)
{
    if (now_s <= 0)
        return;
    slot_t *s = slot_for(now_s);
    s->executions++;
    if (isfinite(latency_s) && latency_s >= 0) {
        s->hist[bucket_of(latency_s)]++;
        s->timed++;
    }
}

/* The q-quantile of a slot: the upper bound of the bucket holding the
 * ceil(q * n)-th latency; -1 without latencies. */
static double quantile(const slot_t *s, double q)
{
    if (s->timed == 0)
        return -1;
    uint64_t rank = (uint64_t)ceil(q * s->timed), seen = 0;
    if (rank == 0)
        rank = 1;
    for (int i = 0; i < NBUCKETS; i++) {
        seen += s->hist[i];
        if (seen >= rank)
            return bucket_upper(i);
    }
    return bucket_upper(NBUCKETS - 1);
}

void sg_stats_series(int64_t now_s, size_t n, sg_stats_point_t *out)
{
    if (n > SG_STATS_SECONDS)
        n = SG_STATS_SECONDS;
    for (size_t i = 0; i < n; i++) {
        int64_t second = now_s - (int64_t)n + 1 + (int64_t)i;
        const slot_t *s = &ring[(uint64_t)second % SG_STATS_SECONDS];
        if (second <= 0 || s->second != second) {
            out[i] = (sg_stats_point_t){0, -1, -1};
            continue;
        }
        out[i].executions = s->executions;
        out[i].p50 = quantile(s, 0.50);
        out[i].p99 = quantile(s, 0.99);
    }
}

static size_t limit_index(const char *limit)
{
    for (size_t i = 0; i + 1 < SG_STATS_NLIMITS; i++)
        if (limit != NULL && strcmp(limit, sg_stats_limits[i]) == 0)
            return i;
    return SG_STATS_NLIMITS - 1;
}

/* The tenant's row, made when create and the table has room; NULL else. */
static tenant_row_t *row_of(int64_t tenant, int create)
{
    if (tenant <= 0)
        return NULL;
    size_t h = (size_t)((uint64_t)tenant * 0x9E3779B97F4A7C15ull % SG_STATS_TENANTS);
    for (size_t k = 0; k < SG_STATS_TENANTS; k++) {
        tenant_row_t *r = &tenants[(h + k) % SG_STATS_TENANTS];
        if (r->tenant == tenant)
            return r;
        if (r->tenant == 0) {
            /* keep a quarter free so that lookups stay short */
            if (!create || ntenants >= SG_STATS_TENANTS * 3 / 4)
                return NULL;
            r->tenant = tenant;
            ntenants++;
            return r;
        }
    }
    return NULL;
}

void sg_stats_rejection(int64_t tenant, const char *limit)
{
    tenant_row_t *r = row_of(tenant, 1);
    (r != NULL ? r->counts : overflow)[limit_index(limit)]++;
}

void sg_stats_rejections(int64_t tenant, uint64_t out[SG_STATS_NLIMITS])
{
    const tenant_row_t *r = tenant == 0 ? NULL : row_of(tenant, 0);
    const uint64_t *src = tenant == 0 ? overflow : r != NULL ? r->counts : NULL;
    for (size_t i = 0; i < SG_STATS_NLIMITS; i++)
        out[i] = src != NULL ? src[i] : 0;
}

void sg_stats_init(int64_t now_s)
{
    since = now_s;
}

int64_t sg_stats_since(void)
{
    return since;
}

void sg_stats_reset(void)
{
    memset(ring, 0, sizeof(ring));
    memset(tenants, 0, sizeof(tenants));
    memset(overflow, 0, sizeof(overflow));
    ntenants = 0;
}
