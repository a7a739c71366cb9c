/* dbranch check-reference: compare a model against a reference file (SPEC §5).
 *
 *   dbranch check-reference FILE.h5 [--quiet]
 *
 * Prints one line per compared quantity (name, max abs error, scale, error
 * relative to the scale, PASS/FAIL) and a summary; --quiet prints only the
 * failing lines and the summary. Exit 0 when everything passes, 1 when some
 * quantity fails, 2 when the file cannot be checked (one-line error). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/error.h"
#include "models/reference.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch check-reference FILE.h5 [--quiet]\n\n"
                 "Loads the model in FILE.h5 (/config, /params) and /ref/tokens, runs forward and backward,\n"
                 "and compares losses, alpha, logits and every gradient with /ref/* under the SPEC §5\n"
                 "tolerances. Exit status: 0 all pass, 1 some quantity fails, 2 the file cannot be checked.\n");
}

int cmd_check_reference(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *path = NULL;
    int quiet = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "dbranch check-reference: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        } else if (path) {
            fprintf(stderr, "dbranch check-reference: one file at a time (got '%s' and '%s')\n", path, argv[i]);
            return 2;
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        fprintf(stderr, "dbranch check-reference: missing FILE.h5 (try --help)\n");
        return 2;
    }

    model_reference_report report;
    if (model_reference_check(path, &report) != DT_OK) {
        fprintf(stderr, "dbranch check-reference: %s\n", dt_error_message());
        return 2;
    }
    char line[512];
    for (int i = 0; i < report.n_lines; i++)
        if (!quiet || !report.lines[i].pass)
            printf("%s\n", model_reference_line_format(&report.lines[i], line, sizeof line));
    if (report.n_lines == 0)
        printf("%s: no /ref quantities to compare\n", path);
    else
        printf("%s: %d of %d quantities pass%s\n", path, report.n_lines - report.n_failed, report.n_lines,
               report.n_failed ? "" : " (all)");
    int failed = report.n_failed > 0 || report.n_lines == 0;
    model_reference_report_free(&report);
    return failed ? 1 : 0;
}
