"""Make this checkout importable as ansible_collections.graviton.llama_rpc for the pytest tests."""

from tests.tools.collection import importable

importable()
