/* Two bugs tests/fuzz found in core (issue 18):
 *  - an integer attribute stored as a huge float (1e300, NaN) was converted
 *    to int64 before its range was checked: undefined behaviour (fails under
 *    the sanitized build of .ci/run); now an error naming the attribute;
 *  - an error quoting a file's text (a tokenizer name "bpe\n") was two lines;
 *    every message is now one line whatever it quotes. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/h5.h"

static hid_t memory_file(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl, 1 << 16, 0);
    hid_t file = H5Fcreate("core-reliability.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    cr_assert(file >= 0);
    return file;
}

Test(core_reliability, integer_attribute_out_of_range_is_an_error) {
    hid_t file = memory_file();
    const double values[] = {1e300, -1e300, NAN, INFINITY, 9.3e18};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(h5_write_attr_double(file, "n_layer", values[i]), DT_OK);
        int64_t out = 0;
        cr_assert_eq(h5_read_attr_int(file, "n_layer", &out), DT_ERR, "%g read as %lld", values[i], (long long)out);
        cr_assert(strstr(dt_error_message(), "n_layer"), "%s", dt_error_message());
    }
    /* An integer attribute reads exactly, even where double cannot hold it. */
    const int64_t exact = INT64_MAX - 3;
    cr_assert_eq(h5_write_attr_int(file, "checksum", exact), DT_OK);
    int64_t out = 0;
    cr_assert_eq(h5_read_attr_int(file, "checksum", &out), DT_OK, "%s", dt_error_message());
    cr_assert_eq(out, exact);
    H5Fclose(file);
}

Test(core_reliability, error_messages_are_one_line) {
    dt_errorf("unknown tokenizer '%s'", "bpe\nsecond line\r");
    cr_assert(strchr(dt_error_message(), '\n') == NULL && strchr(dt_error_message(), '\r') == NULL, "%s",
              dt_error_message());
    cr_assert(strstr(dt_error_message(), "unknown tokenizer 'bpe?second line?'"), "%s", dt_error_message());
    dt_error_context("file\n.h5");
    cr_assert(strchr(dt_error_message(), '\n') == NULL, "%s", dt_error_message());
}
