/* The call list's counts in docs/driver-api.md are the list's own
 * (include/gen-cuda.py --counts compares them). */
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
