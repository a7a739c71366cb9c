/* train.precision = auto, the default (issue 12): validation replaces it by
 * what this CPU runs fastest (bf16 with AMX-BF16, or AVX512_BF16 on an AMD,
 * and AVX-512 allowed, else fp32), so the config a run prints and stores never says auto;
 * a checkpoint keeps the precision its run started with on a CPU that would
 * decide otherwise; and a checkpoint older than the key reads as float32. */
#include <criterion/criterion.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"
#include "kernels/isa.h"
#include "models/model_io.h"
#include "support/letters.h"
#include "support/scratch.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

static char work_dir[64];
static char data_path[128];

static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "train_precision_auto");
    snprintf(data_path, sizeof data_path, "%s/data.h5", work_dir);
    test_write_letters(data_path, 5, 12, 4000, 600);
}

static void teardown(void) {
    k_isa_reset();
    (void)k_isa_from_environment(); /* the level the suite forces, if any */
    test_remove_dir(work_dir);
}

TestSuite(train_precision_auto, .init = setup, .fini = teardown, .timeout = 60);

/* The CPU's vendor string, read here rather than through kernels/isa.c. */
static int cpu_is_amd(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    __cpuid(0, a, b, c, d);
    char vendor[13];
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    return !strcmp(vendor, "AuthenticAMD");
#else
    return 0;
#endif
}

/* The CPU's answer, from its feature bits and vendor (what the help text
 * promises): bf16 on AMX, or on AVX512_BF16 where it is AMD's. */
static train_precision expected_auto(void) {
    const k_cpu_bf16 cpu = k_cpu_bf16_features();
    const int units_pay = cpu.amx_bf16 || (cpu.avx512_bf16 && cpu_is_amd());
    return units_pay && k_isa_active() >= K_ISA_AVX512 ? TRAIN_PRECISION_BF16 : TRAIN_PRECISION_FP32;
}

Test(train_precision_auto, the_fast_dot_flag_is_amds_avx512_bf16) {
    const k_cpu_bf16 cpu = k_cpu_bf16_features();
    cr_assert_eq(cpu.bf16_dot_doubles_fma, cpu.avx512_bf16 && cpu_is_amd(), "avx512_bf16 %d, AMD %d, flag %d",
                 cpu.avx512_bf16, cpu_is_amd(), cpu.bf16_dot_doubles_fma);
}

/* A one-layer nanoGPT on the letters, 4 steps of 2 windows, precision as the text leaves it. */
static train_config tiny_config(const char *out_name, const char *precision_line) {
    char text[1024];
    snprintf(text, sizeof text,
             "[model]\nvocab_size = 256\nblock_size = 16\nn_layer = 1\nn_head = 2\nd_model = 16\n"
             "[data]\npath = %s\n"
             "[train]\nbatch_size = 2\ntokens = 128\neval_windows = 2\nthreads = 1\nout_dir = %s/%s\n%s",
             data_path, work_dir, out_name, precision_line);
    train_config cfg = train_config_default();
    cr_assert_eq(train_config_parse_string(&cfg, text, "tiny"), DT_OK, "%s", dt_error_message());
    return cfg;
}

/* Two steps of cfg, saved; the checkpoint's path into path. */
static void checkpoint_of(const train_config *cfg, char *path, size_t size) {
    trainer t;
    cr_assert_eq(trainer_init(&t, cfg, NULL), DT_OK, "%s", dt_error_message());
    train_step_record record;
    for (int s = 0; s < 2; s++)
        cr_assert_eq(trainer_step(&t, &record), DT_OK, "%s", dt_error_message());
    cr_assert_eq(trainer_save(&t), DT_OK, "%s", dt_error_message());
    snprintf(path, size, "%s", t.checkpoint_path);
    trainer_free(&t);
}

Test(train_precision_auto, validation_decides_auto_for_this_cpu) {
    train_config cfg = tiny_config("decide", "");
    cr_assert_eq(cfg.precision, TRAIN_PRECISION_AUTO, "a config that does not say has auto");
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    cr_assert_eq(cfg.precision, expected_auto(), "auto became %s", train_precision_name(cfg.precision));
    char text[8192];
    train_config_format(&cfg, text, sizeof text);
    cr_assert(strstr(text, expected_auto() == TRAIN_PRECISION_BF16 ? "precision = bf16\n" : "precision = fp32\n"),
              "the printed config names the decision:\n%s", text);

    /* Below AVX-512 (DBRANCH_ISA=avx2, as the tests force it) auto is float32 on any CPU. */
    cr_assert_eq(k_isa_force(K_ISA_AVX2), DT_OK, "%s", dt_error_message());
    train_config forced = tiny_config("forced", "");
    cr_assert_eq(train_config_validate(&forced), DT_OK, "%s", dt_error_message());
    cr_assert_eq(forced.precision, TRAIN_PRECISION_FP32);

    /* A pinned value is left as it is. */
    train_config pinned = tiny_config("pinned", "precision = bf16\n");
    cr_assert_eq(train_config_validate(&pinned), DT_OK, "%s", dt_error_message());
    cr_assert_eq(pinned.precision, TRAIN_PRECISION_BF16, "a CPU below AVX-512 still runs bf16 when asked");
}

