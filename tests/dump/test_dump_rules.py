"""The dump rule language: parsing, matching precedence, caching, bad specs."""

import pytest

from cri_resmgr.dump.rules import DumpSpecError, Level, parse_specs

V1 = "/runtime.v1.RuntimeService/"
ALPHA = "/runtime.v1alpha2.RuntimeService/"
IMG = "/runtime.v1.ImageService/"


def level(specs, path):
    return parse_specs(specs).level(path)


def test_nothing_matches_means_off():
    rules = parse_specs([])
    assert rules.empty
    assert rules.level(V1 + "CreateContainer") is Level.OFF
    assert level(["full:List.*"], V1 + "CreateContainer") is Level.OFF


@pytest.mark.parametrize("word,expected", [
    ("off", Level.OFF), ("suppress", Level.OFF), ("name", Level.NAME), ("short", Level.NAME),
    ("full", Level.FULL), ("verbose", Level.FULL), ("count", Level.COUNT), ("FULL", Level.FULL),
])
def test_level_keywords_and_synonyms(word, expected):
    assert level([f"{word}:Version"], V1 + "Version") is expected


def test_exact_name_beats_regexp_regardless_of_order():
    for spec in ("name:CreateContainer,full:.*", "full:.*,name:CreateContainer"):
        rules = parse_specs([spec])
        assert rules.level(V1 + "CreateContainer") is Level.NAME, spec
        assert rules.level(V1 + "StartContainer") is Level.FULL, spec


def test_last_matching_regexp_wins():
    rules = parse_specs(["full:.*,count:List.*,off:ListImages.*"])
    assert rules.level(V1 + "Version") is Level.FULL
    assert rules.level(V1 + "ListContainers") is Level.COUNT
    assert rules.level(IMG + "ListImages") is Level.OFF
    # Reversed: the broad rule, given last, overrides the narrow ones.
    assert level(["count:List.*,full:.*"], V1 + "ListContainers") is Level.FULL


def test_later_exact_rule_for_same_name_overrides_earlier():
    assert level(["full:Version,name:Version"], V1 + "Version") is Level.NAME


def test_regexp_is_anchored_full_match_on_short_name():
    rules = parse_specs(["full:Container"])  # exact, so no substring matching
    assert rules.level(V1 + "CreateContainer") is Level.OFF
    rules = parse_specs(["full:Create.*"])
    assert rules.level(V1 + "CreateContainer") is Level.FULL
    assert rules.level(V1 + "ReCreateContainer") is Level.OFF
    assert level(["full:List"], V1 + "ListContainers") is Level.OFF


def test_patterns_may_match_the_full_path():
    assert level(["full:/runtime.v1.RuntimeService/ListContainers"], V1 + "ListContainers") is Level.FULL
    assert level(["full:/runtime.v1.RuntimeService/ListContainers"], ALPHA + "ListContainers") is Level.OFF
    rules = parse_specs([r"name:.*v1alpha2.*"])
    assert rules.level(ALPHA + "Version") is Level.NAME
    assert rules.level(V1 + "Version") is Level.OFF
    assert level([r"full:/runtime\.v1\.ImageService/.*"], IMG + "PullImage") is Level.FULL


def test_exact_path_beats_exact_name():
    spec = "full:/runtime.v1.RuntimeService/Version,off:Version"
    rules = parse_specs([spec])
    assert rules.level(V1 + "Version") is Level.FULL
    assert rules.level(ALPHA + "Version") is Level.OFF


def test_reset_drops_earlier_rules_but_keeps_current_level():
    rules = parse_specs(["full:.*,reset,name:Version"])
    assert rules.level(V1 + "CreateContainer") is Level.OFF
    assert rules.level(V1 + "Version") is Level.NAME
    rules = parse_specs(["count:Version,RESET,Status"])
    assert rules.level(V1 + "Version") is Level.OFF
    assert rules.level(V1 + "Status") is Level.COUNT


def test_bare_pattern_inherits_last_level():
    rules = parse_specs(["name:Version,Status,List.*,full:CreateContainer,Start.*"])
    assert rules.level(V1 + "Status") is Level.NAME
    assert rules.level(V1 + "ListContainers") is Level.NAME
    assert rules.level(V1 + "StartContainer") is Level.FULL


def test_bare_pattern_before_any_level_is_full():
    assert level(["CreateContainer"], V1 + "CreateContainer") is Level.FULL


def test_several_specs_accumulate_in_order():
    rules = parse_specs(["full:.*", "off:List.*", "Version"])
    assert rules.level(V1 + "CreateContainer") is Level.FULL
    assert rules.level(V1 + "ListContainers") is Level.OFF
    assert rules.level(V1 + "Version") is Level.OFF  # bare: inherits "off" across specs
    assert level(["full:.*", "reset"], V1 + "Version") is Level.OFF


def test_a_single_string_is_one_spec():
    assert parse_specs("name:Version,full:Status").level(V1 + "Status") is Level.FULL


def test_regexp_containing_a_colon_is_a_bare_pattern():
    rules = parse_specs(["name:Version,(?:Stop|Remove)Container"])
    assert rules.level(V1 + "StopContainer") is Level.NAME
    assert rules.level(V1 + "RemoveContainer") is Level.NAME
    assert rules.level(V1 + "StartContainer") is Level.OFF


def test_whitespace_around_items_is_ignored():
    assert level([" name : Version , full:Status"], V1 + "Version") is Level.NAME


def test_level_is_cached_per_path():
    rules = parse_specs(["full:List.*"])
    for _ in range(5):
        assert rules.level(V1 + "ListContainers") is Level.FULL
        assert rules.level(V1 + "Version") is Level.OFF
    assert rules.evaluations == 2


def test_unknown_paths_are_matched_by_their_last_component():
    assert level(["full:Frobnicate"], "/acme.v9.Gadget/Frobnicate") is Level.FULL
    assert level(["full:.*"], "/acme.v9.Gadget/Frobnicate") is Level.FULL


@pytest.mark.parametrize("spec,named", [
    ("ful:CreateContainer", "'ful'"),
    ("full:(", "'('"),
    ("full:List[", "'List['"),
    ("full:", "'full:'"),
    ("full:Version,,name:Status", "full:Version,,name:Status"),
    ("full:Version,", "full:Version,"),
    ("full", "'full'"),
    ("[bad", "'[bad'"),
])
def test_bad_specs_raise_naming_the_item(spec, named):
    with pytest.raises(DumpSpecError) as err:
        parse_specs(["name:Version", spec])
    assert named in str(err.value)
    assert isinstance(err.value, ValueError)


def test_describe_lists_effective_rules():
    rules = parse_specs(["full:.*,name:Version,reset,count:List.*,off:Status"])
    assert rules.describe() == ["off:Status", "count:List.*"]
