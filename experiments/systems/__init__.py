"""Live memory systems under test: adapters that put a memory *service* behind one retrieval channel.

A service (an HTTP API, an MCP tool server, a Python library such as mem0) implements the small
`MemorySystem` protocol in `protocol.py`; `experiments.systems.retriever.SystemRetriever` wraps any of
them as a channel, so fusion, rank stages, metrics, statistics, studies, sweeps and the gate apply
unchanged.
"""
