#!/usr/bin/env python3
"""Writes the hwloc XML topologies of 8-GPU / 8-NIC nodes that test/test_rdma.c
loads (run from test/data/; the files are committed, this is how they were made).

Two sockets of 4 cores, two host bridges per socket, two PCIe switches per host
bridge, as on DGX-class nodes:
  topo-8gpu-8nic-pix.xml     every switch carries one GPU and one ConnectX NIC
                             (each GPU has a NIC of its own behind its switch)
  topo-8gpu-8nic-shared.xml  only the first switch of each host bridge is
                             populated, with two GPUs and two NICs (two GPUs tie
                             for two NICs: weft shares them out)
NIC names do not follow bus order (mlx5_3 sits at the lowest bus), so only
locality can give each GPU its NIC; the mapping is printed into each file."""

import sys

GPU_TYPE = "0302 [10de:2330] [10de:16c1] a1"
NIC_TYPE = "0200 [15b3:1021] [15b3:0041] 00"
BRIDGE_TYPE = "0604 [10b5:c010] [0000:0000] b0"
NIC_NAME = [3, 2, 1, 0, 7, 6, 5, 4]  # mlx5_<n> of the k-th NIC by bus id


class Gp:
    n = 0

    def __call__(self):
        Gp.n += 1
        return Gp.n


gp = Gp()


def pci(bus, dev=0, fn=0):
    return "0000:%02x:%02x.%x" % (bus, dev, fn)


def topology(shared):
    out, table = [], []
    gpu_i = nic_i = 0
    out.append('<?xml version="1.0" encoding="UTF-8"?>')
    out.append('<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    out.append('<topology version="2.0">')
    out.append('  <object type="Machine" os_index="0" cpuset="0x000000ff" complete_cpuset="0x000000ff" '
               'allowed_cpuset="0x000000ff" nodeset="0x00000003" complete_nodeset="0x00000003" '
               'allowed_nodeset="0x00000003" gp_index="%d">' % gp())
    for sock in range(2):
        cpus = 0xf << (4 * sock)
        out.append('    <object type="Package" os_index="%d" cpuset="0x%08x" complete_cpuset="0x%08x" '
                   'nodeset="0x%08x" complete_nodeset="0x%08x" gp_index="%d">'
                   % (sock, cpus, cpus, 1 << sock, 1 << sock, gp()))
        out.append('      <object type="NUMANode" os_index="%d" cpuset="0x%08x" complete_cpuset="0x%08x" '
                   'nodeset="0x%08x" complete_nodeset="0x%08x" gp_index="%d" local_memory="68719476736"/>'
                   % (sock, cpus, cpus, 1 << sock, 1 << sock, gp()))
        for c in range(4 * sock, 4 * sock + 4):
            out.append('      <object type="Core" os_index="%d" cpuset="0x%08x" complete_cpuset="0x%08x" gp_index="%d">'
                       % (c, 1 << c, 1 << c, gp()))
            out.append('        <object type="PU" os_index="%d" cpuset="0x%08x" complete_cpuset="0x%08x" gp_index="%d"/>'
                       % (c, 1 << c, 1 << c, gp()))
            out.append('      </object>')
        for hb in range(2):
            base = 0x10 + 0x40 * (2 * sock + hb)
            out.append('      <object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
                       % (gp(), base, base + 0x3f))
            for sw in range(1 if shared else 2):
                up = base + 1 + 0x10 * sw  # the switch's internal bus
                kinds = ["gpu", "gpu", "nic", "nic"] if shared else ["gpu", "nic"]
                out.append('        <object type="Bridge" gp_index="%d" bridge_type="1-1" depth="1" '
                           'bridge_pci="0000:[%02x-%02x]" pci_busid="%s" pci_type="%s" pci_link_speed="0.000000">'
                           % (gp(), up, up + len(kinds), pci(base, sw), BRIDGE_TYPE))
                for port, kind in enumerate(kinds):
                    bus = up + 1 + port
                    out.append('          <object type="Bridge" gp_index="%d" bridge_type="1-1" depth="2" '
                               'bridge_pci="0000:[%02x-%02x]" pci_busid="%s" pci_type="%s" pci_link_speed="0.000000">'
                               % (gp(), bus, bus, pci(up, port), BRIDGE_TYPE))
                    if kind == "gpu":
                        out.append('            <object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s" '
                                   'pci_link_speed="0.000000">' % (gp(), pci(bus), GPU_TYPE))
                        out.append('              <info name="PCIDevice" value="GH100 [H100 SXM5 80GB]"/>')
                        out.append('              <object type="OSDev" gp_index="%d" name="cuda%d" subtype="CUDA" '
                                   'osdev_type="5"/>' % (gp(), gpu_i))
                        table.append("cuda%d %s" % (gpu_i, pci(bus)))
                        gpu_i += 1
                    else:
                        name = "mlx5_%d" % NIC_NAME[nic_i]
                        out.append('            <object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%s" '
                                   'pci_link_speed="0.000000">' % (gp(), pci(bus), NIC_TYPE))
                        out.append('              <info name="PCIDevice" value="MT2910 Family [ConnectX-7]"/>')
                        out.append('              <object type="OSDev" gp_index="%d" name="%s" osdev_type="3"/>'
                                   % (gp(), name))
                        table.append("%s %s" % (name, pci(bus)))
                        nic_i += 1
                    out.append('            </object>')
                    out.append('          </object>')
                out.append('        </object>')
            out.append('      </object>')
        out.append('    </object>')
    out.append('  </object>')
    out.append('</topology>')
    out.insert(2, "<!-- written by gen-topo-gpu-nic.py; devices by bus id: %s -->" % "; ".join(table))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    for name, shared in (("topo-8gpu-8nic-pix.xml", False), ("topo-8gpu-8nic-shared.xml", True)):
        with open(name, "w") as f:
            f.write(topology(shared))
        print(name, file=sys.stderr)
