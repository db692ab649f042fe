"""Dumping of the CRI messages the relay forwards (see docs/dump.md)."""

from cri_resmgr.dump.dumper import Dumper
from cri_resmgr.dump.format import FORMATS
from cri_resmgr.dump.rules import DumpSpecError, Level, Rules, parse_specs

__all__ = ["Dumper", "DumpSpecError", "FORMATS", "Level", "Rules", "parse_specs"]
