/*
 * test_capacity.c — the proxy's container cap (proxy/sessions/capacity.h): exact
 * when many threads take and give at once, the pool's headroom, and a give
 * without a take never drives the count below zero.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "capacity.h"
#include "sgrun.h"

#define THREADS 8
#define ROUNDS 20000
#define CAP 5

static int in_use;   /* __atomic: slots held by the threads right now */
static int overflow; /* __atomic: times more than CAP were held */
static int granted;  /* __atomic */

static void *hammer(void *arg)
{
    for (int i = 0; i < ROUNDS; i++) {
        if (sg_capacity_take() != 0)
            continue;
        __atomic_fetch_add(&granted, 1, __ATOMIC_SEQ_CST);
        if (__atomic_add_fetch(&in_use, 1, __ATOMIC_SEQ_CST) > CAP)
            __atomic_fetch_add(&overflow, 1, __ATOMIC_SEQ_CST);
        __atomic_fetch_sub(&in_use, 1, __ATOMIC_SEQ_CST);
        sg_capacity_give();
    }
    return NULL;
}

static void test_exact_under_threads(void **state)
{
    pthread_t t[THREADS];
    sg_capacity_init(CAP);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer, NULL), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(overflow, 0);
    assert_true(granted > 0);
    assert_int_equal(sg_capacity_used(), 0);
}

static void test_take_give_headroom(void **state)
{
    sg_capacity_init(4);
    assert_int_equal(sg_capacity_max(), 4);
    /* the pool's way: while `headroom` slots stay free */
    assert_int_equal(sg_capacity_take_spare(1), 0);
    assert_int_equal(sg_capacity_take_spare(1), 0);
    assert_int_equal(sg_capacity_take_spare(1), 0);
    assert_int_equal(sg_capacity_take_spare(1), -1);
    /* a request takes the last one; then nothing */
    assert_int_equal(sg_capacity_take(), 0);
    assert_int_equal(sg_capacity_take(), -1);
    assert_int_equal(sg_capacity_used(), 4);
    for (int i = 0; i < 4; i++)
        sg_capacity_give();
    assert_int_equal(sg_capacity_used(), 0);
    /* a give too many is refused (and logged), the count stays at 0 */
    sg_capacity_give();
    assert_int_equal(sg_capacity_used(), 0);
    assert_int_equal(sg_capacity_take(), 0);
    sg_capacity_give();
}

int main(void)
{
    return SG_RUN_TESTS("capacity", NULL, NULL, NULL, NULL, test_exact_under_threads, test_take_give_headroom);
}
