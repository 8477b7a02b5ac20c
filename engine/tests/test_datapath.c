/* SPDX-License-Identifier: BSD-3-Clause */
/* datapath: the client's --device networks, and the server's pick among its own addresses. The
 * interface lists are built by hand, shaped as getifaddrs returns them (a netns host with a
 * fabric and a management link), so every case runs without the interfaces existing. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <string.h>

#include "check.h"
#include "datapath.h"

struct fake_if {
    struct ifaddrs ifa;
    struct sockaddr_storage addr, mask;
};

/* One interface address: `family` AF_INET or AF_INET6, address and netmask as text. */
static void set_if(struct fake_if *f, int family, const char *name, const char *ip, const char *mask)
{
    memset(f, 0, sizeof *f);
    f->addr.ss_family = f->mask.ss_family = (sa_family_t)family;
    void *a = family == AF_INET ? (void *)&((struct sockaddr_in *)&f->addr)->sin_addr
                                : (void *)&((struct sockaddr_in6 *)&f->addr)->sin6_addr;
    void *m = family == AF_INET ? (void *)&((struct sockaddr_in *)&f->mask)->sin_addr
                                : (void *)&((struct sockaddr_in6 *)&f->mask)->sin6_addr;
    inet_pton(family, ip, a);
    inet_pton(family, mask, m);
    f->ifa.ifa_name = (char *)name;
    f->ifa.ifa_addr = (struct sockaddr *)&f->addr;
    f->ifa.ifa_netmask = (struct sockaddr *)&f->mask;
}

static void chain(struct fake_if *f, int n)
{
    for (int i = 0; i < n; i++)
        f[i].ifa.ifa_next = i + 1 < n ? &f[i + 1].ifa : NULL;
}

static int pick(const char *hint_json, struct fake_if *ifs, char *addr)
{
    cJSON *h = cJSON_Parse(hint_json);
    int rc = fs_datapath_pick(h, &ifs[0].ifa, addr, 64);
    cJSON_Delete(h);
    return rc;
}

