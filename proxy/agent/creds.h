/*
 * creds.h — who the agent is, and who the code it starts is: the uid split.
 *
 * The proxy starts the agent as root (User 0:0) with every capability
 * dropped but CAP_SETUID, CAP_SETGID and CAP_SETPCAP, under
 * no-new-privileges. At start-up the agent
 *   - empties its supplementary groups and sets its effective (hence
 *     filesystem) uid and gid to the sandbox user, SANDBOX_UID:SANDBOX_GID,
 *     keeping 0 as its real and saved ids: every file it reads or writes
 *     (PUT_FILE, GET_FILE, the code's file, /tmp/sandgate) is checked and
 *     owned as the sandbox user, and with a non-root effective uid it holds
 *     no effective capability at all (the three stay permitted);
 *   - scrubs the strings of its initial environment in place, so that a
 *     /proc/1/environ which a runtime shows anyway (gVisor's is mode 0444)
 *     holds only NUL bytes.
 * Setting the filesystem ids alone (setfsuid) would keep the effective uid
 * 0, but this runsc build (gVisor 2022-12) has no setfsuid: the effective
 * ids do the same on both runtimes.
 *
 * Every process it starts drops for good before exec (creds_drop_for_good):
 * the three capabilities out of its bounding set, no supplementary groups,
 * then real, effective and saved gid and uid all SANDBOX_*, which leaves it
 * no capability in any set. A real and saved uid of 0 is what protects the
 * agent, on runc and on runsc alike: user code (uid 1000 through and
 * through) may not signal it, trace it, read its memory or open its
 * descriptors under /proc/1, whatever the runtime makes of the dumpable flag.
 * The agent kills user code as the owner it is (its effective uid), without
 * CAP_KILL.
 *
 * An agent started as any other user (an older proxy's container, an
 * operator's image run with its own USER) runs as it always did: nothing
 * is dropped, its children run as itself.
 */
#ifndef SANDGATE_AGENT_CREDS_H
#define SANDGATE_AGENT_CREDS_H

/* The sandbox user: the owner of the work dir, what user code runs as. */
#define SANDBOX_UID 1000
#define SANDBOX_GID 1000

/* Start-up, first thing: the split above when started as root (and the
 * environment scrubbed). 0, or -1 (logged): an agent started as root that
 * cannot become the sandbox user must not run anything. */
int creds_init(void);

/* In a forked child, before exec: become the sandbox user for good (when
 * the agent was started as root; else nothing). 0, or -1 with errno. */
int creds_drop_for_good(void);

#endif
