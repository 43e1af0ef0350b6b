"""Make this checkout importable as ansible_collections.graviton.llama_rpc for the pytest tests."""

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_collections = Path(tempfile.mkdtemp(prefix="llama-rpc-pytest-"))
atexit.register(shutil.rmtree, _collections, ignore_errors=True)
(_collections / "ansible_collections" / "graviton").mkdir(parents=True)
(_collections / "ansible_collections" / "graviton" / "llama_rpc").symlink_to(ROOT)
sys.path.insert(0, str(_collections))
