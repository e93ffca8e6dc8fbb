"""How a config becomes a pipeline, below the run (run/) and the server (serve/) that use it: setup.py (the
one call before any composition: the nodes built from the classes, the resolvers), compose.py (find and
compose conf/; a variant's name and stage order; one composition per sweep or study shape), nodes.py (the
`stage` group and the `system` group's bases, built from the classes), check.py (every field of a run
config checked before any work), build.py (Hydra stage nodes -> checked stages -> Pipeline).
"""
