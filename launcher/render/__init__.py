"""3. Render (pure): a Plan -> the sbatch script, plan.json (with the job contract) and the
job's environment. script (Jinja templates/), sbatch_values (every #SBATCH value checked),
logger_env (one W&B/MLflow run across requeues)."""
