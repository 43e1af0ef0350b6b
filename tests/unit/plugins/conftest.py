"""What the unit tests of several plugins share: real GGUF files written by tests/tools/tiny_model, and the tensor cache's C
helper compiled from the role's source."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.tools import tiny_model

TOOL_SOURCE = Path(__file__).resolve().parents[3] / "roles" / "llama_build" / "files" / "llama-rpc-cache.c"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "tiny.gguf", layers=4)


@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    """A 70B-shaped F32 model (about 274 GB) as a sparse file: the header is real, the weights a hole."""
    path = tmp_path_factory.mktemp("huge") / "huge.gguf"
    os.truncate(path, tiny_model.write_header_only(path))
    return path


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    path = tmp_path_factory.mktemp("tool") / "llama-rpc-cache"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(path), str(TOOL_SOURCE)], check=True)
    return str(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """Two layers whose feed-forward tensors are 11 MB each (over llama.cpp's 10 MiB threshold), the rest small."""
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "big.gguf", embd=256, layers=2, ff=10752, heads=4,
                                  kv_heads=2)
