"""Adapters to live memory systems under test: the harness's instruments, not part of the system under test.

A memory system memeval measures but does not contain (an HTTP API, an MCP tool server, a Python library
such as mem0) implements the small `MemorySystem` protocol in `protocol.py`; `retriever.SystemRetriever`
(the `system` stage) wraps any of them as a channel, so fusion, rank stages, metrics, statistics,
studies, sweeps and the gate apply unchanged. `retrieval/` needs only the `Retriever` base class and its
optional index hooks (retrieval/stage.py); it imports nothing from here (tests/project/test_architecture.py).
"""
