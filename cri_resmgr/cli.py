"""The `cri-resmgr` command (setup.cfg's entry point, and `python -m cri_resmgr.cli`): the
relay's command line, which lives with the relay in `relay/cli.py`."""

from __future__ import annotations

from cri_resmgr.relay.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
