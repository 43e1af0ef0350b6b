"""The test images' cache of the bytecode of modules that Python imports from zip files (the Dockerfile installs it).

Ansible sends every module run its module and module_utils as source, in a zip (AnsiballZ), and zipimport compiles
them each time: measured in a test container, 0.10 of a module run's 0.26 CPU-s, and a warm `make test` runs some
2,800 modules. Here the compiled code is kept in CACHE, keyed by the interpreter's bytecode magic number, the file's
path inside its zip and its source, and given this run's path when it is read back (tracebacks name it). Anything
unexpected falls back to compiling, as Python does; a user who cannot write CACHE compiles. The roles and modules run
as they are: only the compiling is skipped, as Python skips it for files on disk (__pycache__). Only the test images
have this; nothing a user installs does.
"""

import os
import zipimport

CACHE = "/var/cache/testbed-zipimport"
_compile_source = zipimport._compile_source  # pylint: disable=protected-access


def _with_filename(code, filename):
    """code and every code object inside it, named as compiled from filename."""
    constants = tuple(_with_filename(constant, filename) if isinstance(constant, type(code)) else constant
                      for constant in code.co_consts)
    return code.replace(co_filename=filename, co_consts=constants)


def _cached_compile_source(pathname, source):
    import hashlib  # pylint: disable=import-outside-toplevel
    import importlib.util  # pylint: disable=import-outside-toplevel
    import marshal  # pylint: disable=import-outside-toplevel

    inside = pathname.split(".zip" + os.sep, 1)[-1]
    path = os.path.join(CACHE, hashlib.sha256(importlib.util.MAGIC_NUMBER + inside.encode() + b"\0" + source).hexdigest())
    try:
        with open(path, "rb") as cached:
            return _with_filename(marshal.loads(cached.read()), pathname)
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = _compile_source(pathname, source)
    written = f"{path}.{os.getpid()}"
    try:
        with open(written, "wb") as out:
            out.write(marshal.dumps(code))
        os.replace(written, path)
    except OSError:
        pass
    return code


zipimport._compile_source = _cached_compile_source  # pylint: disable=protected-access
