"""sf: a Slurm-native launcher for verl.

The pipeline is the folder listing, one subpackage a stage:

    spec/ -> compile/ -> render/ -> submit/ -> monitor/      (login node)
    injob/                                                    (inside the Slurm job)

cli/ is the click layer over them. Shared by all: plan (what the login node decided; the job
reads it from plan.json), states (Slurm -> run states, the phases the job emits), runs (the
only writer of run records), slurm (the only runner of Slurm commands), errors,
sbatch_values (what may stand on an #SBATCH line), checkpoints (verl's checkpoint layout).
Imports run the other way, top down: scripts/import-graph draws them (docs/architecture.md).
"""

__version__ = "0.1.0"
