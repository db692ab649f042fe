import sys

from cri_resmgr_agent.cli import main

sys.exit(main())
