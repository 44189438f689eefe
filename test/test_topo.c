/* Placement from hwloc (src/topo/hwloc.c): this host with real bindings,
 * synthetic topologies (hwloc's own descriptions and HWLOC_* variables), and
 * hand-written XML topologies with GPUs and NICs on different sockets
 * (test/data/). Each Criterion test runs in its own process, so bindings,
 * environment variables and the cached topology do not leak between tests. */
#include "topo/topo.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <hwloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

/* hwloc honours these itself: an inherited one would replace this host. */
static void clear_hwloc_env(void)
{
    static const char *const vars[] = {"HWLOC_XMLFILE",    "HWLOC_SYNTHETIC",  "HWLOC_THISSYSTEM", "HWLOC_FSROOT",
                                       "HWLOC_CPUID_PATH", "HWLOC_COMPONENTS", "HWLOC_ALLOW"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

/* Criterion's test process has a helper thread, and hwloc reads a process's
 * binding as the union of its threads' (as a launcher binds a rank: every
 * thread), so bind every thread, not only this one. */
static void bind_all_threads(hwloc_const_bitmap_t cpus)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int i;
    hwloc_bitmap_foreach_begin(i, cpus) CPU_SET(i, &set);
    hwloc_bitmap_foreach_end();
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        cr_assert_eq(sched_setaffinity((pid_t)atoi(e->d_name), sizeof(set), &set), 0, "sched_setaffinity(%s)",
                     e->d_name);
    }
    closedir(d);
}

static hwloc_bitmap_t bitmap(const char *list)
{
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    cr_assert_not_null(b);
    cr_assert_eq(hwloc_bitmap_list_sscanf(b, list), 0, "bad list %s", list);
    return b;
}

/* An independent view of this host (no I/O) for the expected values. */
static hwloc_topology_t host_topology(void)
{
    hwloc_topology_t t;
    cr_assert_eq(hwloc_topology_init(&t), 0);
    cr_assert_eq(hwloc_topology_load(t), 0);
    return t;
}

static int expected_numa(hwloc_topology_t t, hwloc_const_bitmap_t set)
{
    hwloc_obj_t n = NULL, best = NULL;
    while ((n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n)))
        if (hwloc_bitmap_isincluded(set, n->cpuset) &&
            (!best || hwloc_bitmap_weight(n->cpuset) < hwloc_bitmap_weight(best->cpuset)))
            best = n;
    return best ? (int)best->os_index : -1;
}

static int expected_socket(hwloc_topology_t t, hwloc_const_bitmap_t set)
{
    hwloc_obj_t p = NULL;
    while ((p = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PACKAGE, p)))
        if (hwloc_bitmap_isincluded(set, p->cpuset)) return (int)p->logical_index;
    return -1;
}

static void data_path(char *buf, size_t len, const char *name)
{
    const char *top = getenv("top_srcdir"); /* set by make check */
    snprintf(buf, len, "%s/test/data/%s", top && *top ? top : ".", name);
}

static void load_data_xml(const char *name)
{
    char path[4096];
    data_path(path, sizeof(path), name);
    cr_assert_eq(weft_topo_load_xml(path), WEFT_SUCCESS, "loading %s", path);
}

static weft_placement_t place(const char *list)
{
    weft_placement_t p;
    hwloc_bitmap_t b = bitmap(list);
    memset(&p, 0x5a, sizeof(p));
    cr_assert_eq(weft_topo_placement_for_cpuset(b, &p), WEFT_SUCCESS, "placing %s", list);
    hwloc_bitmap_free(b);
    return p;
}

static void expect(const char *list, int numa, int socket, const char *gpu, const char *gpu_pci, const char *nic,
                   const char *nic_pci)
{
    weft_placement_t p = place(list);
    cr_expect_eq(p.numa, numa, "%s: numa %d, want %d", list, p.numa, numa);
    cr_expect_eq(p.socket, socket, "%s: socket %d, want %d", list, p.socket, socket);
    cr_expect_str_eq(p.cpuset, list);
    cr_expect_str_eq(p.gpu, gpu, "%s: gpu %s, want %s", list, p.gpu, gpu);
    cr_expect_str_eq(p.gpu_pci, gpu_pci, "%s: gpu bus %s, want %s", list, p.gpu_pci, gpu_pci);
    cr_expect_str_eq(p.nic, nic, "%s: nic %s, want %s", list, p.nic, nic);
    cr_expect_str_eq(p.nic_pci, nic_pci, "%s: nic bus %s, want %s", list, p.nic_pci, nic_pci);
}

/* ---- this host ----------------------------------------------------------- */

