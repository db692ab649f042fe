"""`cri-resmgr replay DUMP.jsonl -runtime-socket S`: a recorded session, sent again.

To reproduce on a test node what a relay recorded in the field: point
-runtime-socket at a runtime, or at a relay in front of one with the field's policy
and configuration. Exit status 1 when a call's outcome differs from the recording.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cri_resmgr import flags
from cri_resmgr.simulate.calls import WorkloadError
from cri_resmgr.simulate.dumpread import read_dump
from cri_resmgr.simulate.replay import Replayed, RuntimeUnavailable, replay
from cri_resmgr.status.command import split_file

__all__ = ["COMMAND", "main"]

RUNTIME_SOCKET = flags.text("runtime-socket", "PATH", "The runtime (or relay) socket to send the calls to.", None,
                            required=True)
TIMING = flags.switch("timing", "Keep the recorded time between requests (default: as fast as the runtime answers).")
SPEED = flags.option("speed", "X", "With -timing, play X times faster.", 1.0, flags.number(low=0.001))
TIMEOUT = flags.option("timeout", "SECONDS", "Give up on one call after this long.", 60.0, flags.number(low=0.1))
QUIET = flags.switch("quiet", "Print only the calls whose outcome differs from the recording, and the summary.")

COMMAND = flags.Command(
    "cri-resmgr replay",
    "Send the CRI calls of a jsonl dump (DUMP.jsonl, after the flags; recorded with -dump 'full:.*' -dump-format "
    "jsonl) to a runtime again, in order, mapping the recorded pod and container ids to the new ones. Images are "
    "assumed present (image calls are not sent). Exit status 1 when an outcome differs from the recording.",
    (RUNTIME_SOCKET, TIMING, SPEED, TIMEOUT, QUIET),
    operands="DUMP.jsonl",
)


def main(argv: Sequence[str]) -> int:
    args, dump = split_file(argv, COMMAND)
    return COMMAND.run(args, lambda values: _replay(values, dump))


def _replay(values: flags.Values, dump: str | None) -> int:
    if dump is None:
        raise flags.UsageError("give the dump to replay: cri-resmgr replay [flags] DUMP.jsonl")
    socket = values[RUNTIME_SOCKET]
    assert socket is not None  # required
    try:
        calls = read_dump(dump).calls
    except WorkloadError as e:
        raise flags.CommandError(str(e), flags.EXIT_USAGE) from None
    quiet = values[QUIET]

    def show(r: Replayed) -> None:
        if quiet and not r.differs:
            return
        line = f"{r.call.where} {r.call.method}: {r.code}"
        if r.differs:
            line += f" (recorded {r.call.code}{': ' + r.call.details if r.call.details else ''})"
            line += f": {r.details}" if r.details else ""
        if r.new_id:
            line += f" id {r.new_id[:13]}"
        print(line, flush=True)

    try:
        result = replay(calls, socket, values[TIMING], values[SPEED], values[TIMEOUT], show)
    except RuntimeUnavailable as e:
        raise flags.CommandError(str(e)) from None
    skipped = ", ".join(f"{m} {n}" for m, n in sorted(result.skipped.items()))
    print(f"replayed {len(result.replayed)} calls to {socket}; {result.differing} differ from the recording"
          + (f"; not sent: {skipped}" if skipped else ""), file=sys.stderr if quiet else sys.stdout)
    return 1 if result.differing else 0
