"""Make this checkout importable as ansible_collections.graviton.llama_rpc, for Python that uses the collection's code
outside Ansible (pytest unit tests, Molecule verifiers, benchmarks), and run its modules as Ansible does."""

import atexit
import json
import os
import shutil
import subprocess
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


def start_module(name, args, work_dir):
    """One of the collection's modules in its own process, as Ansible runs it (its arguments in a file in work_dir);
    returns the Popen, whose stdout is the module's JSON result."""
    arguments = Path(work_dir) / f"{name}-args.json"
    arguments.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return subprocess.Popen([sys.executable, str(ROOT / "plugins" / "modules" / f"{name}.py"), str(arguments)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
