/* grow.c — see grow.h. */
#include "base/grow.h"

#include <stdint.h>
#include <stdlib.h>

int cw_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / (elem ? elem : 1))
            return -1;
        c *= 2;
    }
    void *q = realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}
