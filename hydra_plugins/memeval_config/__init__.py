"""What every composition of memeval's configs relies on, set up when Hydra starts:

- the `stage` config group's nodes, built from the stage classes (experiments/run/stage_nodes.py), and the
  `system` group's bases, built from the live adapters' classes (experiments/systems/nodes.py);
- the `stage_order` resolver that derives `variant.stages` (experiments/run/stage_order.py);
- the config source that names a variant after its file, and its search-path entry
  (experiments/run/variant_name.py: Hydra registers the plugin classes it finds among this module's names).

Hydra imports every module under hydra_plugins/ when it first builds its config search path, which every
composition does before it composes anything: the @hydra.main apps (after parsing their arguments, so an
app's --help imports no stage), compose() in the gate, the reports and the tests. So every compose path
sees the same nodes, and none has to remember to import them.
"""

from experiments.run.stage_nodes import register_stage_nodes
from experiments.run.stage_order import register_stage_order
from experiments.run.variant_name import FileNameSearchPath, FileNameSource
from experiments.systems.nodes import register_system_nodes

__all__ = ["FileNameSearchPath", "FileNameSource"]

register_stage_nodes()
register_system_nodes()
register_stage_order()
