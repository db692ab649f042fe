import sys
from pathlib import Path

# Test support modules beside these tests (fake_runtime) are imported by name.
sys.path.insert(0, str(Path(__file__).parent))
