/* The Decode-Branch's learned scales along training (issue 16): the L2 norms
 * of the coupling vectors, per kind and as a mean over the layers that have
 * one, and the Frobenius norm of the branch's token embedding. The coupling
 * vectors start at zero (SPEC §3), so their norms say how far the branch has
 * moved off the primary path; the eval records of the training log carry
 * them (train/log.h). Read from the weights; no allocation. */
#ifndef TRAIN_BRANCH_NORMS_H
#define TRAIN_BRANCH_NORMS_H

#include "models/model.h"

typedef struct train_branch_norms {
    /* Mean over layers of ||couple_q||, ||couple_hidden|| (dense layers only),
     * ||couple_out||; NAN when no layer has that vector (no branch, couple = off). */
    double couple_q, couple_hidden, couple_out;
    /* ||branch.tok_emb||_F (tok_emb itself when branch_emb = shared); NAN without a branch. */
    double branch_emb;
} train_branch_norms;

train_branch_norms train_branch_norms_of(const model *m);

#endif
