/*
 * exec.c — the EXEC request (see exec.h): the code's file, setup, and the
 * one-shot run; stateful EXECs go on in kernel.c after setup.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "exec.h"
#include "kernel.h"
#include "proc.h"
#include "decode.h"
#include "run.h"

extern char **environ;

static int is_own_var(const char *var)
{
    return strncmp(var, "SANDGATE_FILE=", 14) == 0 || strncmp(var, "SANDGATE_WORKDIR=", 17) == 0;
}

/* The environment of the EXEC's commands and kernel: the agent's, with
 * SANDGATE_FILE=file_path and SANDGATE_WORKDIR=agent_workdir (the two
 * strings the array owns). */
static char **env_build(const char *file_path)
{
    size_t n = 0, i, j = 0;
    char **envp, *file_var, *work_var;

    while (environ[n] != NULL)
        n++;
    envp = agent_xcalloc(n + 3, sizeof(*envp));
    file_var = agent_xmalloc(strlen(file_path) + sizeof("SANDGATE_FILE="));
    work_var = agent_xmalloc(strlen(agent_workdir) + sizeof("SANDGATE_WORKDIR="));
    strcpy(file_var, "SANDGATE_FILE=");
    strcat(file_var, file_path);
    strcpy(work_var, "SANDGATE_WORKDIR=");
    strcat(work_var, agent_workdir);
    for (i = 0; i < n; i++) {
        if (!is_own_var(environ[i]))
            envp[j++] = environ[i];
    }
    envp[j++] = file_var;
    envp[j++] = work_var;
    envp[j] = NULL;
    return envp;
}

static void env_free(char **envp)
{
    size_t i;

    if (envp == NULL)
        return;
    for (i = 0; envp[i] != NULL; i++) {
        if (is_own_var(envp[i]))
            free(envp[i]);
    }
    free(envp);
}

/* The one-shot command being run, if any. */
static proc_child_t cmd_child = {-1, 0, 0};

typedef struct {
    int status; /* wait status, valid when have_status */
    int have_status;
    uint32_t reason; /* EXITED unless the agent ended the run */
    int64_t ended;
} cmd_result_t;

static int mkdir_parents(const char *path)
{
    char buf[PATH_MAX], *p;

    if (strlen(path) >= sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    for (p = buf + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            struct stat st;
            int e = errno;

            /* A read-only parent may still hold the directory we need. */
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
                errno = e;
                return -1;
            }
        }
        *p = '/';
    }
    return 0;
}

/* Write the submitted code where the commands expect it. The agent's cwd is
 * the work dir, so a relative file_path lands there too. */
static int write_code(run_t *x, char *why, size_t whylen)
{
    int fd = -1;

    if (mkdir_parents(x->req.file_path) != 0) {
        snprintf(why, whylen, "sandgate-agent: cannot create the directories for %s: %s\n", x->req.file_path,
                 strerror(errno));
        goto Error;
    }
    fd = open(x->req.file_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, whylen, "sandgate-agent: cannot create %s: %s\n", x->req.file_path, strerror(errno));
        goto Error;
    }
    fchmod(fd, 0644);
    if (agent_write_full(fd, x->req.code, x->req.code_len) != 0) {
        snprintf(why, whylen, "sandgate-agent: cannot write %s: %s\n", x->req.file_path, strerror(errno));
        goto Error;
    }
    if (close(fd) != 0) {
        fd = -1;
        snprintf(why, whylen, "sandgate-agent: cannot write %s: %s\n", x->req.file_path, strerror(errno));
        goto Error;
    }
    return 0;

Error:
    if (fd >= 0)
        close(fd);
    return -1;
}

static int cmd_ended(void *ctx)
{
    return cmd_child.done;
}

/* A one-shot command has only its output to follow besides its end. */
static const run_follower_t follow_cmd = {NULL, NULL, cmd_ended};

/* Run one command to its end, forwarding its output. Returns 0 with *res
 * filled, or -1 when it could not be started (explained on stderr). A live
 * kernel is spared by the kill that ends the run. */
