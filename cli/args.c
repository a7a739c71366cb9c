/* Argument helpers shared by the subcommands, so every command reads a number
 * or a repeated option the same way: integers refuse overflow ("beyond 64
 * bits"), trailing text and values outside the command's range, and an option
 * that takes one value is refused when given twice (rather than "the last one
 * wins", which hides a typo in a long command line). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/error.h"

dt_status cli_parse_int(const char *option, const char *text, int64_t min, int64_t max, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (text[0] == '\0' || end == text || *end != '\0' || errno == ERANGE || v < min || v > max)
        return dt_errorf("%s '%s': expected an integer in [%lld, %lld]", option, text, (long long)min, (long long)max);
    *out = (int64_t)v;
    return DT_OK;
}

dt_status cli_once(cli_seen *seen, const char *option) {
    for (int i = 0; i < seen->n; i++)
        if (!strcmp(seen->options[i], option)) return dt_errorf("%s is given twice", option);
    if (seen->n < CLI_MAX_OPTIONS) seen->options[seen->n++] = option;
    return DT_OK;
}

dt_status cli_option_pair(int argc, char **argv, int *i, cli_seen *seen, const char *repeatable, const char **name,
                          const char **value) {
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0) return dt_errorf("unexpected argument '%s' (try --help)", a);
    if (*i + 1 >= argc) return dt_errorf("option %s needs a value", a);
    if ((!repeatable || strcmp(a, repeatable) != 0) && cli_once(seen, a) != DT_OK) return DT_ERR;
    *name = a;
    *value = argv[++*i];
    return DT_OK;
}
