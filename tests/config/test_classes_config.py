"""The blockio and rdt modules (config/classes.py): the issue's example parses, quantities
read as Kubernetes reads them, and every error is one line naming the key."""

import pytest
import yaml

from cri_resmgr.config import ConfigError, parse_document, parse_modules

NAMES = ["none", "static"]

EXAMPLE = """
blockio:
  Classes:
    slowwriter:
      - Devices: [/dev/vda, /dev/sd*]
        ThrottleWriteBps: 1M
    highprio:
      - Weight: 400
  QosClasses: {BestEffort: slowwriter}
rdt:
  Options: {L3: {Optional: true}, MB: {Optional: true}}
  Partitions:
    shared:
      L3Allocation: "100%"
      MBAllocation: ["100%"]
      Classes:
        besteffort: {L3Allocation: "30%", MBAllocation: ["25%"]}
        guaranteed: {L3Allocation: "100%"}
  QosClasses: {BestEffort: besteffort}
"""


def test_the_example_and_its_round_trip():
    c = parse_document(EXAMPLE, "f", NAMES)
    slow = c.blockio.classes["slowwriter"][0]
    assert slow.devices == ("/dev/vda", "/dev/sd*") and slow.throttle_write_bps == 1_000_000
    assert c.blockio.classes["highprio"][0].weight == 400
    assert c.blockio.qos_classes == {"BestEffort": "slowwriter"}
    assert set(c.rdt.classes) == {"besteffort", "guaranteed"} and c.rdt.l3_optional and c.rdt.mb_optional
    doc = c.to_document()
    again = parse_document(yaml.safe_dump({"blockio": doc["blockio"], "rdt": doc["rdt"]}), "f", NAMES)
    assert (again.blockio, again.rdt) == (c.blockio, c.rdt)


def test_quantities_as_kubernetes_reads_them():
    def bps(q):
        text = f"blockio: {{Classes: {{a: [{{Devices: [/dev/vda], ThrottleReadBps: {q}}}]}}}}"
        return parse_document(text, "f", NAMES).blockio.classes["a"][0].throttle_read_bps

    assert (bps("1M"), bps("1Mi"), bps("512k"), bps(1000)) == (1_000_000, 1_048_576, 512_000, 1000)


def test_modules_from_the_agent():
    c = parse_modules({"blockio": "Classes: {a: [{Weight: 100}]}", "rdt": "Partitions: {}"}, "cm", NAMES)
    assert c.blockio.classes["a"][0].weight == 100 and c.rdt.partitions == ()


@pytest.mark.parametrize(("text", "message"), [
    ("blockio: {Clases: {}}", "f: blockio.Clases: unknown key (did you mean Classes? known: Classes, QosClasses)"),
    ("blockio: {Classes: [a]}", "f: blockio.Classes: expected a mapping, got list"),
    ("blockio: {Classes: {a: 3}}", "f: blockio.Classes.a: expected a list of device rules, got int"),
    ("blockio: {Classes: {a: [{Devices: [vda], Weight: 100}]}}",
     "f: blockio.Classes.a[0].Devices: expected a list of device paths or globs (/dev/sd*)"),
    ("blockio: {Classes: {a: [{Devices: [/dev/vda], ThrottleWriteBps: 1X}]}}",
     "f: blockio.Classes.a[0].ThrottleWriteBps: not a Kubernetes quantity: '1X' (bad suffix 'X')"),
    ("blockio: {Classes: {a: [{Devices: [/dev/vda], ThrottleWriteBps: 0}]}}",
     "f: blockio.Classes.a[0].ThrottleWriteBps: expected a positive quantity (1M, 512Ki), got 0"),
    ("blockio: {Classes: {a: [{ThrottleWriteBps: 1M}]}}",
     "f: blockio.Classes.a[0]: throttling needs Devices (which disks to throttle)"),
    ("blockio: {Classes: {a: [{Weight: 5}]}}", "f: blockio.Classes.a[0].Weight: expected a number from 10 to 1000"),
    ("blockio: {Classes: {a: [{Devices: [/dev/vda]}]}}",
     "f: blockio.Classes.a[0]: a rule sets nothing (give a Throttle* limit or a Weight)"),
    ("blockio: {Classes: {../x: [{Weight: 100}]}}", "f: blockio.Classes.../x: a name is 1-64 letters"),
    ("blockio: {QosClasses: {BestEffort: nope}}",
     "f: blockio.QosClasses.BestEffort: unknown class 'nope' (classes: none)"),
    ("blockio: {QosClasses: {Besteffort: a}}", "f: blockio.QosClasses.Besteffort: unknown key"),
    ("rdt: {Options: {L3: {Optional: yes please}}}", "f: rdt.Options.L3.Optional: expected true or false"),
    ("rdt: {Partitions: {p: {L3Allocation: 120%}}}",
     "f: rdt.Partitions.p.L3Allocation: '120%': a percentage from 1% to 100%"),
    ("rdt: {Partitions: {p: {L3Allocation: '0x101'}}}",
     "f: rdt.Partitions.p.L3Allocation: '0x101': a cache bit mask is one block of ones"),
    ("rdt: {Partitions: {p: {L3Allocation: {x: 50%}}}}", "f: rdt.Partitions.p.L3Allocation.x: expected all or"),
    ("rdt: {Partitions: {p: {MBAllocation: [fast]}}}",
     "f: rdt.Partitions.p.MBAllocation: 'fast': expected \"N%\" or \"NMBps\""),
    ("rdt: {Partitions: {p: {Classes: {x: {Foo: 1}}}}}",
     "f: rdt.Partitions.p.Classes.x.Foo: unknown key (known: L3Allocation, MBAllocation)"),
    ("rdt: {Partitions: {p: {Classes: {x: {}}}, q: {Classes: {x: {}}}}}",
     "f: rdt.Partitions.q.Classes.x: class x is also in partition p"),
    ("rdt: {Partitions: {p: {L3Allocation: 50%}, q: {}}}", "f: rdt.Partitions.q.L3Allocation: missing"),
])
def test_errors_are_one_line_naming_the_key(text, message):
    with pytest.raises(ConfigError) as e:
        parse_document(text, "f", NAMES)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_errors_are_bounded():
    huge = "x" * 1_000_000
    for doc in ({"blockio": {"Classes": {huge: [{"Weight": 100}]}}}, {"blockio": {huge: 1}},
                {"rdt": {"Partitions": {"p": {"L3Allocation": huge}}}},
                {"blockio": {"Classes": {"a": [{"Devices": ["/dev/vda"], "ThrottleReadBps": huge}]}}}):
        with pytest.raises(ConfigError) as e:
            parse_document(yaml.safe_dump(doc, width=10**7), "f", NAMES)
        assert len(str(e.value)) < 300 and "characters)" in str(e.value), str(e.value)[:300]


def test_cache_id_ranges_are_bounded():
    with pytest.raises(ConfigError, match=r"rdt\.Partitions\.p\.L3Allocation\.0-999999999: cache ids are 0 to 4095"):
        parse_document("rdt: {Partitions: {p: {L3Allocation: {0-999999999: 50%}}}}", "f", NAMES)


def test_the_sample_configmaps_modules_parse():
    from pathlib import Path
    for doc in yaml.safe_load_all((Path(__file__).parents[2] / "agent/deploy/sample-configmaps.yaml").read_text()):
        c = parse_modules(doc["data"], doc["metadata"]["name"], ["none", "static", "static-plus"])
        if "blockio" in doc["data"]:
            assert c.blockio.classes["slowwriter"][0].throttle_write_bps == 50_000_000
