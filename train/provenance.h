/* The provenance record of a training run: which source (commit, version),
 * which machine (CPU model, the ISA features the kernels can use, thread
 * count, BLIS version, how loaded it was at the start), which configuration (the resolved model and run
 * config, every key) and when (UTC start time). Without it a committed log
 * cannot say what produced it.
 *
 * `dbranch train` writes it twice: as OUT/provenance.json and as the first
 * record of the JSON-lines log ({"type":"provenance",...}, one line). A
 * resumed run appends a new record to the log (the log then holds one per
 * process, in order) and rewrites provenance.json with it; its "resume"
 * member names the checkpoint and step it continued from.
 *
 * Record: {"type":"provenance","commit":"f7d5a46-dirty","version":"0.1.0",
 *          "start_utc":"2026-12-01T08:30:00Z","cpu":"...","isa":{"avx512f":true,
 *          "avx512_bf16":false,"amx_bf16":false},"compiled_for":{...same keys},
 *          "threads":2,"processes":1,"load_avg":[1m,5m,15m] | null,"blis_version":"0.9.0",
 *          "bf16_engine":"widen" | "onednn (brg:avx512_core_amx)","bf16_attention":"amx" | "fp32",
 *          "resume":null | {"checkpoint":"...","step":N},"total_steps":N,"tokens_per_step":N,
 *          "config":{"model":{"family":"llama",...},"data":{...},"train":{...}}}
 * Config values that read as JSON numbers are numbers, the rest strings.
 * "commit" comes from `git describe --always --dirty` at build time
 * ("unknown" when the source is not a git checkout). */
#ifndef TRAIN_PROVENANCE_H
#define TRAIN_PROVENANCE_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "train/run_config.h"

typedef struct train_provenance {
    char commit[64];
    char version[32];
    char start_utc[32];                                   /* ISO 8601, seconds, "Z" */
    char cpu[64];                                         /* cpuid brand string ("unknown" off x86) */
    int avx512f, avx512_bf16, amx_bf16;                   /* the CPU has them (cpuid) */
    int built_avx512f, built_avx512_bf16, built_amx_bf16; /* the build targets them (-march) */
    char kernel_level[8]; /* the instruction-set level the kernels ran at (kernels/isa.h: after DBRANCH_ISA) */
    double load_avg[3];   /* the machine's 1-, 5-, 15-minute load averages at the start (machine_load.h) */
    int threads;
    int processes; /* of the job (mpirun -n N; 1 for one process) */
    char blis_version[32];
    char bf16_engine[80];    /* the bf16 product engine (kernels/gemm_bf16.h), with oneDNN's kernel */
    char bf16_attention[16]; /* the bf16 attention engine, "amx", "avx512_bf16" or "fp32" (kernels/attention_amx.h; the
                              * record of a run: what its bf16 steps run, fp32 for an fp32 run) */
    const char *config_text; /* resolved config as INI text (train_config_format), not owned */
    const char *resume_path; /* checkpoint resumed from, or NULL */
    int64_t resume_step;
    int64_t total_steps, tokens_per_step;
} train_provenance;

/* Fills the machine and build fields and the start time (now); the caller
 * sets config_text, resume_*, total_steps and tokens_per_step. */
void train_provenance_collect(train_provenance *p, int threads);

/* The record as one JSON line (with its newline) on f; DT_ERR when f reports
 * a write error (where names the stream in the message). */
dt_status train_provenance_write(FILE *f, const train_provenance *p, const char *where);

/* Writes the record to path (path.tmp, then renamed). */
dt_status train_provenance_save(const char *path, const train_provenance *p);

/* What the trainer calls once its log is open: collects the record for run
 * cfg (config_text its train_config_format text; resume_path NULL or the
 * checkpoint continued at resume_step) and writes it to cfg->out_dir/
 * provenance.json and to log_file (the open JSON-lines log, or NULL;
 * log_path names it in errors); processes: the job's process count. */
dt_status train_provenance_record(const train_config *cfg, const char *config_text, const char *resume_path,
                                  int64_t resume_step, FILE *log_file, const char *log_path, int processes);

#endif
