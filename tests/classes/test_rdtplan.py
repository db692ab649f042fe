"""The resctrl schemata a configuration asks for on given hardware (classes/rdtplan.py):
goresctrl's layout of partitions and classes, and what the hardware cannot give refused."""

import pytest

from cri_resmgr.classes.rdtplan import UNLIMITED_MBPS, CacheInfo, MbInfo, ResctrlInfo, plan
from cri_resmgr.config import parse_document
from cri_resmgr.config.classes import ClassConfigError

L3 = CacheInfo(cbm_mask=0xFFFFF, min_cbm_bits=2, num_closids=16, ids=(0, 1))
MB = MbInfo(min_bandwidth=10, bandwidth_gran=10, num_closids=8, ids=(0, 1))


def rdt(text):
    return parse_document("rdt:\n" + text, "f", ["none"]).rdt


def test_partitions_laid_out_in_order_and_classes_within_them():
    cfg = rdt("""
  Partitions:
    a:
      L3Allocation: "50%"
      MBAllocation: ["50%"]
      Classes:
        low: {L3Allocation: "25%", MBAllocation: ["50%"]}
        mid: {L3Allocation: "50-100%"}
        mask: {L3Allocation: "0xc"}
    b:
      L3Allocation: {all: "50%", "1": "25%"}
      Classes: {whole: {}}
""")
    s = plan(cfg, ResctrlInfo(l3=L3, mb=MB)).schemata
    # a: bits 0-9; low: 25% of 10 bits -> 3 bits; mid: the upper half; mask 0xc shifted to a's lowest bit.
    assert s["low"] == "L3:0=7;1=7\nMB:0=30;1=30\n"  # 50% of 50% -> 25 -> rounded up to the step of 10
    assert s["mid"] == "L3:0=3e0;1=3e0\nMB:0=50;1=50\n"
    assert s["mask"] == "L3:0=c;1=c\nMB:0=50;1=50\n"
    # b: after a (bits 10-19) on id 0; 25% from 50% (bits 10-14) on id 1.
    assert s["whole"] == "L3:0=ffc00;1=7c00\nMB:0=100;1=100\n"


def test_min_cbm_bits_widens_a_small_share():
    cfg = rdt('  Partitions: {p: {L3Allocation: "100%", Classes: {tiny: {L3Allocation: "1%"}}}}')
    info = CacheInfo(cbm_mask=0xFF, min_cbm_bits=3, num_closids=4, ids=(0,))
    assert plan(cfg, ResctrlInfo(l3=info, mb=None)).schemata["tiny"] == "L3:0=7\n"


def test_cdp_writes_code_and_data():
    cfg = rdt('  Partitions: {p: {L3Allocation: "100%", Classes: {c: {L3Allocation: "50%"}}}}')
    info = CacheInfo(cbm_mask=0xFF, min_cbm_bits=1, num_closids=4, ids=(0,), kinds=("L3CODE", "L3DATA"))
    assert plan(cfg, ResctrlInfo(l3=info, mb=None)).schemata["c"] == "L3CODE:0=f\nL3DATA:0=f\n"


def test_mba_mbps():
    cfg = rdt('  Partitions: {p: {MBAllocation: ["2000MBps"], Classes: {c: {MBAllocation: ["50%", "500MBps"]}, '
              'd: {}}}}')
    mb = MbInfo(min_bandwidth=10, bandwidth_gran=10, num_closids=8, ids=(0,), mbps=True)
    s = plan(cfg, ResctrlInfo(l3=None, mb=mb)).schemata
    assert (s["c"], s["d"]) == ("MB:0=500\n", "MB:0=2000\n")
    cfg = rdt('  Partitions: {p: {MBAllocation: ["50%"], Classes: {c: {}}}}')
    assert plan(cfg, ResctrlInfo(l3=None, mb=mb)).schemata["c"] == f"MB:0={UNLIMITED_MBPS}\n"


def test_optional_resources_left_out_mandatory_refused():
    text = '  Partitions: {p: {L3Allocation: "100%", MBAllocation: ["50%"], Classes: {c: {}}}}'
    with pytest.raises(ClassConfigError, match=r"^rdt: L3Allocation is given but this machine's resctrl has no L3"):
        plan(rdt(text), ResctrlInfo(l3=None, mb=MB))
    p = plan(rdt("  Options: {L3: {Optional: true}}\n" + text), ResctrlInfo(l3=None, mb=MB))
    assert p.schemata["c"] == "MB:0=50;1=50\n" and "L3 cache allocation" in p.notes[0]


@pytest.mark.parametrize(("text", "message"), [
    ('  Partitions: {a: {L3Allocation: "60%"}, b: {L3Allocation: "50%"}}',
     "rdt.Partitions.b.L3Allocation: the partitions ask for 110% of cache id 0: over-subscribed"),
    ('  Partitions: {a: {L3Allocation: "0xff"}, b: {L3Allocation: "0xf0"}}',
     "rdt.Partitions.b.L3Allocation: overlaps partition a on cache id 0 (0xf0 and 0xff): over-subscribed"),
    ('  Partitions: {a: {L3Allocation: "0x1fffff"}}', "rdt.Partitions.a.L3Allocation: 0x1fffff is outside"),
    ('  Partitions: {a: {L3Allocation: {"0": "50%"}}}', "rdt.Partitions.a.L3Allocation: nothing for cache id 1"),
    ('  Partitions: {a: {L3Allocation: "5%"}}', "rdt.Partitions.a.L3Allocation: 5% is 1 bits of cache id 0's 20"),
    ('  Partitions: {a: {L3Allocation: "50%", Classes: {c: {L3Allocation: "0x7ff"}}}}',
     "rdt.Partitions.a.Classes.c.L3Allocation: 0x7ff does not fit its partition's 10 bits"),
    ("  Partitions: {a: {Classes: {" + ", ".join(f"c{i}: {{}}" for i in range(8)) + "}}}",
     "rdt: 8 classes need 8 CLOSes besides the root group's; the hardware has 8"),
])
def test_what_the_hardware_cannot_give_is_refused(text, message):
    text = text.replace("Partitions: {a: {Classes", 'Partitions: {a: {L3Allocation: "100%", MBAllocation: ["100%"], '
                        'Classes') if "CLOSes" in message else text
    with pytest.raises(ClassConfigError) as e:
        plan(rdt(text), ResctrlInfo(l3=L3, mb=MB))
    assert str(e.value).startswith(message)
