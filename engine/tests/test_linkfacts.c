/* SPDX-License-Identifier: BSD-3-Clause */
/* linkfacts.c: the link rate and PCIe link of the device that carried a run, against the real
 * sysfs layouts of tests/fixtures/sysfs (none of them holds a current_link_speed: host-no-rdma's
 * virtio eth0 reports speed -1, rxe-qemu-numa's virtio NIC sits on conventional PCI behind a PCI
 * expander bridge, ib-no-sm's PCI functions show their width but not their speed), and one tree
 * built here in a temporary directory in the layout of a ConnectX PCIe 4.0 x16 function (the
 * kernel's formats: current_link_speed "16.0 GT/s PCIe", current_link_width "16", speed in Mb/s). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "linkfacts.h"

static void use_fixture(const char *name)
{
    char root[512];
    snprintf(root, sizeof root, "%s/%s", FS_FIXTURES, name);
    setenv("FABSCOPE_SYSFS_ROOT", root, 1);
}

static int put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    /* every directory on the way */
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    if (!text)
        return mkdir(path, 0755);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

static int link_to(const char *root, const char *rel, const char *target)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    return symlink(target, path);
}

int main(void)
{
    struct fs_pcie p;
    char src[512];
    double gbps;
    const char *enc;

    /* The encodings: gen1/2 8b/10b, gen3-5 128b/130b, gen6 FLIT 242/256. */
    CHECK_NEAR(fs_pcie_usable_gbps(2.5, 1, &enc), 2.0, 1e-9);
    CHECK(strcmp(enc, "8b/10b") == 0);
    CHECK_NEAR(fs_pcie_usable_gbps(8, 8, &enc), 64 * 128.0 / 130, 1e-9);
    CHECK_NEAR(fs_pcie_usable_gbps(16, 16, &enc), 252.06, 0.01);
    CHECK(strcmp(enc, "128b/130b") == 0);
    CHECK_NEAR(fs_pcie_usable_gbps(64, 16, &enc), 968.0, 1e-9);
    CHECK(strstr(enc, "FLIT") != NULL);
    CHECK(fs_pcie_usable_gbps(0, 16, &enc) == 0 && enc == NULL);

    /* host-no-rdma: a virtio NIC whose driver reports speed -1; lo and ifb are virtual. */
    use_fixture("host-no-rdma");
    CHECK(fs_link_netdev_rate("eth0", &gbps, src, sizeof src) == -1 && gbps == 0);
    CHECK(strstr(src, "eth0 speed -1: unknown") != NULL);
    CHECK(fs_link_netdev_rate("lo", &gbps, src, sizeof src) == -1);
    CHECK(strcmp(src, "lo is virtual: no link rate") == 0);
    CHECK(fs_link_netdev_rate("nosuch0", &gbps, src, sizeof src) == -1 && strstr(src, "not found"));
    CHECK(fs_link_netdev_rate("", &gbps, src, sizeof src) == -1 && strstr(src, "no netdev"));
    CHECK(fs_link_pcie("net", "lo", &p, src, sizeof src) == -1 && strstr(src, "(virtual)"));
    /* eth0 -> virtio2 -> PCI function 0000:00:03.0, which has no PCIe link files */
    CHECK(fs_link_pcie("net", "eth0", &p, src, sizeof src) == -1);
    CHECK(strstr(src, "PCI function 0000:00:03.0 has no PCIe link") != NULL);

    /* rxe-qemu-numa: rxe0 has no bus device; its netdev's function is conventional PCI behind a
     * PCI expander bridge (0000:40:00.0), which has no PCIe link either. The JSON says both. */
    use_fixture("rxe-qemu-numa");
    CHECK(fs_link_pcie("infiniband", "rxe0", &p, src, sizeof src) == -1);
    CHECK(strstr(src, "rxe0 has no bus device (virtual)") != NULL);
    CHECK(fs_link_pcie("net", "eth0", &p, src, sizeof src) == -1);
    CHECK(strstr(src, "PCI function 0000:41:00.0 has no PCIe link") != NULL);
    cJSON *o = cJSON_CreateObject();
    const char *const cls[] = {"infiniband", "net"};
    const char *const rxe[] = {"rxe0", "eth0"};
    fs_link_add_pcie(o, cls, rxe, 2);
    fs_link_add_netdev_rate(o, "eth0");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "pcie")));
    const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(o, "pcie_source"));
    CHECK(why && strstr(why, "rxe0 has no bus device") && strstr(why, "; eth0's PCI function"));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(o, "rate_gbps")));
    why = cJSON_GetStringValue(cJSON_GetObjectItem(o, "rate_source"));
    CHECK(why && strstr(why, "netdev eth0 speed unreadable"));
    cJSON_Delete(o);

    /* ib-no-sm: the functions show current_link_width 8 but no current_link_speed. */
    use_fixture("ib-no-sm");
    CHECK(fs_link_pcie("infiniband", "mlx5_1", &p, src, sizeof src) == -1);
    CHECK(strstr(src, "PCI function 000a:11:00.1 of mlx5_1") && strstr(src, "width '8'") &&
          strstr(src, "unknown"));
    CHECK(strcmp(p.address, "000a:11:00.1") == 0 && p.width == 8);

    /* A ConnectX function on PCIe 4.0 x16 with a 100 GbE netdev, and an RDMA device on it; a
     * VLAN on the netdev (virtual, with a lower device) reports the lower device's speed; a veth
     * (virtual, no lower device) a nominal 10000 Mb/s that is no link rate. */
    char root[] = "/tmp/fs-linkfacts-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    const char *fn = "devices/pci0000:00/0000:00:01.0/0000:3b:00.0";
    char rel[256];
    snprintf(rel, sizeof rel, "%s/current_link_speed", fn);
    CHECK(put(root, rel, "16.0 GT/s PCIe\n") == 0);
    snprintf(rel, sizeof rel, "%s/current_link_width", fn);
    CHECK(put(root, rel, "16\n") == 0);
    snprintf(rel, sizeof rel, "%s/net/ens1f0np0/speed", fn);
    CHECK(put(root, rel, "100000\n") == 0);
    snprintf(rel, sizeof rel, "%s/infiniband/mlx5_0", fn);
    CHECK(put(root, rel, NULL) == 0);
    CHECK(put(root, "devices/virtual/net/vlan7/speed", "100000\n") == 0);
    CHECK(put(root, "devices/virtual/net/veth0/speed", "10000\n") == 0);
    CHECK(put(root, "class/net", NULL) == 0 && put(root, "class/infiniband", NULL) == 0);
    CHECK(link_to(root, "class/net/ens1f0np0",
                  "../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0/net/ens1f0np0") == 0);
    CHECK(link_to(root, "class/infiniband/mlx5_0",
                  "../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0/infiniband/mlx5_0") == 0);
    snprintf(rel, sizeof rel, "%s/net/ens1f0np0/device", fn);
    CHECK(link_to(root, rel, "../../../0000:3b:00.0") == 0);
    snprintf(rel, sizeof rel, "%s/infiniband/mlx5_0/device", fn);
    CHECK(link_to(root, rel, "../../../0000:3b:00.0") == 0);
    CHECK(link_to(root, "class/net/vlan7", "../../devices/virtual/net/vlan7") == 0);
    CHECK(link_to(root, "class/net/veth0", "../../devices/virtual/net/veth0") == 0);
    CHECK(link_to(root, "devices/virtual/net/vlan7/lower_ens1f0np0",
                  "../../../pci0000:00/0000:00:01.0/0000:3b:00.0/net/ens1f0np0") == 0);
    setenv("FABSCOPE_SYSFS_ROOT", root, 1);

    CHECK(fs_link_netdev_rate("ens1f0np0", &gbps, src, sizeof src) == 0 && gbps == 100.0);
    CHECK(strcmp(src, "netdev ens1f0np0 speed (sysfs)") == 0);
    CHECK(fs_link_netdev_rate("vlan7", &gbps, src, sizeof src) == 0 && gbps == 100.0);
    CHECK(strstr(src, "virtual, the speed of its lower device") != NULL);
    CHECK(fs_link_netdev_rate("veth0", &gbps, src, sizeof src) == -1 && gbps == 0);
    CHECK(strstr(src, "veth0 is virtual: its speed 10000 Mb/s is nominal") != NULL);
    CHECK(fs_link_pcie("infiniband", "mlx5_0", &p, src, sizeof src) == 0);
    CHECK(strcmp(p.address, "0000:3b:00.0") == 0 && p.gts == 16.0 && p.width == 16);
    CHECK_NEAR(p.usable_gbps, 16 * 16 * 128.0 / 130, 1e-9);
    CHECK(strstr(src, "class/infiniband/mlx5_0/device: PCI function 0000:3b:00.0") != NULL);
    o = cJSON_CreateObject();
    const char *const roce[] = {"mlx5_0", "ens1f0np0"};
    fs_link_add_pcie(o, cls, roce, 2);
    cJSON *x = cJSON_GetObjectItem(o, "pcie");
    CHECK(cJSON_IsObject(x));
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(x, "address")), "0000:3b:00.0") == 0);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(x, "width")) == 16);
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(x, "encoding")), "128b/130b") == 0);
    cJSON_Delete(o);
    /* The netdev's device is the same function (a VLAN has none: no PCI function). */
    CHECK(fs_link_pcie("net", "ens1f0np0", &p, src, sizeof src) == 0 && p.width == 16);
    CHECK(fs_link_pcie("net", "vlan7", &p, src, sizeof src) == -1);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", root);
    CHECK(system(cmd) == 0);
    return CHECK_DONE();
}
