"""4. Submit: one prepared request (one compile) sent through launcher.slurm, the only module
that runs Slurm commands. pipeline (check/prepare/submit), request (Request, Rendered),
chain (--after, --model run:RUN), sweep (job arrays), export (export and eval jobs), live
and doctor (checks against the cluster)."""
