"""Registers the `stage` config group's nodes, built from the stage classes (experiments/run/stage_nodes.py).

Hydra imports every module under hydra_plugins/ when it first builds its config search path, which every
composition does before it composes anything: the @hydra.main apps (after parsing their arguments, so an
app's --help imports no stage), compose() in the gate, the reports and the tests. So every compose path
sees the same nodes, and none has to remember to import them.
"""

from experiments.run.stage_nodes import register_stage_nodes

register_stage_nodes()
