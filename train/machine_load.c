/* train_machine_load (machine_load.h). */
#include "train/machine_load.h"

#include <math.h>
#include <stdio.h>

void train_machine_load(double out[3]) {
    out[0] = out[1] = out[2] = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    double one, five, fifteen;
    if (fscanf(f, "%lf %lf %lf", &one, &five, &fifteen) == 3 && one >= 0 && five >= 0 && fifteen >= 0) {
        out[0] = one;
        out[1] = five;
        out[2] = fifteen;
    }
    fclose(f);
}
