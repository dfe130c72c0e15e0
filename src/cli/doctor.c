/*
 * doctor.c - the deployment's health as the long-running commands report it.
 *
 * Owns the report at the start of take, work, schedule and serve: the
 * library's examination (dq_doctor; DQ_DOCTOR_QUICK but for serve, which
 * shows every finding: a start then never waits on a replica nor sends a
 * probe), each unsafe finding as one stderr line, clock included (a server clock more
 * than a second from this host's is unsafe: the line names both clocks).
 * The command runs on whatever it hears: a report is advice, never a
 * refusal. 'delayq doctor' (cmd_doctor.c) prints every finding instead.
 */
#include <stddef.h>

#include "cli/cli.h"

void cli_doctor_start(dq_client *c, unsigned flags, dq_finding **out, size_t *n) {
    dq_finding *f = NULL;
    size_t nf = 0;

    if (dq_doctor(c, flags, &f, &nf) != 0)
        f = NULL, nf = 0; /* the command's own calls will say what is wrong */
    for (size_t i = 0; i < nf; i++)
        if (f[i].status == DQ_FINDING_UNSAFE)
            cli_err("unsafe: %s: %s (see 'delayq doctor')", f[i].check, f[i].detail);
    if (out) {
        *out = f;
        *n = nf;
    } else {
        dq_findings_free(f, nf);
    }
}
