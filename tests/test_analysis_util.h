/* What the analysis tests share: a closeness assertion that prints the expression. */
#ifndef TEST_ANALYSIS_UTIL_H
#define TEST_ANALYSIS_UTIL_H

#include <criterion/criterion.h>
#include <math.h>

#define assert_close(got, want, tol)                                                                                   \
    do {                                                                                                               \
        double g_ = (got), w_ = (want);                                                                                \
        cr_assert(fabs(g_ - w_) <= (tol), "%s = %.15g, want %.15g", #got, g_, w_);                                     \
    } while (0)

#endif
