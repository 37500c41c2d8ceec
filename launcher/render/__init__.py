"""3. Render (pure): a Plan -> the sbatch script, plan.json (with the job contract) and the
job's environment. script (every #SBATCH value checked by launcher.sbatch_values; the
text's sections in batch_text, plain Python: no Jinja on sf submit's path), logger_env (one
W&B/MLflow run across requeues)."""
