#include "runtime.h"

#include <stdio.h>
#include <string.h>

static int offers(json_object *runtimes, const char *name)
{
    return runtimes != NULL && json_object_is_type(runtimes, json_type_object) &&
           json_object_object_get_ex(runtimes, name, NULL);
}

int sg_runtime_choose(const char *setting, json_object *engine_runtimes, const char **runtime, char *warning,
                      size_t warnlen, char *err, size_t errlen)
{
    warning[0] = '\0';
    *runtime = NULL;
    if (strcmp(setting, "auto") == 0) {
        if (offers(engine_runtimes, SG_RUNTIME_RUNSC)) {
            *runtime = SG_RUNTIME_RUNSC;
        } else {
            *runtime = SG_RUNTIME_RUNC;
            snprintf(warning, warnlen,
                     "the Docker engine does not offer the runsc runtime (gVisor): sandboxes run on runc, "
                     "sharing the host's kernel (see README, Sandboxes)");
        }
        return 0;
    }
    if (strcmp(setting, SG_RUNTIME_RUNSC) == 0 || strcmp(setting, SG_RUNTIME_RUNC) == 0) {
        /* runc is every engine's own; runsc must be registered with it */
        if (strcmp(setting, SG_RUNTIME_RUNSC) == 0 && !offers(engine_runtimes, SG_RUNTIME_RUNSC)) {
            snprintf(err, errlen,
                     "SANDGATE_RUNTIME=runsc, but the Docker engine does not offer runsc "
                     "(register it: deploy/engine.sh, README \"Sandboxes\")");
            return -1;
        }
        *runtime = strcmp(setting, SG_RUNTIME_RUNSC) == 0 ? SG_RUNTIME_RUNSC : SG_RUNTIME_RUNC;
        return 0;
    }
    snprintf(err, errlen, "SANDGATE_RUNTIME=%.64s: expected runsc, runc or auto", setting);
    return -1;
}

static const char *const names[SG_RUNTIME_COUNT] = {SG_RUNTIME_RUNC, SG_RUNTIME_RUNSC};

const char *sg_runtime_at(size_t i)
{
    return i < SG_RUNTIME_COUNT ? names[i] : NULL;
}

const char *sg_runtime_find(const char *name, size_t len)
{
    for (size_t i = 0; i < SG_RUNTIME_COUNT; i++)
        if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
            return names[i];
    return NULL;
}

size_t sg_runtime_index(const char *name)
{
    size_t i = 0;
    while (i < SG_RUNTIME_COUNT && (name == NULL || strcmp(names[i], name) != 0))
        i++;
    return i;
}

unsigned sg_runtime_offered(json_object *engine_runtimes)
{
    unsigned bits = 1u << sg_runtime_index(SG_RUNTIME_RUNC);
    if (offers(engine_runtimes, SG_RUNTIME_RUNSC))
        bits |= 1u << sg_runtime_index(SG_RUNTIME_RUNSC);
    return bits;
}

int sg_runtime_parse_list(const char *list, unsigned *bits, char *err, size_t errlen)
{
    const char *p = list;
    *bits = 0;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        const char *rt = sg_runtime_find(p, len);
        if (rt == NULL) {
            snprintf(err, errlen, "\"%.*s\" is not a runtime: expected runc or runsc, comma-separated",
                     (int)(len > 32 ? 32 : len), p);
            return -1;
        }
        *bits |= 1u << sg_runtime_index(rt);
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
}
