/* The machine's load average (getloadavg(3): /proc/loadavg on Linux),
 * recorded beside a run's timings: on a shared machine a run's tokens/s says
 * as much about its neighbours as about the code, and a reader comparing two runs' speed needs
 * to know whether one of them shared its cores (a CI build, another study
 * lane). Logged in the provenance record at the start and on every eval
 * record (docs/DECISIONS.md, "The load beside the timings"). */
#ifndef TRAIN_MACHINE_LOAD_H
#define TRAIN_MACHINE_LOAD_H

/* The 1-, 5- and 15-minute load averages into out; all NAN (null in the
 * log) where the system does not give them (no /proc in a sandbox). */
void train_machine_load(double out[3]);

#endif
