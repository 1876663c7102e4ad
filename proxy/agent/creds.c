/*
 * creds.c — the uid split between the agent and user code (see creds.h).
 */
#include <errno.h>
#include <grp.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent.h"
#include "creds.h"

extern char **environ;

/* Started as root: the split is in force, children drop for good. */
static int privileged;

/* Copy the environment to the heap and zero the strings the kernel placed
 * at start-up, which is what /proc/<pid>/environ reads. */
static void scrub_environment(void)
{
    size_t n = 0, i;
    char **copy;

    while (environ[n] != NULL)
        n++;
    copy = agent_xcalloc(n + 1, sizeof(*copy));
    for (i = 0; i < n; i++)
        copy[i] = agent_xstrdup(environ[i]);
    for (i = 0; i < n; i++)
        memset(environ[i], 0, strlen(environ[i]));
    environ = copy;
}

int creds_init(void)
{
    if (getuid() != 0 && geteuid() != 0)
        return 0; /* as before the split: children run as the agent does */
    scrub_environment();
    /* groups first: setgroups needs CAP_SETGID, gone with a non-root euid */
    if (setgroups(0, NULL) != 0 || setresgid(0, SANDBOX_GID, 0) != 0 || setresuid(0, SANDBOX_UID, 0) != 0) {
        agent_log("started as root, but cannot become uid %d gid %d for files (CAP_SETUID, CAP_SETGID): %s",
                  SANDBOX_UID, SANDBOX_GID, strerror(errno));
        return -1;
    }
    privileged = 1;
    agent_log("running as uid 0 with uid %d gid %d for files; user code runs as %d:%d", SANDBOX_UID, SANDBOX_GID,
              SANDBOX_UID, SANDBOX_GID);
    return 0;
}

/* Drop every capability of the bounding set (needs CAP_SETPCAP effective):
 * nothing the child runs can ever hold one again. */
static int drop_bounding_set(void)
{
    int cap;

    for (cap = 0; cap < 64; cap++) {
        int r = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (r < 0)
            return errno == EINVAL ? 0 : -1; /* past the last capability the kernel knows */
        if (r == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
            return -1;
    }
    return 0;
}

int creds_drop_for_good(void)
{
    uid_t r, e, s;

    if (!privileged)
        return 0;
    /* back to euid 0 (allowed: the real and saved uids are 0), which brings
     * the permitted capabilities back into the effective set */
    if (seteuid(0) != 0 || drop_bounding_set() != 0)
        return -1;
    if (setgroups(0, NULL) != 0 || setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID) != 0 ||
        setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID) != 0)
        return -1;
    /* for good: no id of 0 left to go back to */
    if (getresuid(&r, &e, &s) != 0 || r != SANDBOX_UID || e != SANDBOX_UID || s != SANDBOX_UID || setuid(0) == 0) {
        errno = EPERM;
        return -1;
    }
    return 0;
}
