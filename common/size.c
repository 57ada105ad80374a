/*
 * size.c - see size.h.  Fractions are allowed before a suffix ("1.5G")
 * because people write them; the result is rounded down to a byte.
 */
#include "size.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>

int gs_size_parse(const char *text, uint64_t *bytes)
{
    if (!text)
        return -1;
    while (isspace((unsigned char)*text))
        text++;
    if (!isdigit((unsigned char)*text))
        return -1; /* rejects "", "-1", "+1", "K" */
    char *end;
    double v = strtod(text, &end);
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) /* accept "16Gi" */
        end++;
    if (mul > 1 && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0' || !isfinite(v))
        return -1;
    double r = floor(v * mul);
    if (r >= 18446744073709551616.0)
        return -1;
    *bytes = (uint64_t)r;
    return 0;
}
