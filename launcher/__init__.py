"""sf: a Slurm-native launcher for verl.

The pipeline is visible in the modules:
spec -> compile -> render -> slurm (submit) -> monitor, with runs holding the records.
"""

__version__ = "0.1.0"
