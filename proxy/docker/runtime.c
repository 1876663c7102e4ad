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
