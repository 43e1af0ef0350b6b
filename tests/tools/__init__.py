
import os as _os
import sys as _sys

# Run as `python -m tests...` in the test bed, the checkout is importable as the collection through the
# collection path that tests/bed/env.sh sets up (pytest's conftest.py does the same for the tests).
for _path in filter(None, _os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(":")):
    if _path not in _sys.path:
        _sys.path.append(_path)
