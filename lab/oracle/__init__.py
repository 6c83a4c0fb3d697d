"""The ordering oracle: the seed's device PM rules (rules.py) and the checker
that judges every observed callback sequence against them (judge.py), fed by
observe.py from the pmtest log and the kernel's power trace events."""

from .judge import Violation, judge, transitions  # noqa: F401
from .observe import (Call, bound_drivers, from_callbacks, from_pmtest, from_trace, loaded_drivers,  # noqa: F401
                      pmtest_parents, split_kernels, tree_from_trace)
