/*
 * redis_scripts.h — private to state/redis*.c: the Lua scripts of the Redis
 * backend, one per check-and-update, run by EVALSHA (redis.c). Each script's
 * comment in redis_scripts.c says its KEYS and ARGV.
 */
#ifndef SANDGATE_STATE_REDIS_SCRIPTS_H
#define SANDGATE_STATE_REDIS_SCRIPTS_H

typedef struct {
    const char *src;
    char sha[41];
} sg_state__script_t;

enum {
    SCRIPT_RATE,
    SCRIPT_RESERVE,
    SCRIPT_ZREM,
    SCRIPT_COMMIT,
    SCRIPT_TOUCH,
    SCRIPT_REMOVE,
    SCRIPT_RESTORE,
    SCRIPT_EXPIRED,
    SCRIPT_LIST,
    SCRIPT_EXEC_ACQUIRE,
    SCRIPT_QUOTA_RESERVE,
    SCRIPT_QUOTA_SEED,
    SCRIPT_QUOTA_ADD,
    SCRIPT_EXEC_ADMIT,
    SCRIPT_EXEC_FINISH,
    SCRIPT_SESSION_ADMIT,
    SCRIPT_SOLO_BEAT,
    SCRIPT_SOLO_RELEASE,
    SCRIPT_SOLO_SEED,
    SCRIPT_SOLO_APPLY,
    SCRIPT_COUNT
};

/* Every script with its SHA1 (hex), once sg_state__scripts_init has run. */
extern sg_state__script_t sg_state__scripts[SCRIPT_COUNT];
/* Computes the SHA1s; idempotent. Loop thread. */
void sg_state__scripts_init(void);

#endif
