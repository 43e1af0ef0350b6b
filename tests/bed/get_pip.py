"""Offline stand-in for pip's get-pip.py bootstrap script, for ansible-test's sanity venvs.

ansible-test creates each sanity venv without pip and runs get-pip.py (downloaded from a host that is
unreachable here) with get-pip's arguments: `pip install` options and packages, plus get-pip's own
--no-setuptools / --no-wheel. This does the same from reachable parts: the interpreter's ensurepip
installs a pip, which then installs what was asked for (the pip version ansible-test pins, from PyPI).
"""

import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY_FLAGS = {"--no-setuptools", "--no-wheel"}

if __name__ == "__main__":
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_FLAGS]
    # ensurepip points PIP_CONFIG_FILE at /dev/null in this process; the pip runs after it must see the
    # machine's pip configuration (index, CA bundle) as get-pip would.
    environment = dict(os.environ)
    ensurepip.bootstrap(upgrade=True)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "install", "--upgrade", *args], check=True, env=environment)
    # ensurepip of Python < 3.12 also brings setuptools: take it away again where get-pip was told not to.
    if "--no-setuptools" in sys.argv:
        subprocess.run([*pip, "uninstall", "--yes", "--quiet", "setuptools"], check=True, env=environment)
