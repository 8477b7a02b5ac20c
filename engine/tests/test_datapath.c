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

static void set4(struct fake_if *f, const char *name, const char *ip, const char *mask)
{
    memset(f, 0, sizeof *f);
    struct sockaddr_in *a = (struct sockaddr_in *)&f->addr, *m = (struct sockaddr_in *)&f->mask;
    a->sin_family = m->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a->sin_addr);
    inet_pton(AF_INET, mask, &m->sin_addr);
    f->ifa.ifa_name = (char *)name;
    f->ifa.ifa_addr = (struct sockaddr *)&f->addr;
    f->ifa.ifa_netmask = (struct sockaddr *)&f->mask;
}

static void set6(struct fake_if *f, const char *name, const char *ip, const char *mask)
{
    memset(f, 0, sizeof *f);
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&f->addr, *m = (struct sockaddr_in6 *)&f->mask;
    a->sin6_family = m->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &a->sin6_addr);
    inet_pton(AF_INET6, mask, &m->sin6_addr);
    f->ifa.ifa_name = (char *)name;
    f->ifa.ifa_addr = (struct sockaddr *)&f->addr;
    f->ifa.ifa_netmask = (struct sockaddr *)&f->mask;
}

static void chain(struct fake_if *f, int n)
{
    for (int i = 0; i < n; i++)
        f[i].ifa.ifa_next = i + 1 < n ? &f[i + 1].ifa : NULL;
}

static int pick(const char *hint_json, struct fake_if *ifs, char *addr, char *ifname)
{
    cJSON *h = cJSON_Parse(hint_json);
    int rc = fs_datapath_pick(h, &ifs[0].ifa, addr, 64, ifname, 64);
    cJSON_Delete(h);
    return rc;
}

int main(void)
{
    /* The client host: fabric0 10.201.0.1/24 (+ a global and a link-local IPv6), mgmt0. */
    struct fake_if client[5];
    set4(&client[0], "lo", "127.0.0.1", "255.0.0.0");
    set4(&client[1], "mgmt0", "10.202.0.1", "255.255.255.0");
    set4(&client[2], "fabric0", "10.201.0.1", "255.255.255.0");
    set6(&client[3], "fabric0", "fe80::1", "ffff:ffff:ffff:ffff::");
    set6(&client[4], "fabric0", "fd01::1", "ffff:ffff:ffff:ffff::");
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
    set4(&server[0], "lo", "127.0.0.1", "255.0.0.0");
    set4(&server[1], "mgmt0", "10.202.0.2", "255.255.255.0");
    set4(&server[2], "fabric0", "10.201.0.2", "255.255.255.0");
    set6(&server[3], "fabric0", "fd01::2", "ffff:ffff:ffff:ffff::");
    chain(server, 4);
    char addr[64], ifn[64];
    CHECK(pick("{\"device\":\"fabric0\",\"networks\":[\"10.201.0.1/24\"]}", server, addr, ifn) == 0);
    CHECK(strcmp(addr, "10.201.0.2") == 0 && strcmp(ifn, "fabric0") == 0);
    CHECK(pick("{\"networks\":[\"fd01::1/64\"]}", server, addr, ifn) == 0);
    CHECK(strcmp(addr, "fd01::2") == 0);
    /* The first network the server has wins; ones it lacks are skipped. */
    CHECK(pick("{\"networks\":[\"10.9.9.1/24\",\"10.202.0.1/24\"]}", server, addr, ifn) == 0);
    CHECK(strcmp(ifn, "mgmt0") == 0);
    /* A /20 on the client covers the server's 10.201.0.2 too. */
    CHECK(pick("{\"networks\":[\"10.201.7.7/20\"]}", server, addr, ifn) == 0);
    CHECK(strcmp(addr, "10.201.0.2") == 0);
    /* No network in common, or nothing usable: -1, the caller keeps the control address. */
    CHECK(pick("{\"networks\":[\"10.9.9.1/24\"]}", server, addr, ifn) == -1);
    const char *bad[] = {"null", "[]", "{}", "{\"networks\":\"10.201.0.1/24\"}",
                         "{\"networks\":[1,null,{}]}", "{\"networks\":[\"10.201.0.1\"]}",
                         "{\"networks\":[\"10.201.0.1/0\"]}", "{\"networks\":[\"10.201.0.1/33\"]}",
                         "{\"networks\":[\"10.201.0.1/24x\"]}", "{\"networks\":[\"/24\"]}",
                         "{\"networks\":[\"host.example/24\"]}", "{\"networks\":[\"fd01::1/129\"]}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(pick(bad[i], server, addr, ifn) == -1);
    CHECK(fs_datapath_pick(NULL, &server[0].ifa, addr, sizeof addr, ifn, sizeof ifn) == -1);
    return CHECK_DONE();
}
