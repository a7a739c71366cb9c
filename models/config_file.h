/* Config files: the one INI reader every subcommand uses (`train`, `info`,
 * `bench decode`, ...), so a file means the same model everywhere.
 *
 * A config file is INI text with the sections [model] (the keys of
 * models/config_keys.def), [data] and [train] (the run's, train/run_config.h).
 * The reader refuses what is not a config file, with one line naming the file
 * (and the line): a directory, a file with NUL bytes or over 1 MiB, a file
 * that sets no key (empty, /dev/null), a malformed header (`[train]]`), a key
 * outside any section, an unknown section, a key set twice in one file (or a
 * value continued on an indented line). Model keys not set take their
 * family's defaults, and a file without `family =` is nanogpt. */
#ifndef MODEL_CONFIG_FILE_H
#define MODEL_CONFIG_FILE_H

#include "core/error.h"
#include "models/config.h"

/* Called once per `key = value` in file order; an error stops the parse and
 * is reported with the file and line. */
typedef dt_status (*config_file_entry_fn)(void *user, const char *section, const char *key, const char *value);

/* Reads the file at path (checks above) and calls on_entry for each key. */
dt_status config_file_read(const char *path, config_file_entry_fn on_entry, void *user);
/* The same over text already in memory; origin names it in errors. An empty
 * text is allowed here (a preset may set nothing). */
dt_status config_file_parse(const char *text, const char *origin, config_file_entry_fn on_entry, void *user);

/* The model of a config file: its [model] keys over *config (start from
 * model_config_default(FAMILY_NANOGPT)); [data] and [train] are skipped here
 * (the train layer reads them), every other rule above applies. Not validated:
 * apply overrides, then model_config_validate. */
dt_status model_config_load_file(model_config *config, const char *path);

/* One override "key=value" or "model.key=value" (as `--set`). */
dt_status model_config_set_assignment(model_config *config, const char *assignment);

#endif
