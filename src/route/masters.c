/*
 * masters.c - the router's masters as addresses, for callers that examine
 * the deployment itself rather than send a queue's commands (dq_doctor).
 *
 * Part of the router (it reads router.h's nodes and slot map); it only
 * reads them, connects nothing and changes nothing.
 */
#include <string.h>

#include "router.h"

static int known(const dq__endpoint *eps, int n, const dq__node *node) {
    for (int i = 0; i < n; i++)
        if (strcmp(eps[i].name, node->ep.name) == 0) return 1;
    return 0;
}

int dq__route_masters(dq_client *c, dq__endpoint *eps, int max) {
    dq__router *rt = c->router;
    int n = 0;
    if (!rt) return 0;
    if (rt->topology != DQ__TOPO_CLUSTER) {
        if (!rt->master || max < 1) return 0;
        eps[n++] = rt->master->ep;
    } else {
        for (unsigned s = 0; s < DQ__SLOTS && n < max; s++) {
            const dq__node *node = rt->slots[s];
            if (node && !known(eps, n, node)) eps[n++] = node->ep;
        }
    }
    /* Examining is not routing: no ROLE check, no database. */
    for (int i = 0; i < n; i++) eps[i].check_master = 0, eps[i].db = 0;
    return n;
}
