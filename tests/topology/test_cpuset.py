import pickle

import pytest

from cri_resmgr.topology.cpuset import CPUSet, format_cpulist, parse_cpulist


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", []),
        ("   \n", []),
        ("0", [0]),
        ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
        ("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]),
        (" 4 , 1-2 ", [1, 2, 4]),
        ("7-7", [7]),
        ("3,1,2,1", [1, 2, 3]),
        ("100-102,1023", [100, 101, 102, 1023]),
    ],
)
def test_parse(text, expected):
    assert list(CPUSet.parse(text)) == expected
    assert CPUSet(text) == CPUSet(expected)


@pytest.mark.parametrize("bad", ["a", "1,,2", ",1", "1,", "3-1", "1-", "-1", "1-2-3", "+1", "1.5", "0x3", "٣"])
def test_parse_rejects_bad_text_naming_it(bad):
    with pytest.raises(ValueError) as err:
        CPUSet.parse(bad)
    assert repr(bad) in str(err.value)


def test_parse_requires_str():
    with pytest.raises(TypeError):
        parse_cpulist(b"0-1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cpus, text",
    [
        ([], ""),
        ([5], "5"),
        ([0, 1], "0-1"),
        ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
        ([11, 10, 3, 0, 2, 1, 8], "0-3,8,10-11"),
        ([0, 2, 4], "0,2,4"),
    ],
)
def test_format(cpus, text):
    assert str(CPUSet(cpus)) == text
    assert format_cpulist(cpus) == text
    assert CPUSet.parse(text) == CPUSet(cpus)


@pytest.mark.parametrize("bad", [[-1], [1.0], [True], ["1"], [None]])
def test_constructor_rejects_non_cpu_ids(bad):
    with pytest.raises(ValueError, match="invalid CPU id"):
        CPUSet(bad)


def test_iteration_is_ascending_regardless_of_input_order():
    cpus = CPUSet([9, 3, 7, 1, 100, 0])
    assert list(cpus) == [0, 1, 3, 7, 9, 100]
    assert cpus.sorted() == (0, 1, 3, 7, 9, 100)
    assert (cpus.min(), cpus.max()) == (0, 100)


def test_min_max_of_empty_set_raise():
    with pytest.raises(ValueError):
        CPUSet().min()
    with pytest.raises(ValueError):
        CPUSet().max()


def test_set_algebra_returns_cpusets():
    a, b = CPUSet("0-5"), CPUSet("4-9")
    assert a | b == CPUSet("0-9")
    assert a & b == CPUSet("4-5")
    assert a - b == CPUSet("0-3")
    assert a ^ b == CPUSet("0-3,6-9")
    for result in (a | b, a & b, a - b, a ^ b, a.union([20]), a.intersection(range(3)), a.difference({0})):
        assert isinstance(result, CPUSet)
    assert a.union(b, [20]) == CPUSet("0-9,20")
    assert a.intersection(b, [5]) == CPUSet("5")
    assert a.difference(b, [0]) == CPUSet("1-3")
    assert a.symmetric_difference([0, 6]) == CPUSet("1-6")


def test_operators_refuse_plain_sets():
    with pytest.raises(TypeError):
        CPUSet("0-1") | {2}  # noqa: B018


def test_membership_len_bool_and_subset():
    cpus = CPUSet("2-3")
    assert 2 in cpus and 4 not in cpus
    assert len(cpus) == 2 and len(CPUSet()) == 0
    assert cpus and not CPUSet()
    assert cpus.issubset(CPUSet("0-3")) and not cpus.issubset([2])
    assert cpus <= CPUSet("2-3") and cpus < CPUSet("1-3") and not cpus < cpus
    assert CPUSet("0-3").issuperset(cpus) and CPUSet("0-3") > cpus
    assert cpus.isdisjoint([0, 1]) and not cpus.isdisjoint([3])


def test_equality_and_hashing():
    assert CPUSet("0-2") == CPUSet([2, 1, 0])
    assert hash(CPUSet("0-2")) == hash(CPUSet([0, 1, 2]))
    assert len({CPUSet("0-1"), CPUSet([1, 0]), CPUSet("2")}) == 2
    assert CPUSet("0") != frozenset({0})  # no silent cross-type equality
    assert {CPUSet("1-2"): "x"}[CPUSet([1, 2])] == "x"


def test_immutable():
    cpus = CPUSet("0-1")
    with pytest.raises(AttributeError):
        cpus._cpus = frozenset({5})  # type: ignore[misc]
    with pytest.raises(AttributeError):
        cpus.extra = 1  # type: ignore[attr-defined]
    assert cpus == CPUSet("0-1")


def test_repr_and_pickle_round_trip():
    cpus = CPUSet("0-3,8")
    assert repr(cpus) == "CPUSet('0-3,8')"
    assert pickle.loads(pickle.dumps(cpus)) == cpus
    assert CPUSet(cpus) == cpus


def test_text_is_made_once_and_belongs_to_its_set():
    cpus = CPUSet(range(0, 4096, 3))
    text = str(cpus)
    assert str(cpus) is text and text == format_cpulist(range(0, 4096, 3))
    # A set derived from it has its own text; the cached one does not leak into it.
    more = cpus | CPUSet([1])
    assert str(more) == format_cpulist(list(range(0, 4096, 3)) + [1]) and str(cpus) is text
    assert str(CPUSet.parse(" 0-2,\n5 ")) == "0-2,5"  # canonical, not the text given
    assert str(pickle.loads(pickle.dumps(cpus))) == text


def test_algebra_and_order_agree_with_frozensets_on_big_sparse_sets():
    import random

    rng = random.Random(37)
    for _ in range(200):
        a = frozenset(rng.sample(range(0, 8192, rng.choice([1, 2, 3, 7])), rng.choice([0, 1, 5, 30, 900])))
        b = frozenset(rng.sample(range(0, 8192), rng.choice([0, 1, 25, 3000])))
        x, y = CPUSet(a), CPUSet(b)
        assert list(x) == sorted(a) and len(x) == len(a) and bool(x) == bool(a)
        assert (x | y).as_frozenset() == a | b and (x & y).as_frozenset() == a & b
        assert (x - y).as_frozenset() == a - b and (x ^ y).as_frozenset() == a ^ b
        assert (x <= y, x < y, x >= y, x > y) == (a <= b, a < b, a >= b, a > b)
        assert x.isdisjoint(b) == a.isdisjoint(b) and x.issubset(a | b) and (x | y).issuperset(b)
        assert x.union(b, [1]) == CPUSet(a | b | {1}) and x.difference(b) == CPUSet(a - b)
        if a:
            assert (x.min(), x.max()) == (min(a), max(a))
        assert CPUSet(str(x)) == x and CPUSet.of_mask(x.as_mask()) == x and hash(CPUSet(sorted(a))) == hash(x)
        probe = rng.randrange(8200)
        assert (probe in x) == (probe in a)


def test_ids_past_the_largest_possible_cpu_are_refused_from_any_source():
    with pytest.raises(ValueError, match="16384"):
        CPUSet([1, 16384])
    with pytest.raises(ValueError, match="16384"):
        CPUSet(range(16385))
    with pytest.raises(ValueError, match="16384"):
        CPUSet("16384")
    assert len(CPUSet(range(16384))) == 16384


def test_bad_ids_in_a_long_list_are_named():
    with pytest.raises(ValueError, match="'x'"):
        CPUSet([*range(100), "x"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="-1"):
        CPUSet([*range(100), -1])
    with pytest.raises(ValueError, match="True"):
        CPUSet([*range(100), True])
