/* dbranch prepare --synthetic prefix-sum|two-hop: the record tasks of
 * data/synthetic.h written as a record token file (data/tokens.h), for the
 * studies that measure per-position accuracy (`dbranch eval` on a record file). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/output_dir.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "data/tokens.h"

static int fail(const char *message, const char *value) { return cli_prepare_fail(message, value); }

/* The value of an integer option, or the default when absent; -1 after an error (printed). */
static int option_int(int argc, char **argv, const char *name, int64_t min, int64_t max, int64_t *value) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], name)) {
            if (i + 1 >= argc) return fail("%s needs a value", name), -1;
            if (cli_parse_int(name, argv[i + 1], min, max, value) != DT_OK) return cli_fail("prepare"), -1;
        }
    return 0;
}

static const char *const known_options[] = {"--synthetic",   "--length",   "--modulus",   "--train-records",
                                            "--val-records", "--entities", "--relations", "--seed",
                                            "--out",         "--answers"};

int cmd_prepare_synthetic(int argc, char **argv) {
    const char *task = NULL, *out_path = NULL, *answers = "every";
    for (int i = 0; i < argc; i += 2) { /* every option takes a value */
        int known = 0;
        for (size_t k = 0; k < sizeof known_options / sizeof known_options[0]; k++)
            known |= !strcmp(argv[i], known_options[k]);
        if (!known) return fail("with --synthetic, unknown argument '%s' (try dbranch prepare --help)", argv[i]);
        if (i + 1 >= argc) return fail("%s needs a value", argv[i]);
        if (!strcmp(argv[i], "--synthetic")) task = argv[i + 1];
        if (!strcmp(argv[i], "--out")) out_path = argv[i + 1];
        if (!strcmp(argv[i], "--answers")) answers = argv[i + 1];
    }
    if (!out_path) return fail("%s", "--out PATH is required");
    if (dt_make_output_parent("--out", out_path) != DT_OK) return cli_fail("prepare");
    int64_t seed = 1;
    if (option_int(argc, argv, "--seed", 0, INT64_MAX, &seed)) return 1;
    data_records records;
    dt_status status;
    if (!strcmp(task, "prefix-sum")) {
        int64_t length = 32, modulus = 2, n_train = 20000, n_val = 1000;
        if (option_int(argc, argv, "--length", 1, 1 << 20, &length) ||
            option_int(argc, argv, "--modulus", 2, 10, &modulus) ||
            option_int(argc, argv, "--train-records", 1, INT32_MAX, &n_train) ||
            option_int(argc, argv, "--val-records", 1, INT32_MAX, &n_val))
            return 1;
        static const char *const formats[] = {"every", "final", "labels"}; /* data_answers_format order */
        int format = -1;
        for (int f = 0; f < 3; f++)
            if (!strcmp(answers, formats[f])) format = f;
        if (format < 0) return fail("--answers '%s' must be every, final or labels", answers);
        data_prefix_sum_options options = {length, modulus,        n_train,
                                           n_val,  (uint64_t)seed, (data_answers_format)format};
        status = data_synthetic_prefix_sum(&options, &records);
    } else if (!strcmp(task, "two-hop")) {
        int64_t entities = 200, relations = 4;
        if (option_int(argc, argv, "--entities", 2, 1 << 16, &entities) ||
            option_int(argc, argv, "--relations", 1, 256, &relations))
            return 1;
        if (strcmp(answers, "every") && strcmp(answers, "labels"))
            return fail("--answers '%s' must be every or labels for two-hop", answers);
        data_two_hop_options options = {entities, relations, (uint64_t)seed, !strcmp(answers, "labels")};
        status = data_synthetic_two_hop(&options, &records);
    } else {
        return fail("--synthetic '%s' is not a task (expected prefix-sum or two-hop)", task);
    }
    if (status != DT_OK) return cli_fail("prepare");
    data_tokenizer tok;
    status = records.byte_tokens ? data_tokenizer_byte(&tok) : data_tokenizer_external(&tok, records.vocab_size);
    if (status == DT_OK) {
        const data_record_layout layout = {
            records.record_len, {records.train_answer, records.val_answer}, {records.train_target, records.val_target}};
        status = data_tokens_write_records(out_path, &tok, records.train, records.n_train, records.val, records.n_val,
                                           records.source, &layout);
        data_tokenizer_free(&tok);
    }
    if (status == DT_OK)
        printf("wrote %s: %s; records of %lld tokens, %lld train + %lld val tokens, vocab %lld\n", out_path,
               records.source, (long long)records.record_len, (long long)records.n_train, (long long)records.n_val,
               (long long)records.vocab_size);
    data_records_free(&records);
    return status == DT_OK ? 0 : cli_fail("prepare");
}