/* Two steps of a run whose config says `precision_line`, saved, then read
 * back and validated with AVX2 forced, where auto is float32 on any CPU: the
 * precision the run started with stands, and the stored text names it. */
static void check_resumed_precision(const char *out_name, const char *precision_line) {
    train_config cfg = tiny_config(out_name, precision_line);
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    const train_precision started = cfg.precision;
    char path[TRAIN_PATH_MAX + 32];
    checkpoint_of(&cfg, path, sizeof path);
    const k_isa level = k_isa_active();
    cr_assert_eq(k_isa_force(K_ISA_AVX2), DT_OK, "%s", dt_error_message());
    train_state state;
    char *text = NULL;
    cr_assert_eq(train_checkpoint_read_state(path, &state, &text), DT_OK, "%s", dt_error_message());
    char line[64];
    snprintf(line, sizeof line, "precision = %s\n", train_precision_name(started));
    cr_assert_not_null(strstr(text, line), "the stored config names %s:\n%s", train_precision_name(started), text);
    free(text);
    train_config stored = train_config_default();
    cr_assert_eq(train_checkpoint_read_config(path, &stored), DT_OK, "%s", dt_error_message());
    cr_assert_eq(stored.precision, started, "stored %s, read back %s", train_precision_name(started),
                 train_precision_name(stored.precision));
    cr_assert_eq(train_config_validate(&stored), DT_OK, "%s", dt_error_message());
    cr_assert_eq(stored.precision, started, "validating the resumed config decides nothing again");
    cr_assert_eq(k_isa_force(level), DT_OK, "%s", dt_error_message());
}

Test(train_precision_auto, a_checkpoint_keeps_the_precision_its_run_started_with) {
    /* Where auto is bf16 (AMX, AMD's AVX512_BF16) this is the case that
     * matters: a decision that the resuming CPU would not make again. */
    check_resumed_precision("started", "");
    /* Where auto is fp32 already, a run started in bf16 is the nearest case:
     * its stored decision is in the same form, one the resume must not undo. */
    check_resumed_precision("started_bf16", "precision = bf16\n");
}

/* The checkpoint of a pinned bf16 run rewritten as one from before the key:
 * no /train/run_config and an INI text without the precision line. */
Test(train_precision_auto, a_checkpoint_older_than_the_key_reads_as_float32) {
    train_config cfg = tiny_config("old", "precision = bf16\n");
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    char path[TRAIN_PATH_MAX + 32];
    checkpoint_of(&cfg, path, sizeof path);
    train_state state;
    char *text = NULL;
    cr_assert_eq(train_checkpoint_read_state(path, &state, &text), DT_OK, "%s", dt_error_message());
    char *line = strstr(text, "precision = bf16\n");
    cr_assert_not_null(line, "%s", text);
    memmove(line, line + strlen("precision = bf16\n"), strlen(line + strlen("precision = bf16\n")) + 1);
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    cr_assert(file >= 0);
    hid_t group = H5Gopen2(file, "train", H5P_DEFAULT);
    cr_assert(group >= 0);
    cr_assert(H5Ldelete(group, "run_config", H5P_DEFAULT) >= 0);
    cr_assert(H5Adelete(group, "config") >= 0 && H5Adelete(group, "config_checksum") >= 0);
    cr_assert_eq(h5_write_attr_string(group, "config", text), DT_OK, "%s", dt_error_message());
    cr_assert_eq(h5_write_attr_int(group, "config_checksum", (int64_t)model_checksum(text, strlen(text))), DT_OK);
    H5Gclose(group);
    H5Fclose(file);
    free(text);
    train_config stored = train_config_default();
    cr_assert_eq(train_checkpoint_read_config(path, &stored), DT_OK, "%s", dt_error_message());
    cr_assert_eq(stored.precision, TRAIN_PRECISION_FP32, "read %s", train_precision_name(stored.precision));
}
