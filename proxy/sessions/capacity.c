/*
 * capacity.c — the container cap (see capacity.h).
 */
#include "capacity.h"

#include "log.h"

static long cap_max;
static long cap_used; /* __atomic only */

void sg_capacity_init(long max)
{
    cap_max = max;
    __atomic_store_n(&cap_used, 0, __ATOMIC_SEQ_CST);
}

int sg_capacity_take_spare(long headroom)
{
    long used = __atomic_load_n(&cap_used, __ATOMIC_SEQ_CST);
    do {
        if (used + 1 + headroom > cap_max)
            return -1;
    } while (!__atomic_compare_exchange_n(&cap_used, &used, used + 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return 0;
}

int sg_capacity_take(void)
{
    return sg_capacity_take_spare(0);
}

void sg_capacity_give(void)
{
    long before = __atomic_fetch_sub(&cap_used, 1, __ATOMIC_SEQ_CST);
    if (before <= 0) {
        /* cannot happen: every give follows its take */
        __atomic_fetch_add(&cap_used, 1, __ATOMIC_SEQ_CST);
        sg_error("capacity: a container slot was given back twice");
    }
}

long sg_capacity_used(void)
{
    return __atomic_load_n(&cap_used, __ATOMIC_SEQ_CST);
}

long sg_capacity_max(void)
{
    return cap_max;
}
