/* SPDX-License-Identifier: BSD-3-Clause */
/* A stranger on an ofi msg data port (tests/integration/test_serve_session_mac.py): a libfabric
 * connection request to ADDR:PORT whose connection data is NOT the session's token (32 zero
 * bytes), as another program on the fabric would send. Prints "sent" once the request is out, then
 * what the listener did with it:
 *   rejected   - FI_ECONNREFUSED came back (exit 0)
 *   connected  - the listener took it (exit 1)
 *   timeout    - no answer within 10 s (exit 1)
 * Usage: fs-ofi-stranger PROVIDER ADDR PORT. Errors of its own: exit 2. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

static int die(const char *what, int rc)
{
    fprintf(stderr, "fs-ofi-stranger: %s: %s\n", what, fi_strerror(rc < 0 ? -rc : rc));
    return 2;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: fs-ofi-stranger PROVIDER ADDR PORT\n");
        return 2;
    }
    struct fi_info *hints = fi_allocinfo(), *info = NULL;
    if (!hints)
        return 2;
    hints->ep_attr->type = FI_EP_MSG;
    hints->caps = FI_MSG;
    hints->mode = ~0ull;
    hints->fabric_attr->prov_name = strdup(argv[1]);
    int rc = fi_getinfo(FI_VERSION(1, 9), argv[2], argv[3], 0, hints, &info);
    if (rc)
        return die("fi_getinfo", rc);
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_eq *eq;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fi_eq_attr eq_attr = {.wait_obj = FI_WAIT_UNSPEC};
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .size = 16};
    if ((rc = fi_fabric(info->fabric_attr, &fabric, NULL)))
        return die("fi_fabric", rc);
    if ((rc = fi_eq_open(fabric, &eq_attr, &eq, NULL)))
        return die("fi_eq_open", rc);
    if ((rc = fi_domain(fabric, info, &domain, NULL)))
        return die("fi_domain", rc);
    if ((rc = fi_cq_open(domain, &cq_attr, &cq, NULL)))
        return die("fi_cq_open", rc);
    if ((rc = fi_endpoint(domain, info, &ep, NULL)))
        return die("fi_endpoint", rc);
    if ((rc = fi_ep_bind(ep, &eq->fid, 0)) || (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)))
        return die("fi_ep_bind", rc);
    if ((rc = fi_enable(ep)))
        return die("fi_enable", rc);
    static const unsigned char not_the_token[32];
    if ((rc = fi_connect(ep, info->dest_addr, not_the_token, sizeof not_the_token)))
        return die("fi_connect", rc);
    /* The request is on its way: the test lets the real client go on only now. */
    puts("sent");
    fflush(stdout);
    uint32_t event;
    struct fi_eq_cm_entry entry;
    ssize_t n = fi_eq_sread(eq, &event, &entry, sizeof entry, 10000, 0);
    if (n == -FI_EAVAIL) {
        struct fi_eq_err_entry e = {0};
        fi_eq_readerr(eq, &e, 0);
        if (e.err == FI_ECONNREFUSED || e.err == ECONNREFUSED) {
            puts("rejected");
            return 0;
        }
        printf("error %s\n", fi_strerror(e.err));
        return 1;
    }
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT) {
        puts("timeout");
        return 1;
    }
    if (n < 0)
        return die("fi_eq_sread", (int)n);
    puts(event == FI_CONNECTED ? "connected" : "other event");
    return 1;
}
