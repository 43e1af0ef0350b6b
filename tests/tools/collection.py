"""Make this checkout importable as ansible_collections.graviton.llama_rpc, for Python that uses the collection's code
outside Ansible (pytest unit tests, Molecule verifiers, benchmarks)."""

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def importable():
    """Link the checkout into a temporary ansible_collections tree (removed at exit) and put it first on sys.path."""
    root = Path(tempfile.mkdtemp(prefix="llama-rpc-pytest-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    (root / "ansible_collections" / "graviton").mkdir(parents=True)
    (root / "ansible_collections" / "graviton" / "llama_rpc").symlink_to(ROOT)
    sys.path.insert(0, str(root))
    return root
