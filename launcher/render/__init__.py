"""3. Render (pure): a Plan -> the sbatch script, plan.json (with the job contract) and the
job's environment. script (every #SBATCH value checked by launcher.sbatch_values, every shell
word quoted, then templates/train.sbatch.j2 or a site's template that extends it, through
sbatch_template: Jinja imported on use, the template precompiled), logger_env (one W&B/MLflow
run across requeues)."""