int main(void)
{
    /* The client host: fabric0 10.201.0.1/24 (+ a global and a link-local IPv6), mgmt0. */
    struct fake_if client[5];
    set_if(&client[0], AF_INET, "lo", "127.0.0.1", "255.0.0.0");
    set_if(&client[1], AF_INET, "mgmt0", "10.202.0.1", "255.255.255.0");
    set_if(&client[2], AF_INET, "fabric0", "10.201.0.1", "255.255.255.0");
    set_if(&client[3], AF_INET6, "fabric0", "fe80::1", "ffff:ffff:ffff:ffff::");
    set_if(&client[4], AF_INET6, "fabric0", "fd01::1", "ffff:ffff:ffff:ffff::");
    chain(client, 5);
    cJSON *o = cJSON_CreateObject();
    CHECK(fs_datapath_describe("fabric0", &client[0].ifa, o) == 2);
    char *txt = cJSON_PrintUnformatted(o);
    CHECK(strcmp(txt, "{\"device\":\"fabric0\",\"networks\":[\"10.201.0.1/24\",\"fd01::1/64\"]}") == 0);
    cJSON_free(txt);
    cJSON_Delete(o);
    /* Not a netdev here (an RDMA device name, a typo): nothing is said. */
    o = cJSON_CreateObject();
    CHECK(fs_datapath_describe("mlx5_0", &client[0].ifa, o) == 0);
    CHECK(cJSON_GetArraySize(o) == 0);
    CHECK(fs_datapath_describe("", &client[0].ifa, o) == 0);
    cJSON_Delete(o);

    /* The server host: the client reached it over mgmt0; its fabric0 is 10.201.0.2. */
    struct fake_if server[4];
    set_if(&server[0], AF_INET, "lo", "127.0.0.1", "255.0.0.0");
    set_if(&server[1], AF_INET, "mgmt0", "10.202.0.2", "255.255.255.0");
    set_if(&server[2], AF_INET, "fabric0", "10.201.0.2", "255.255.255.0");
    set_if(&server[3], AF_INET6, "fabric0", "fd01::2", "ffff:ffff:ffff:ffff::");
    chain(server, 4);
    char addr[64];
    CHECK(pick("{\"device\":\"fabric0\",\"networks\":[\"10.201.0.1/24\"]}", server, addr) == 0);
    CHECK(strcmp(addr, "10.201.0.2") == 0); /* fabric0's, not mgmt0's */
    CHECK(pick("{\"networks\":[\"fd01::1/64\"]}", server, addr) == 0);
    CHECK(strcmp(addr, "fd01::2") == 0);
    /* The first network the server has wins; ones it lacks are skipped. */
    CHECK(pick("{\"networks\":[\"10.9.9.1/24\",\"10.202.0.1/24\"]}", server, addr) == 0);
    CHECK(strcmp(addr, "10.202.0.2") == 0); /* mgmt0's */
    /* A /20 on the client covers the server's 10.201.0.2 too. */
    CHECK(pick("{\"networks\":[\"10.201.7.7/20\"]}", server, addr) == 0);
    CHECK(strcmp(addr, "10.201.0.2") == 0);
    /* No network in common, or nothing usable: -1, the caller keeps the control address. */
    CHECK(pick("{\"networks\":[\"10.9.9.1/24\"]}", server, addr) == -1);
    const char *bad[] = {"null", "[]", "{}", "{\"networks\":\"10.201.0.1/24\"}",
                         "{\"networks\":[1,null,{}]}", "{\"networks\":[\"10.201.0.1\"]}",
                         "{\"networks\":[\"10.201.0.1/0\"]}", "{\"networks\":[\"10.201.0.1/33\"]}",
                         "{\"networks\":[\"10.201.0.1/24x\"]}", "{\"networks\":[\"/24\"]}",
                         "{\"networks\":[\"host.example/24\"]}", "{\"networks\":[\"fd01::1/129\"]}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(pick(bad[i], server, addr) == -1);
    CHECK(fs_datapath_pick(NULL, &server[0].ifa, addr, sizeof addr) == -1);
    CHECK(strcmp(fs_datapath_owner(&server[0].ifa, "10.201.0.2"), "fabric0") == 0);
    CHECK(strcmp(fs_datapath_owner(&server[0].ifa, "fd01::2"), "fabric0") == 0);
    CHECK(fs_datapath_owner(&server[0].ifa, "10.201.0.9") == NULL);
    /* An interface's own address (ofi binds a domain that is an interface with it): IPv4 first. */
    CHECK(fs_datapath_addr_of(&server[0].ifa, "fabric0", addr, sizeof addr) == 0);
    CHECK(strcmp(addr, "10.201.0.2") == 0);
    CHECK(fs_datapath_addr_of(&server[0].ifa, "mgmt0", addr, sizeof addr) == 0);
    CHECK(strcmp(addr, "10.202.0.2") == 0);
    CHECK(fs_datapath_addr_of(&server[0].ifa, "nosuch0", addr, sizeof addr) == -1);

    /* RDMA devices by the netdev they send through, in real sysfs layouts: rxe0 of the
     * Soft-RoCE guest (ndevs/0 = eth0) and a pod's mlx5_1 (only entries 4-7 populated: net2). */
    char nd[64];
    CHECK(fs_datapath_rdma_netdev(FS_FIXTURES "/rxe-qemu/sys", "rxe0", nd, sizeof nd) == 0);
    CHECK(strcmp(nd, "eth0") == 0);
    CHECK(fs_datapath_rdma_netdev(FS_FIXTURES "/mlx5-roce-pod-gids", "mlx5_1", nd, sizeof nd) == 0);
    CHECK(strcmp(nd, "net2") == 0);
    CHECK(fs_datapath_rdma_netdev(FS_FIXTURES "/rxe-qemu/sys", "rxe9", nd, sizeof nd) == -1);
    CHECK(fs_datapath_rdma_netdev(FS_FIXTURES "/rxe-qemu/sys", "../rxe0", nd, sizeof nd) == -1);

    /* A list: rxe0 through eth0 (an address here), fabric0 itself, and a name with no network. */
    struct fake_if two[3];
    set_if(&two[0], AF_INET, "eth0", "192.168.77.2", "255.255.255.0");
    set_if(&two[1], AF_INET, "fabric0", "10.201.0.1", "255.255.255.0");
    set_if(&two[2], AF_INET, "eth1", "192.168.78.2", "255.255.255.0");
    chain(two, 3);
    o = cJSON_CreateObject();
    CHECK(fs_datapath_describe_list("rxe0,fabric0,rxe9", &two[0].ifa, FS_FIXTURES "/rxe-qemu/sys", o) == 2);
    txt = cJSON_PrintUnformatted(o);
    CHECK(strcmp(txt, "{\"devices\":[{\"device\":\"rxe0\",\"netdev\":\"eth0\",\"networks\":"
                      "[\"192.168.77.2/24\"]},{\"device\":\"fabric0\",\"netdev\":\"fabric0\","
                      "\"networks\":[\"10.201.0.1/24\"]},{\"device\":\"rxe9\"}]}") == 0);
    cJSON_free(txt);
    /* Each entry is a hint of its own: the server picks its address on rxe0's network. */
    CHECK(fs_datapath_pick(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "devices"), 0),
                           &two[0].ifa, addr, sizeof addr) == 0);
    CHECK(strcmp(addr, "192.168.77.2") == 0);
    cJSON_Delete(o);
    return CHECK_DONE();
}
