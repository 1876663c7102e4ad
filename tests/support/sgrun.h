/*
 * sgrun.h — the one main() of every suite: a cmocka group run from a plain
 * list of test functions, each with the same per-test fixtures.
 *
 *     return SG_RUN_TESTS("proxy_api", group_setup, group_teardown, NULL, after_test,
 *                         test_a, test_b, test_c);
 *
 * Each test is named after its function, as cmocka_unit_test() names it.
 * A suite whose tests differ in fixtures or come from a table builds its
 * own CMUnitTest array.
 */
#ifndef SANDGATE_SGRUN_H
#define SANDGATE_SGRUN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* Run fns[0..n) as the group `group`; `names` is their comma-separated list
 * (the stringified argument list of SG_RUN_TESTS). Returns the number of
 * failed tests, as cmocka_run_group_tests does. */
int sgrun_group(const char *group, const char *names, const CMUnitTestFunction *fns, size_t n,
                CMFixtureFunction group_setup, CMFixtureFunction group_teardown, CMFixtureFunction setup,
                CMFixtureFunction teardown);

#define SG_RUN_TESTS(group, group_setup, group_teardown, setup, teardown, ...)                                         \
    sgrun_group((group), #__VA_ARGS__, (const CMUnitTestFunction[]){__VA_ARGS__},                                      \
                sizeof((const CMUnitTestFunction[]){__VA_ARGS__}) / sizeof(CMUnitTestFunction), (group_setup),         \
                (group_teardown), (setup), (teardown))

#endif
