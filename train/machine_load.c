/* train_machine_load (machine_load.h). */
#include "train/machine_load.h"

#include <math.h>
#include <stdlib.h>

void train_machine_load(double out[3]) {
    if (getloadavg(out, 3) != 3) out[0] = out[1] = out[2] = NAN;
}