Test(topo_host, placement_succeeds, .init = clear_hwloc_env, .timeout = 30)
{
    weft_placement_t p;
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_neq(p.cpuset[0], '\0');
    cr_assert_geq(p.ncpus, 1);
    cr_assert_lt(strlen(p.cpuset), sizeof(p.cpuset));
    hwloc_bitmap_t b = bitmap(p.cpuset);
    cr_assert_eq(hwloc_bitmap_weight(b), p.ncpus, "cpuset %s vs ncpus %d", p.cpuset, p.ncpus);
    hwloc_topology_t t = host_topology();
    cr_assert(hwloc_bitmap_isincluded(b, hwloc_topology_get_allowed_cpuset(t)), "%s not allowed", p.cpuset);
    cr_assert_eq(p.numa, expected_numa(t, b));
    cr_assert_eq(p.socket, expected_socket(t, b));
    cr_assert_str_neq(p.nic, "lo");
    if (p.gpu_pci[0]) cr_assert_eq(strlen(p.gpu_pci), 12, "gpu bus id %s", p.gpu_pci);
    if (p.nic_pci[0]) cr_assert_eq(strlen(p.nic_pci), 12, "nic bus id %s", p.nic_pci);
    char line[256];
    weft_topo_placement_format(&p, line, sizeof(line));
    cr_log_info("this process: %s", line);
    hwloc_bitmap_free(b);
    hwloc_topology_destroy(t);
}

/* The topology is cached, the binding is not: binding after the first
 * query is seen by the next one. */
Test(topo_host, bound_to_one_cpu, .init = clear_hwloc_env, .timeout = 30)
{
    weft_placement_t p;
    hwloc_topology_t t = host_topology();
    int cpu = hwloc_bitmap_first(hwloc_topology_get_allowed_cpuset(t)); /* 0 on the test VM */
    cr_assert_geq(cpu, 0);
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);

    hwloc_bitmap_t one = hwloc_bitmap_alloc();
    hwloc_bitmap_only(one, (unsigned)cpu);
    bind_all_threads(one);
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    char want[16];
    snprintf(want, sizeof(want), "%d", cpu);
    cr_assert_eq(p.ncpus, 1);
    cr_assert_str_eq(p.cpuset, want);
    cr_assert_eq(p.numa, expected_numa(t, one));
    cr_assert_eq(p.socket, expected_socket(t, one));
    if (hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE) == 1 && hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE) == 1) {
        cr_assert_eq(p.numa, 0); /* the 1-socket, 1-NUMA-node test VM */
        cr_assert_eq(p.socket, 0);
    }
    hwloc_bitmap_free(one);
    hwloc_topology_destroy(t);
}

Test(topo_host, unbound_is_whole_machine, .init = clear_hwloc_env, .timeout = 30)
{
    weft_placement_t p;
    hwloc_topology_t t = host_topology();
    hwloc_const_bitmap_t all = hwloc_topology_get_allowed_cpuset(t);
    bind_all_threads(all);
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    char want[64];
    hwloc_bitmap_list_snprintf(want, sizeof(want), all);
    cr_assert_str_eq(p.cpuset, want);
    cr_assert_eq(p.ncpus, hwloc_bitmap_weight(all));
    cr_assert_eq(p.numa, expected_numa(t, all));
    cr_assert_eq(p.socket, expected_socket(t, all));
    if (hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE) == 1 && hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE) == 1) {
        cr_assert_eq(p.numa, 0);
        cr_assert_eq(p.socket, 0);
    }
    hwloc_topology_destroy(t);
}

Test(topo_host, release_and_reload, .init = clear_hwloc_env, .timeout = 30)
{
    weft_placement_t a, b;
    weft_topo_release(); /* nothing loaded yet: harmless */
    cr_assert_eq(weft_topo_placement(&a), WEFT_SUCCESS);
    weft_topo_release();
    weft_topo_release();
    cr_assert_eq(weft_topo_placement(&b), WEFT_SUCCESS);
    cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0);
    weft_topo_release();
}

