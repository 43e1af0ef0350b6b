"""Fixtures shared by the integration tests: this machine's own llama.cpp build, and a tiny model."""

import pytest

from tests.tools import llama_cpp, tiny_model


@pytest.fixture(scope="session")
def x86_build(tmp_path_factory):
    """llama.cpp for this machine, built by the llama_build role as the scenarios build it, and shared with them
    (tests/tools/llama_cpp.role_build): nothing is compiled twice for one target in a make test. Returns the bin
    directory."""
    return llama_cpp.role_build(tmp_path_factory.mktemp("role-build"))


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    return tiny_model.write_model(tmp_path_factory.mktemp("model") / "tiny.gguf")
