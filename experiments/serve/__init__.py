"""memeval-serve: any memeval variant served as a memory service (service.py is the core; http_face.py
its HTTP face in the AtomicMemory shape; cli.py the console script)."""
