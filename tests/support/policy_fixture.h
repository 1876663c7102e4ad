/*
 * policy_fixture.h — the request policy (validate.h) that the validation
 * tests and the JSON body fuzz target judge bodies against: the proxy's
 * defaults, with the CPU cap each one names.
 */
#ifndef SANDGATE_TEST_POLICY_FIXTURE_H
#define SANDGATE_TEST_POLICY_FIXTURE_H

#include "validate.h"

#define SGTEST_POLICY(max_cpus_)                                                                                       \
    {                                                                                                                  \
        .defaults = {.timeout_s = 30,                                                                                  \
                     .memory_mb = 512,                                                                                 \
                     .cpus = 1.0,                                                                                      \
                     .network = 0,                                                                                     \
                     .pids = 128,                                                                                      \
                     .output_bytes = 1 << 20,                                                                          \
                     .tmpfs_mb = 256},                                                                                 \
        .max_timeout_s = 300, .max_memory_mb = 4096, .max_cpus = (max_cpus_), .allow_network = 0,                      \
    }

#endif
