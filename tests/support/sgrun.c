/* sgrun.c — see sgrun.h. */
#include "sgrun.h"

#include <stdlib.h>
#include <string.h>

#include "../../common/util.h"

int sgrun_group(const char *group, const char *names, const CMUnitTestFunction *fns, size_t n,
                CMFixtureFunction group_setup, CMFixtureFunction group_teardown, CMFixtureFunction setup,
                CMFixtureFunction teardown)
{
    struct CMUnitTest *tests = sg_xcalloc(n, sizeof(*tests));
    char *list = sg_xstrdup(names), *p = list;
    for (size_t i = 0; i < n; i++) {
        p += strspn(p, " ,");
        tests[i].name = p;
        p += strcspn(p, " ,");
        if (*p != '\0')
            *p++ = '\0';
        tests[i].test_func = fns[i];
        tests[i].setup_func = setup;
        tests[i].teardown_func = teardown;
    }
    int failed = _cmocka_run_group_tests(group, tests, n, group_setup, group_teardown);
    free(tests);
    free(list);
    return failed;
}
