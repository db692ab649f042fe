"""cri_resmgr.flags, the command-line parser of the relay, the agent and the webhook:
the spellings it takes, its one-line errors, -help, and the three programs using it alike."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cri_resmgr import flags
from cri_resmgr.flags import Command, CommandError, HelpRequested, UsageError

NAME = flags.text("name", "NAME", "A name.", "none")
PATH = flags.text("path", "PATH", "A path.", None)
CERT = flags.text("cert", "FILE", "A certificate.", "", required=True)
VERBOSE = flags.switch("verbose", "Say more.")
RULE = flags.repeated("rule", "SPEC", "A rule (repeatable).")
MODE = flags.choice("mode", "A mode.", ("fast", "safe"), "safe")
PORT = flags.option("port", "PORT", "A port.", 8443, flags.integer(0, 65535))
GRACE = flags.option("grace", "SECONDS", "A grace period.", 10.0, flags.number(0))

COMMAND = Command("prog", "Does things.", (NAME, PATH, VERBOSE, RULE, MODE, PORT, GRACE))
STRICT = Command("prog", "Needs a certificate.", (CERT, PORT))


def usage_error(argv: list[str], command: Command = COMMAND) -> str:
    with pytest.raises(UsageError) as err:
        command.parse(argv)
    assert err.value.code == 2
    return str(err.value)


def test_defaults():
    values = COMMAND.parse([])
    assert (values[NAME], values[PATH], values[VERBOSE], values[RULE], values[MODE], values[PORT],
            values[GRACE]) == ("none", None, False, (), "safe", 8443, 10.0)


@pytest.mark.parametrize("argv", [["-name", "x"], ["-name=x"], ["--name", "x"], ["--name=x"]])
def test_one_or_two_dashes_value_after_space_or_equals(argv):
    assert COMMAND.parse(argv)[NAME] == "x"


def test_values_are_taken_as_they_are():
    values = COMMAND.parse(["-name", "-verbose", "-path=a=b", "-rule", ""])
    assert (values[NAME], values[PATH], values[VERBOSE], values[RULE]) == ("-verbose", "a=b", False, ("",))


def test_switches_repeats_and_the_last_value():
    values = COMMAND.parse(["-verbose", "-rule", "a", "--rule=b", "-name", "x", "-name", "y"])
    assert (values[VERBOSE], values[RULE], values[NAME]) == (True, ("a", "b"), "y")


def test_types_and_choices():
    values = COMMAND.parse(["-port", "0", "-grace", "2.5", "-mode", "FAST"])
    assert (values[PORT], values[GRACE], values[MODE]) == (0, 2.5, "fast")


@pytest.mark.parametrize("argv,message", [
    (["-nope"], "no such option: -nope"),
    (["--nope=1"], "no such option: --nope"),
    (["-name"], "option -name requires a value"),
    (["--name"], "option --name requires a value"),
    (["-verbose=true"], "option -verbose takes no value"),
    (["-mode", "slow"], "invalid value for -mode: 'slow' is not one of 'fast', 'safe'"),
    (["-port", "http"], "invalid value for -port: 'http' is not a valid integer"),
    (["-port", "70000"], "invalid value for -port: 70000 is not in the range 0-65535"),
    (["-port", "http", "-port", "80"], "invalid value for -port: 'http' is not a valid integer"),
    (["--grace=-1"], "invalid value for --grace: -1 is less than 0, the least it may be"),
    (["-grace", "soon"], "invalid value for -grace: 'soon' is not a valid number"),
    (["extra"], "unexpected extra argument (extra)"),
    (["-"], "unexpected extra argument (-)"),
    (["--", "-name"], "unexpected extra argument (-name)"),
])
def test_usage_errors_name_the_flag_as_typed(argv, message):
    assert usage_error(argv) == message


def test_required_flags():
    assert usage_error(["-port", "1"], STRICT) == "missing option: -cert"
    assert STRICT.parse(["-cert", "c.pem", "--"])[CERT] == "c.pem"


@pytest.mark.parametrize("spelling", ["-h", "-help", "--help"])
def test_help_is_asked_for(spelling):
    with pytest.raises(HelpRequested):
        COMMAND.parse(["-name", "x", spelling, "-nope"])


def test_help_lists_every_flag_with_its_default():
    text = STRICT.help()
    assert text.startswith("usage: prog [flags]\n\nNeeds a certificate.\n")
    assert "  -cert, --cert FILE\n        A certificate. (required)\n" in text
    assert "  -port, --port PORT\n        A port. (default: 8443)\n" in text
    assert text.endswith("  -h, -help, --help\n        Show this help and exit.")
    assert "(default" not in COMMAND.help().split("-path, --path")[1].splitlines()[1]


def test_run_prints_help_or_one_error_line(capsys):
    def body(values: flags.Values) -> int:
        if values[NAME] == "usage":
            raise UsageError("bad\ncombination")
        if values[NAME] == "runtime":
            raise CommandError("cannot listen", 1)
        if values[NAME] == "interrupt":
            raise KeyboardInterrupt
        return 7

    assert COMMAND.run(["-help"], body) == 0
    assert capsys.readouterr().out.startswith("usage: prog [flags]")
    assert COMMAND.run(["-nope"], body) == 2
    assert capsys.readouterr().err == "prog: error: no such option: -nope\n"
    assert COMMAND.run(["-name", "usage"], body) == 2
    assert capsys.readouterr().err == "prog: error: bad combination\n"
    assert COMMAND.run(["-name", "runtime"], body) == 1
    assert capsys.readouterr().err == "prog: error: cannot listen\n"
    assert COMMAND.run(["-name", "interrupt"], body) == 130
    assert COMMAND.run([], body) == 7


PROGRAMS = {
    "cri-resmgr": "cri_resmgr.cli",
    "cri-resmgr-agent": "cri_resmgr_agent",
    "cri-resmgr-webhook": "cri_resmgr_webhook",
}


def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NODE_NAME="node1")
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60,
                          env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("prog", PROGRAMS)
def test_the_three_programs_parse_and_report_alike(prog):
    module = PROGRAMS[prog]
    for args, message in [(["-bogus"], "no such option: -bogus"), (["--bogus=1"], "no such option: --bogus"),
                          (["-log-level" if prog != "cri-resmgr" else "-policy"], "requires a value"),
                          # cri-resmgr's first word that is no flag is a command (issue 38: a guess for a typo)
                          (["extra"], "no such command: extra (commands: " if prog == "cri-resmgr"
                           else "unexpected extra argument (extra)")]:
        result = run(module, *args)
        assert result.returncode == 2, result
        assert result.stderr.startswith(f"{prog}: error: ") and message in result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
    for spelling in ("-h", "-help", "--help"):
        result = run(module, spelling)
        assert result.returncode == 0, result
        assert result.stdout.startswith(f"usage: {prog} [flags]") and "  -h, -help, --help" in result.stdout
