"""`python -m cri_resmgr_webhook`: the same as the cri-resmgr-webhook script."""
import sys

from .cli import main

sys.exit(main())
