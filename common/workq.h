/*
 * workq.h — a pool of worker threads for blocking work (Docker API calls,
 * SQLite), with results handed back to the event loop by message.
 *
 * A job's work() runs on a worker thread and must not touch h2o objects;
 * its done() runs later on the loop thread (through h2o_multithread), where
 * it may reply to requests and free the job. Jobs run in FIFO order of
 * submission, up to nthreads at once.
 */
#ifndef SANDGATE_WORKQ_H
#define SANDGATE_WORKQ_H

#include <h2o.h>
#include <h2o/multithread.h>

typedef struct sg_workq sg_workq_t;
typedef struct sg_job sg_job_t;

struct sg_job {
    h2o_multithread_message_t _msg; /* private: queue link, then message link */
    void (*work)(sg_job_t *job);    /* worker thread */
    void (*done)(sg_job_t *job);    /* loop thread; owns the job from here on */
};

/* Per-thread state handed to work(): each worker may keep a handle (a curl
 * easy handle, a database connection) here between jobs. */
void *sg_workq_thread_data(void);
void sg_workq_set_thread_data(void *data, void (*destroy)(void *));

sg_workq_t *sg_workq_create(h2o_loop_t *loop, int nthreads);
/* Loop thread only. */
void sg_workq_submit(sg_workq_t *q, sg_job_t *job);
/* Number of jobs submitted whose done() has not run yet. */
size_t sg_workq_pending(sg_workq_t *q);
/* Waits for the queued jobs to finish, stops the threads; jobs finished but
 * not yet delivered get their done() called here, on the calling thread. */
void sg_workq_destroy(sg_workq_t *q);

#endif
