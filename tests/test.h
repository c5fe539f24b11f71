/* test.h — a TAP-like harness for cwen's unit tests (after picotest).
 * ok(cond, fmt...) records a check; note() prints context; skip() records a
 * reason; done() prints "N passed, N failed" and returns the exit status. */
#ifndef CW_TEST_H
#define CW_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int test_pass_, test_fail_, test_skip_;

static __attribute__((unused)) void test_report_(int cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static __attribute__((unused)) void test_report_(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (cond) {
        test_pass_++;
    } else {
        test_fail_++;
        printf("not ok %d - %s:%d: ", test_pass_ + test_fail_, file, line);
        vprintf(fmt, ap);
        printf("\n");
    }
    va_end(ap);
}

#define ok(cond, ...) test_report_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define note(...) (printf("# "), printf(__VA_ARGS__), printf("\n"))
#define skip(...) (test_skip_++, printf("# SKIP "), printf(__VA_ARGS__), printf("\n"))

static inline int done(void)
{
    printf("%d passed, %d failed, %d skipped\n", test_pass_, test_fail_, test_skip_);
    return test_fail_ ? 1 : 0;
}

/* Test environment: set by CTest (CMakeLists.txt). */
static inline const char *test_env(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

#endif
