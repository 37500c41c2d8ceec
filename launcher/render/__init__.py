"""3. Render (pure): a Plan -> the sbatch script, plan.json (with the job contract) and the
job's environment. script (Jinja templates/; every #SBATCH value checked by
launcher.sbatch_values), logger_env (one W&B/MLflow run across requeues)."""