Test(topo_host, bad_arguments, .init = clear_hwloc_env, .timeout = 30)
{
    weft_placement_t p, q;
    hwloc_bitmap_t b = bitmap("0");
    cr_assert_eq(weft_topo_placement(NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_topo_placement_for_cpuset(NULL, &p), WEFT_ERR_ARG);
    cr_assert_eq(weft_topo_placement_for_cpuset(b, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_topo_load_xml(NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_topo_load_synthetic(NULL), WEFT_ERR_ARG);

    /* A failed load keeps the topology in use. */
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_eq(weft_topo_load_xml("/nonexistent/topology.xml"), WEFT_ERR_ARG);
    cr_assert_eq(weft_topo_load_synthetic("not a topology"), WEFT_ERR_ARG);
    cr_assert_eq(weft_topo_placement(&q), WEFT_SUCCESS);
    cr_assert_eq(memcmp(&p, &q, sizeof(p)), 0);

    /* A binding with no PU of the topology. */
    hwloc_bitmap_t far = bitmap("100000-100003");
    cr_assert_eq(weft_topo_placement_for_cpuset(far, &p), WEFT_ERR_ARG);
    cr_assert_str_neq(weft_last_error(), "");
    hwloc_bitmap_free(far);
    hwloc_bitmap_free(b);
}

/* ---- format -------------------------------------------------------------- */

static weft_placement_t sample(void)
{
    weft_placement_t p;
    memset(&p, 0, sizeof(p));
    p.numa = 0;
    p.socket = 1;
    p.ncpus = 4;
    strcpy(p.cpuset, "0-3");
    strcpy(p.gpu, "cuda0");
    strcpy(p.gpu_pci, "0000:3b:00.0");
    strcpy(p.nic, "mlx5_0");
    strcpy(p.nic_pci, "0000:5e:00.0");
    return p;
}

Test(topo_format, renders_all_fields, .init = clear_hwloc_env, .timeout = 30)
{
    char buf[256];
    weft_placement_t p = sample();
    weft_topo_placement_format(&p, buf, sizeof(buf));
    cr_assert_str_eq(buf, "numa 0 socket 1 cpus 0-3 (4) gpu cuda0 [0000:3b:00.0] nic mlx5_0 [0000:5e:00.0]");

    /* Spanning binding, no GPU, a NIC without a known bus id. */
    p.numa = -1;
    p.socket = -1;
    p.ncpus = 8;
    strcpy(p.cpuset, "0-7");
    p.gpu[0] = p.gpu_pci[0] = '\0';
    strcpy(p.nic, "eth0");
    p.nic_pci[0] = '\0';
    weft_topo_placement_format(&p, buf, sizeof(buf));
    cr_assert_str_eq(buf, "numa - socket - cpus 0-7 (8) gpu - nic eth0");

    weft_topo_placement_format(NULL, buf, sizeof(buf));
    cr_assert_str_eq(buf, "");
}

Test(topo_format, small_buffers_never_overflow, .init = clear_hwloc_env, .timeout = 30)
{
    char buf[32];
    weft_placement_t p = sample();

    memset(buf, '#', sizeof(buf));
    weft_topo_placement_format(&p, buf, 8);
    cr_assert_str_eq(buf, "numa 0 ");
    for (size_t i = 8; i < sizeof(buf); i++)
        cr_assert_eq(buf[i], '#', "byte %zu written", i);

    memset(buf, '#', sizeof(buf));
    weft_topo_placement_format(&p, buf, 1);
    cr_assert_eq(buf[0], '\0');
    for (size_t i = 1; i < sizeof(buf); i++)
        cr_assert_eq(buf[i], '#', "byte %zu written", i);

    memset(buf, '#', sizeof(buf));
    weft_topo_placement_format(&p, buf, 0);
    for (size_t i = 0; i < sizeof(buf); i++)
        cr_assert_eq(buf[i], '#', "byte %zu written", i);
    weft_topo_placement_format(&p, NULL, 8);
}

/* Strings without their NUL are read no further than their fields. */
Test(topo_format, unterminated_fields, .init = clear_hwloc_env, .timeout = 30)
{
    weft_placement_t p;
    char buf[512];
    memset(&p, 'x', sizeof(p));
    p.numa = 3;
    p.socket = 2;
    p.ncpus = 1;
    weft_topo_placement_format(&p, buf, sizeof(buf));
    char want[512];
    snprintf(want, sizeof(want), "numa 3 socket 2 cpus %.64s (1) gpu %.32s [%.16s] nic %.32s [%.16s]", p.cpuset, p.gpu,
             p.gpu_pci, p.nic, p.nic_pci);
    cr_assert_str_eq(buf, want);
}

/* ---- synthetic topologies -------------------------------------------------- */

Test(topo_synthetic, two_sockets, .init = clear_hwloc_env, .timeout = 30)
{
    cr_assert_eq(weft_topo_load_synthetic("pack:2 numa:1 core:4 pu:1"), WEFT_SUCCESS);
    expect("0-3", 0, 0, "", "", "", "");
    expect("4-7", 1, 1, "", "", "", "");
    expect("2-5", -1, -1, "", "", "", "");
    expect("5", 1, 1, "", "", "", "");

    /* PUs the topology lacks are ignored. */
    weft_placement_t p = place("6-15");
    cr_assert_str_eq(p.cpuset, "6-7");
    cr_assert_eq(p.ncpus, 2);
    cr_assert_eq(p.socket, 1);

    /* Not this machine: hwloc cannot read a binding against it, so the
     * process is placed on the whole (allowed) topology. */
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_str_eq(p.cpuset, "0-7");
    cr_assert_eq(p.ncpus, 8);
    cr_assert_eq(p.numa, -1);
    cr_assert_eq(p.socket, -1);

    /* Release goes back to this host and its real binding. */
    weft_topo_release();
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    hwloc_topology_t t = host_topology();
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    cr_assert_eq(hwloc_get_cpubind(t, bound, HWLOC_CPUBIND_PROCESS), 0);
    char want[64];
    hwloc_bitmap_list_snprintf(want, sizeof(want), bound);
    cr_assert_str_eq(p.cpuset, want);
    hwloc_bitmap_free(bound);
    hwloc_topology_destroy(t);
}

/* No NUMA level and no packages' memory: hwloc adds one machine-wide NUMA
 * node; there is no PCI at all. */
Test(topo_synthetic, no_numa_no_pci, .init = clear_hwloc_env, .timeout = 30)
{
    cr_assert_eq(weft_topo_load_synthetic("pack:2 core:2 pu:1"), WEFT_SUCCESS);
    expect("0-1", 0, 0, "", "", "", "");
    expect("1-2", 0, -1, "", "", "", "");
    cr_assert_eq(weft_topo_load_synthetic("core:4 pu:2"), WEFT_SUCCESS); /* no package either */
    expect("0-7", 0, -1, "", "", "", "");
}

Test(topo_synthetic, long_cpuset_is_cut_at_an_element, .init = clear_hwloc_env, .timeout = 30)
{
    cr_assert_eq(weft_topo_load_synthetic("pack:1 numa:1 core:64 pu:1"), WEFT_SUCCESS);
    hwloc_bitmap_t even = hwloc_bitmap_alloc();
    for (unsigned i = 0; i < 64; i += 2)
        hwloc_bitmap_set(even, i);
    weft_placement_t p;
    cr_assert_eq(weft_topo_placement_for_cpuset(even, &p), WEFT_SUCCESS);
    cr_assert_eq(p.ncpus, 32);
    size_t n = strlen(p.cpuset);
    cr_assert_lt(n, sizeof(p.cpuset));
    cr_assert_gt(n, 4);
    cr_assert_str_eq(p.cpuset + n - 4, ",...", "cpuset %s", p.cpuset);
    cr_assert_eq(strncmp(p.cpuset, "0,2,4,6,8,10,12,", 16), 0, "cpuset %s", p.cpuset);
    p.cpuset[n - 4] = '\0'; /* what remains is whole elements of the set */
    hwloc_bitmap_t head = bitmap(p.cpuset);
    cr_assert(hwloc_bitmap_isincluded(head, even));
    hwloc_bitmap_free(head);
    hwloc_bitmap_free(even);
}

/* hwloc 2.9 honours HWLOC_SYNTHETIC and HWLOC_XMLFILE itself when weft
 * loads "this host". Such a topology is not this system: the binding
 * cannot be read, and the placement falls back to the allowed set. */
Test(topo_synthetic, hwloc_environment_is_honoured, .init = clear_hwloc_env, .timeout = 30)
{
    weft_placement_t p;
    setenv("HWLOC_SYNTHETIC", "pack:2 numa:1 core:4 pu:1", 1);
    weft_topo_release();
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_str_eq(p.cpuset, "0-7");
    cr_assert_eq(p.numa, -1);
    cr_assert_eq(p.socket, -1);
    p = place("4-7");
    cr_assert_eq(p.numa, 1);
    unsetenv("HWLOC_SYNTHETIC");

    char path[4096];
    data_path(path, sizeof(path), "topo-2socket-gpu-nic.xml");
    setenv("HWLOC_XMLFILE", path, 1);
    weft_topo_release();
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_str_eq(p.cpuset, "0-7");
    cr_assert_str_eq(p.gpu, "cuda0");
    cr_assert_str_eq(p.nic, "mlx5_0");
    unsetenv("HWLOC_XMLFILE");
}

/* With HWLOC_THISSYSTEM=1 hwloc reads the real binding and maps its PU
 * numbers onto the synthetic topology: one PU per package here, so binding
 * to CPU 1 is package 1. */
Test(topo_synthetic, thissystem_reads_the_real_binding, .init = clear_hwloc_env, .timeout = 30)
{
    hwloc_topology_t t = host_topology();
    hwloc_bitmap_t two = bitmap("0-1");
    int have = hwloc_bitmap_isincluded(two, hwloc_topology_get_allowed_cpuset(t));
    hwloc_topology_destroy(t);
    if (!have) {
        hwloc_bitmap_free(two);
        cr_skip_test("needs CPUs 0 and 1");
    }
    setenv("HWLOC_THISSYSTEM", "1", 1);
    setenv("HWLOC_SYNTHETIC", "pack:2 numa:1 core:1 pu:1", 1);
    weft_topo_release();
    hwloc_bitmap_t one = bitmap("1");
    bind_all_threads(one);
    weft_placement_t p;
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_str_eq(p.cpuset, "1");
    cr_assert_eq(p.numa, 1);
    cr_assert_eq(p.socket, 1);
    bind_all_threads(two);
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_eq(p.numa, -1);
    cr_assert_eq(p.socket, -1);
    hwloc_bitmap_free(one);
    hwloc_bitmap_free(two);
}

/* ---- XML topologies with devices ------------------------------------------- */

/* Package 0 (PUs 0-3): A100 "cuda1" (also card1, nvml1, opencl0d1), RDMA
 * "mlx5_1" (and ib1), Ethernet "eno1", the BMC's VGA "card0". Package 1
 * (PUs 4-7): "cuda0", "mlx5_0". Names cross the sockets on purpose. */
Test(topo_xml, two_sockets_gpu_and_nic_per_socket, .init = clear_hwloc_env, .timeout = 30)
{
    load_data_xml("topo-2socket-gpu-nic.xml");
    expect("0-3", 0, 0, "cuda1", "0000:3b:00.0", "mlx5_1", "0000:18:00.0");
    expect("0", 0, 0, "cuda1", "0000:3b:00.0", "mlx5_1", "0000:18:00.0");
    expect("4-7", 1, 1, "cuda0", "0000:af:00.0", "mlx5_0", "0000:5e:00.0");
    expect("6", 1, 1, "cuda0", "0000:af:00.0", "mlx5_0", "0000:5e:00.0");
    /* Spanning both: equally close, so by name. */
    expect("2-5", -1, -1, "cuda0", "0000:af:00.0", "mlx5_0", "0000:5e:00.0");
    expect("0-7", -1, -1, "cuda0", "0000:af:00.0", "mlx5_0", "0000:5e:00.0");

    char line[128];
    weft_placement_t p = place("0-3");
    weft_topo_placement_format(&p, line, sizeof(line));
    cr_assert_str_eq(line, "numa 0 socket 0 cpus 0-3 (4) gpu cuda1 [0000:3b:00.0] nic mlx5_1 [0000:18:00.0]");

    /* The process itself: unbound on a topology that is not this machine. */
    cr_assert_eq(weft_topo_placement(&p), WEFT_SUCCESS);
    cr_assert_str_eq(p.cpuset, "0-7");
    cr_assert_str_eq(p.gpu, "cuda0");
    cr_assert_str_eq(p.nic, "mlx5_0");
}

/* Two groups of two packages (2 PUs each); package OS indexes run 3..0 and
 * NUMA OS indexes are 1,0,3,2, so logical and OS indexes differ. AMD GPUs
 * rsmi1 on package 1 and rsmi0 on package 2; Ethernet only: eth1 on
 * package 1, eth0 on package 3. A package without a device of its own gets
 * the one in its group before the one that comes first by name. */
Test(topo_xml, nearest_falls_back_to_the_same_group, .init = clear_hwloc_env, .timeout = 30)
{
    load_data_xml("topo-2group-4socket-eth.xml");
    expect("0-1", 1, 0, "rsmi1", "0000:41:00.0", "eth1", "0000:42:00.0");
    expect("2-3", 0, 1, "rsmi1", "0000:41:00.0", "eth1", "0000:42:00.0");
    expect("4-5", 3, 2, "rsmi0", "0000:c1:00.0", "eth0", "0000:e1:00.0");
    expect("6-7", 2, 3, "rsmi0", "0000:c1:00.0", "eth0", "0000:e1:00.0");
    expect("7", 2, 3, "rsmi0", "0000:c1:00.0", "eth0", "0000:e1:00.0");
    /* Spanning packages 0 and 1: only package 1's devices intersect. */
    expect("1-2", -1, -1, "rsmi1", "0000:41:00.0", "eth1", "0000:42:00.0");
    expect("0-7", -1, -1, "rsmi0", "0000:c1:00.0", "eth0", "0000:e1:00.0");
}
