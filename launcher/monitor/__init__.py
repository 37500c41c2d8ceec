"""5. Monitor: poll (one batched sacct/squeue for many runs, hetjob and array aware, state
from launcher.states), metrics (verl's file logger -> tables and plots), attach (a shell in
a running job)."""
