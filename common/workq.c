#include "workq.h"
#include "util.h"

#include <pthread.h>
#include <stdlib.h>

struct sg_workq {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    h2o_linklist_t jobs; /* waiting for a worker */
    int stopping;
    int nthreads;
    pthread_t *threads;
    size_t pending;
    h2o_multithread_queue_t *mq;
    h2o_multithread_receiver_t receiver;
};

static __thread void *thread_data;
static __thread void (*thread_data_destroy)(void *);

void *sg_workq_thread_data(void)
{
    return thread_data;
}

void sg_workq_set_thread_data(void *data, void (*destroy)(void *))
{
    thread_data = data;
    thread_data_destroy = destroy;
}

static void *worker_main(void *arg)
{
    sg_workq_t *q = arg;

    pthread_mutex_lock(&q->mutex);
    for (;;) {
        while (h2o_linklist_is_empty(&q->jobs) && !q->stopping)
            pthread_cond_wait(&q->cond, &q->mutex);
        if (h2o_linklist_is_empty(&q->jobs))
            break;
        sg_job_t *job = H2O_STRUCT_FROM_MEMBER(sg_job_t, _msg.link, q->jobs.next);
        h2o_linklist_unlink(&job->_msg.link);
        pthread_mutex_unlock(&q->mutex);
        job->work(job);
        h2o_multithread_send_message(&q->receiver, &job->_msg);
        pthread_mutex_lock(&q->mutex);
    }
    pthread_mutex_unlock(&q->mutex);
    if (thread_data_destroy != NULL)
        thread_data_destroy(thread_data);
    return NULL;
}

static void deliver(sg_workq_t *q, h2o_linklist_t *messages)
{
    while (!h2o_linklist_is_empty(messages)) {
        sg_job_t *job = H2O_STRUCT_FROM_MEMBER(sg_job_t, _msg.link, messages->next);
        h2o_linklist_unlink(&job->_msg.link);
        q->pending--;
        job->done(job);
    }
}

static void on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    deliver(H2O_STRUCT_FROM_MEMBER(sg_workq_t, receiver, receiver), messages);
}

sg_workq_t *sg_workq_create(h2o_loop_t *loop, int nthreads)
{
    sg_workq_t *q = sg_xcalloc(1, sizeof(*q));
    pthread_mutex_init(&q->mutex, NULL);
    pthread_cond_init(&q->cond, NULL);
    h2o_linklist_init_anchor(&q->jobs);
    q->mq = h2o_multithread_create_queue(loop);
    h2o_multithread_register_receiver(q->mq, &q->receiver, on_messages);
    q->nthreads = nthreads;
    q->threads = sg_xcalloc((size_t)nthreads, sizeof(pthread_t));
    for (int i = 0; i < nthreads; i++)
        h2o_multithread_create_thread(&q->threads[i], NULL, worker_main, q);
    return q;
}

void sg_workq_submit(sg_workq_t *q, sg_job_t *job)
{
    pthread_mutex_lock(&q->mutex);
    h2o_linklist_insert(&q->jobs, &job->_msg.link);
    q->pending++;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->mutex);
}

size_t sg_workq_pending(sg_workq_t *q)
{
    return q->pending;
}

void sg_workq_destroy(sg_workq_t *q)
{
    pthread_mutex_lock(&q->mutex);
    q->stopping = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mutex);
    for (int i = 0; i < q->nthreads; i++)
        pthread_join(q->threads[i], NULL);
    deliver(q, &q->receiver._messages);
    h2o_multithread_unregister_receiver(q->mq, &q->receiver);
    h2o_multithread_destroy_queue(q->mq);
    pthread_mutex_destroy(&q->mutex);
    pthread_cond_destroy(&q->cond);
    free(q->threads);
    free(q);
}