static int run_one(run_t *x, const char *cmd, cmd_result_t *res)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int fds[2], child_fds[2], outcome, i;
    pid_t pid;

    memset(res, 0, sizeof(*res));
    res->reason = SG_AGENT_REASON_EXITED;
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
        run_start_failed(x, "pipe");
        goto Error;
    }
    /* Only our ends: the child must see ordinary blocking pipes. */
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    fcntl(errp[0], F_SETFL, O_NONBLOCK);

    if (x->started == 0)
        x->started = agent_now_ns();
    proc_follow(&cmd_child);
    child_fds[0] = outp[1];
    child_fds[1] = errp[1];
    pid = proc_spawn(cmd, x->envp, child_fds, 2);
    if (pid < 0) {
        run_start_failed(x, "fork");
        goto Error;
    }
    cmd_child.pid = pid;
    cmd_child.done = 0;
    close(outp[1]);
    close(errp[1]);
    outp[1] = errp[1] = -1;
    fds[0] = outp[0];
    fds[1] = errp[0];

    outcome = run_pump(x, fds, &follow_cmd, NULL, &res->ended);
    if (outcome == RUN_TIMEOUT)
        res->reason = SG_AGENT_REASON_TIMEOUT;
    else if (outcome == RUN_CAPPED)
        res->reason = SG_AGENT_REASON_OUTPUT_LIMIT;

    /* The shell is gone; take what is already in the pipes. */
    if (res->reason == SG_AGENT_REASON_EXITED && run_drain(x, fds))
        res->reason = SG_AGENT_REASON_OUTPUT_LIMIT;
    proc_kill_tree(kernel_live_pid());
    for (i = 0; i < 2; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
    }
    res->have_status = cmd_child.done;
    res->status = cmd_child.status;
    cmd_child.pid = -1;
    return 0;

Error:
    for (i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    return -1;
}

/* Turn a finished command into the EXIT message. Returns 1 when the EXEC is
 * over (EXIT sent), 0 when a successful setup lets the run go on. */
static int finish(run_t *x, cmd_result_t *res, const char *stage, int is_setup)
{
    int32_t code;
    uint32_t sig, reason = run_classify(x, res->have_status, res->status, res->reason, &code, &sig);

    if (is_setup && reason == SG_AGENT_REASON_EXITED) {
        if (code == 0)
            return 0;
        reason = SG_AGENT_REASON_SETUP_FAILED;
    }
    run_send_exit(x, code, sig, reason, stage, res->ended);
    return 1;
}

void exec_handle(uint32_t id, const uint8_t *payload, size_t len)
{
    sg_agent_fail_t f;
    run_t x;
    cmd_result_t res;
    char why[PATH_MAX + 128];
    int stateful, lost = 0;

    memset(&x, 0, sizeof(x));
    x.id = id;
    x.state = SG_AGENT_STATE_NONE;
    if (sg_agent_exec_req_decode(payload, len, &x.req, &f) != 0) {
        agent_send_fail(id, &f);
        return;
    }
    stateful = x.req.kernel_cmd[0] != '\0';
    x.envp = env_build(x.req.file_path);
    x.oom_before = run_oom_kills();
    /* The budget starts now: writing the file is part of the run's cost. */
    x.deadline = agent_now_ns() + (int64_t)x.req.timeout_ms * 1000000;
    if (stateful) {
        lost = kernel_reconcile(x.req.kernel_cmd);
        x.state = kernel_idle_state(lost);
    }

    if (!stateful && x.req.file_path[0] != '\0' && write_code(&x, why, sizeof(why)) != 0) {
        run_forward(&x, 2, (const uint8_t *)why, strlen(why));
        run_send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, "run", agent_now_ns());
        goto Exit;
    }
    if (x.req.setup_cmd[0] != '\0') {
        const char *stage = x.req.setup_stage[0] != '\0' ? x.req.setup_stage : "setup";
        int rc = run_one(&x, x.req.setup_cmd, &res);

        if (stateful) {
            /* Setup spares the kernel, but may have killed it itself. */
            lost |= kernel_reconcile(x.req.kernel_cmd);
            x.state = kernel_idle_state(lost);
        }
        if (rc != 0) {
            run_send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, stage, agent_now_ns());
            goto Exit;
        }
        if (finish(&x, &res, stage, 1))
            goto Exit;
    }
    if (stateful) {
        kernel_exec(&x, lost);
        goto Exit;
    }
    if (run_one(&x, x.req.run_cmd, &res) != 0) {
        run_send_exit(&x, -1, 0, SG_AGENT_REASON_START_FAILED, "run", agent_now_ns());
        goto Exit;
    }
    finish(&x, &res, "run", 0);

Exit:
    env_free(x.envp);
    sg_agent_exec_req_free(&x.req);
}
