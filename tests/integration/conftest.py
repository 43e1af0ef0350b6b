"""Fixtures shared by the integration tests: this machine's own llama.cpp build, and a tiny model."""

from pathlib import Path

import pytest

from ansible_collections.graviton.llama_rpc.plugins.module_utils.cpu_features import describe_cpu
from tests.tools import llama_cpp, tiny_model


@pytest.fixture(scope="session")
def x86_build():
    """llama.cpp for this machine, built like the llama_build role builds it (ccache shared with the
    bookworm containers). Returns the bin directory."""
    host = describe_cpu(Path("/proc/cpuinfo").read_text(), "x86_64")
    return llama_cpp.build("x86_64", host["cmake_args"], ["ggml-rpc-server", "llama-completion"])


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "tiny.gguf")
