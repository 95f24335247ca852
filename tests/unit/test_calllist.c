/* What is derived from the call list and kept elsewhere agrees with it:
 * docs/driver-api.md's counts (include/gen-cuda.py --counts), and the
 * driver functions the worker calls by hand (--host-fns). */
#include <stdio.h>
#include <stdlib.h>

#include "vcu_test.h"

TEST(call_list_counts)
{
    char cmd[3 * 4096];

    snprintf(cmd, sizeof(cmd),
             "python3 %s/include/gen-cuda.py --counts %s/include/cuda_calls.list "
             "%s/docs/driver-api.md",
             VCU_TEST_ROOT, VCU_TEST_ROOT, VCU_TEST_ROOT);
    ASSERT_EQ(0, system(cmd));
    return 0;
}

TEST(call_list_host_fns)
{
    char cmd[4 * 4096];

    snprintf(cmd, sizeof(cmd),
             "python3 %s/include/gen-cuda.py --host-fns %s/include/cuda_calls.list %s "
             "%s/host-backend/worker/*.[ch]",
             VCU_TEST_ROOT, VCU_TEST_ROOT, VCU_TEST_CUDA_INC, VCU_TEST_ROOT);
    ASSERT_EQ(0, system(cmd));
    return 0;
}
