#include "reconcile.h"
#include "log.h"

#include <stdio.h>

int sg_reconcile(sg_docker_t *d, const char *proxy_id, char *err, size_t errlen)
{
    char label[256], rerr[512];
    json_object *list = NULL;
    int removed = 0;

    snprintf(label, sizeof(label), "sandgate.proxy=%s", proxy_id);
    if (sg_docker_container_list(d, label, &list, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *c = json_object_array_get_idx(list, i), *id, *labels, *sess = NULL;
        if (!json_object_object_get_ex(c, "Id", &id))
            continue;
        if (json_object_object_get_ex(c, "Labels", &labels))
            json_object_object_get_ex(labels, "sandgate.session", &sess);
        if (sg_docker_container_remove(d, json_object_get_string(id), rerr, sizeof(rerr)) != 0) {
            sg_error("reconcile: cannot remove container %.12s: %s", json_object_get_string(id), rerr);
            continue;
        }
        sg_info("reconcile: removed leftover container %.12s of session %s", json_object_get_string(id),
                sess != NULL ? json_object_get_string(sess) : "?");
        removed++;
    }
    json_object_put(list);
    return removed;
}
